"""checks/containerd/snap.py: where Canonical Kubernetes records its containerd config.

By hand from canonical/k8s-snap (the module's sources): the arguments file
/var/snap/k8s/common/args/containerd holds one `--flag=value` a line, the value possibly
quoted (src/k8s/pkg/snap/util/arguments.go, utils.ParseArgumentLine), and the last line for a
flag wins; the lock file /var/snap/k8s/common/lock/containerd-config-dir holds the directory,
whose config.toml containerd is started with (src/k8s/pkg/snap/snap.go ContainerdConfigDir).
"""
import pytest

from checks.containerd.snap import is_snap_host, looked_at, snap_config
from tests.checks.containerd_support import tree

ARGS = "/var/snap/k8s/common/args/containerd"
LOCK = "/var/snap/k8s/common/lock/containerd-config-dir"


@pytest.mark.parametrize("args, expected", [
    # the last --config line wins, surrounding blanks and quotes go, the path is normalized
    ("--address=/run/containerd.sock\n--config=/a/config.toml\n  --config='/b//etc/./c.toml'  \n",
     ("/b/etc/c.toml", f"{ARGS} --config")),
    ('--config="/x/containerd/config.toml"\n', ("/x/containerd/config.toml", f"{ARGS} --config")),
    # only blanks and quotes are stripped: a name may end in any letter
    ("--config='/srv/X/config-X'\n", ("/srv/X/config-X", f"{ARGS} --config")),
    # another flag that merely starts with --config is not it
    ("--config-dir=/y\n", (None, "")),
    # an empty or relative value is no record: the lock file is asked next (absent here)
    ("--config=\n", (None, "")),
    ("--config=''\n", (None, "")),
    ("--config=etc/containerd/config.toml\n", (None, "")),
])
def test_the_arguments_file_names_the_config(tmp_path, args, expected):
    assert snap_config(tree(tmp_path, {ARGS: args})) == expected


@pytest.mark.parametrize("lock, expected", [
    ("/ck8s/etc/containerd\n", ("/ck8s/etc/containerd/config.toml", LOCK)),
    ("  /ck8s//etc/containerd/  \n", ("/ck8s/etc/containerd/config.toml", LOCK)),
    ("relative/etc/containerd\n", (None, "")),
    ("\n", (None, "")),
])
def test_the_lock_file_names_the_config_directory(tmp_path, lock, expected):
    assert snap_config(tree(tmp_path, {LOCK: lock})) == expected


def test_a_relative_argument_falls_back_to_the_lock_file(tmp_path):
    host = tree(tmp_path, {ARGS: "--config=rel/config.toml\n", LOCK: "/z/etc/containerd\n"})
    assert snap_config(host) == ("/z/etc/containerd/config.toml", LOCK)


def test_no_records_no_config(tmp_path):
    assert snap_config(tree(tmp_path, {})) == (None, "")


@pytest.mark.parametrize("path", [ARGS, LOCK, "/snap/k8s/current/bin/containerd"])
def test_any_one_record_or_the_snaps_binary_makes_a_snap_host(tmp_path, path):
    assert is_snap_host(tree(tmp_path, {path: "x\n"})) is True


def test_a_host_without_them_is_no_snap_host(tmp_path):
    assert is_snap_host(tree(tmp_path, {"/etc/containerd/config.toml": "version = 2\n"})) is False


def test_looked_at_names_the_record_or_both_records():
    assert looked_at("/c.toml", f"{ARGS} --config") == ["/c.toml", f"{ARGS} --config"]
    assert looked_at("/c.toml", "") == ["/c.toml", ARGS, LOCK]
