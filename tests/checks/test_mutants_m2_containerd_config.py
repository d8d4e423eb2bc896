"""collect's discovery for the containerd checks (checks/containerd/config.py ``discover``):
every file the default config imports, the config Canonical Kubernetes records for its own
containerd (canonical/k8s-snap: `--config=` in $SNAP_COMMON/args/containerd), and the runtime
binaries those files and the drop-in directories name, as presence. containerd's runtime
`options.BinaryName` is a path; only an absolute one names a file collect can record (a bare
name is looked up on containerd's PATH). Written for the mutants the mutation tier left alive:
the existing tests reached discover only with the runtime named in /etc/containerd itself,
which the drop-in glob `/etc/containerd/*.toml` also finds."""
from checks.containerd.config import DEFAULT_CONFIG, binary_names, discover
from tests.checks.containerd_support import tree

CRI = 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes'  # CRI_V2 (config version 2)
IMPORTED = "/opt/containerd/nvidia.toml"  # outside /etc/containerd: only the import finds it
SNAP_ARGS = "/var/snap/k8s/common/args/containerd"
SNAP_CONFIG = "/srv/k8s/etc/containerd/config.toml"
ROOT = ('version = 2\nimports = ["' + IMPORTED + '"]\n'
        f'[{CRI}.runc.options]\nBinaryName = "/usr/bin/runc"\n'
        f'[{CRI}.bare.options]\nBinaryName = "nvidia-container-runtime"\n'
        f'[{CRI}.odd.options]\nBinaryName = 5\n')
NVIDIA = (f'version = 2\n[{CRI}.nvidia.options]\n'
          'BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n')


def test_imports_are_read_and_their_absolute_binaries_are_presence(tmp_path) -> None:
    host = tree(tmp_path, {DEFAULT_CONFIG: ROOT, IMPORTED: NVIDIA})
    reads, presence = discover(host)
    assert reads == [DEFAULT_CONFIG, IMPORTED]
    # The bare name and the number are not paths collect could record.
    assert presence == ["/usr/bin/runc", "/usr/local/nvidia/toolkit/nvidia-container-runtime"]


def test_a_drop_in_names_presence_but_is_not_a_discovered_read(tmp_path) -> None:
    # /etc/containerd/conf.d/*.toml: the checks read the drop-in directories statically.
    dropin = "/etc/containerd/conf.d/99-nvidia.toml"
    host = tree(tmp_path, {DEFAULT_CONFIG: "version = 2\n", dropin: NVIDIA})
    reads, presence = discover(host)
    assert reads == [DEFAULT_CONFIG]
    assert presence == ["/usr/local/nvidia/toolkit/nvidia-container-runtime"]


def test_an_unparsable_drop_in_names_nothing(tmp_path) -> None:
    dropin = "/etc/containerd/conf.d/99-broken.toml"
    host = tree(tmp_path, {DEFAULT_CONFIG: "version = 2\n", dropin: "[unclosed\n"})
    assert discover(host) == ([DEFAULT_CONFIG], [])


def test_the_config_the_k8s_snap_records_is_followed_too(tmp_path) -> None:
    host = tree(tmp_path, {DEFAULT_CONFIG: "version = 2\n",
                           SNAP_ARGS: f"--address=/run/containerd/containerd.sock\n"
                                      f"--config={SNAP_CONFIG}\n",
                           SNAP_CONFIG: NVIDIA})
    reads, presence = discover(host)
    assert reads == [DEFAULT_CONFIG, SNAP_CONFIG]
    assert presence == ["/usr/local/nvidia/toolkit/nvidia-container-runtime"]


def test_binary_names_takes_absolute_strings_only() -> None:
    data = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {
        "a": {"options": {"BinaryName": "/usr/bin/a"}},
        "b": {"options": {"BinaryName": "b"}},
        "c": {"options": {"BinaryName": ["/usr/bin/c"]}},
        "d": {"options": {}},
    }}}}}
    assert binary_names(data) == ["/usr/bin/a"]
