"""The 2.x merge rules tests/checks/test_mutants_mi_containerd_config.py states, asked of the
real containerd 2.1 (`config dump`): a version-0/1 drop-in is migrated to the version merged
so far before the merge, a version-2 or -3 drop-in is merged as written with its version
overriding, and the merged config is migrated to version 3 afterwards (containerd
cmd/containerd/server/config/config.go ``LoadConfig``; docs/man/containerd-config.toml.5.md).
Only the keys our merge keeps are compared: the dump also prints every default."""
import subprocess
import sys

import pytest

from agent.host.seam import Host
from checks.containerd.config import CRI_V2, CRI_V3_RUNTIME, load_effective, table
from checks.containerd.migrate import CRI_V3_IMAGES
from tests.checks.containerd_support import write_files
from tests.integration.containerd.support import containerd_17, containerd_21

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.integration

RUNTIME = f'plugins."{CRI_V3_RUNTIME}"'
OLD = f'plugins."{CRI_V2}"'
CASES = {
    "v1-drop-ins-under-a-v2-root": {
        "config.toml": f'version = 2\n[{OLD}.containerd.runtimes.from_root]\nruntime_type = "io.containerd.runc.v2"\n',
        "conf.d/10-a.toml": '[plugins.cri.containerd.runtimes.a]\nruntime_type = "io.containerd.runc.v2"\n',
        "conf.d/20-b.toml": 'version = 1\n[plugins.cri.containerd.runtimes.b]\nruntime_type = "io.containerd.runc.v2"\n',
    },
    "a-v3-drop-in-under-a-v2-root": {
        "config.toml": f'version = 2\n[{OLD}.containerd.runtimes.from_root]\nruntime_type = "io.containerd.runc.v2"\n',
        "conf.d/99.toml": f'version = 3\n[{RUNTIME}.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n',
    },
    "a-v2-drop-in-under-a-v3-root": {
        "config.toml": f'version = 3\n[{RUNTIME}.containerd.runtimes.runc.options]\nBinaryName = "/a"\n',
        "conf.d/50.toml": (f'version = 2\n[{OLD}.containerd.runtimes.runc.options]\nBinaryName = "/b"\n'
                           f'[{OLD}.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'),
    },
    "a-v1-registry-then-a-v3-images-drop-in": {
        "config.toml": f'version = 3\n[{RUNTIME}]\nenable_cdi = true\n',
        "conf.d/10.toml": '[plugins.cri.registry]\nconfig_path = "/etc/containerd/certs.d"\n',
        "conf.d/20.toml": f'version = 3\n[plugins."{CRI_V3_IMAGES}".registry]\nconfig_path = "/x"\n',
    },
}


def real_and_own(binary, config, major):
    """containerd's own `config dump` of ``config`` (the oracle) and load_effective's merge of
    the same files for that containerd major version."""
    dump = subprocess.run([binary, "--config", config, "config", "dump"], capture_output=True,
                          text=True, timeout=30)
    assert dump.returncode == 0, dump.stderr
    own = load_effective(Host("/"), config, major)
    assert own.errors == []
    return tomllib.loads(dump.stdout), own


@pytest.mark.parametrize("name", sorted(CASES))
def test_2x_drop_in_versions_merge_as_containerd_21_does(tmp_path, name):
    binary = containerd_21()
    files = dict(CASES[name])
    files["config.toml"] = f'imports = ["{tmp_path}/conf.d/*.toml"]\n' + files["config.toml"]
    write_files(tmp_path, {f"/{k}": v for k, v in files.items()})
    config = str(tmp_path / "config.toml")
    real, own = real_and_own(binary, config, 2)
    assert real["version"] == own.version == 3
    real_runtimes = table(real, "plugins", CRI_V3_RUNTIME, "containerd", "runtimes")
    # The dump adds the default config's own `runc` runtime (docs/cri/config.md).
    assert set(real_runtimes) == set(own.runtimes()) | {"runc"}
    for rt, ours in own.runtimes().items():
        # The dump prints an unset option as its zero value ("") or not at all.
        assert (table(real_runtimes, rt, "options").get("BinaryName") or "") == \
            table(ours, "options").get("BinaryName", "")
    assert (table(real, "plugins", CRI_V3_IMAGES, "registry").get("config_path") or "") == \
        table(own.merged, "plugins", CRI_V3_IMAGES, "registry").get("config_path", "")


def test_1x_non_zero_values_override_and_zero_values_do_not_as_containerd_17_does(tmp_path):
    # 1.x mergeConfig: mergo.WithOverride replaces a value only with a non-zero one.
    binary = containerd_17()
    write_files(tmp_path, {
        "/config.toml": f'imports = ["{tmp_path}/conf.d/*.toml"]\noom_score = -999\n'
                        '[metrics]\ngrpc_histogram = false\naddress = "127.0.0.1:1338"\n',
        "/conf.d/10.toml": 'oom_score = 1\n[metrics]\ngrpc_histogram = true\n',
        "/conf.d/20.toml": '[metrics]\naddress = ""\n',
    })
    config = str(tmp_path / "config.toml")
    real, own = real_and_own(binary, config, 1)
    assert real["oom_score"] == own.merged["oom_score"] == 1
    assert real["metrics"] == own.merged["metrics"] == {"grpc_histogram": True,
                                                        "address": "127.0.0.1:1338"}


def test_1x_lists_append_and_a_version_1_cri_table_is_read_as_containerd_17_does(tmp_path):
    binary = containerd_17()
    write_files(tmp_path, {
        "/config.toml": f'version = 1\nimports = ["{tmp_path}/conf.d/*.toml"]\n'
                        'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs"]\n'
                        '[plugins.cri.containerd.runtimes.nvidia]\n'
                        'runtime_type = "io.containerd.runc.v2"\n',
        "/conf.d/10.toml": 'disabled_plugins = ["io.containerd.snapshotter.v1.zfs"]\n',
    })
    config = str(tmp_path / "config.toml")
    real, own = real_and_own(binary, config, 1)
    assert real["disabled_plugins"] == own.merged["disabled_plugins"] == [
        "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs"]
    # 1.x dumps the version-1 `cri` table migrated to its full name; the file's runtimes
    # table replaced the default one (with its runc) whole.
    real_runtimes = table(real, "plugins", CRI_V2, "containerd", "runtimes")
    assert set(real_runtimes) == set(own.runtimes()) == {"nvidia"}
