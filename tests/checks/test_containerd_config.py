"""The effective-config merge against containerd's own published 2.x merge result, plus
property tests: arbitrary bytes in any file these checks parse never raise out of a check."""
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config import Config
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host
from checks.allocation.allocation_owner import ALLOCATION_OWNER
from checks.containerd.cdi_spec_current import CDI_SPEC_CURRENT
from checks.containerd.config import CRI_V2, CRI_V3_RUNTIME, load_effective, resolve_imports
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.policy import ResolvedPolicy, load_policy
from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

UPSTREAM = REPO / "tests" / "fixtures" / "containerd" / "upstream"


def write(root: Path, files):
    for path, data in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data if isinstance(data, bytes) else data.encode())


def merge_test_tree(tmp_path):
    write(tmp_path, {
        "/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
        "/etc/containerd/conf.d/01-runc.toml": (UPSTREAM / "containerd2-merge-test.dropin-1-runc.toml").read_text(),
        "/etc/containerd/conf.d/02-nvidia.toml": (UPSTREAM / "containerd2-merge-test.dropin-2-nvidia.toml").read_text(),
    })
    return Host(tmp_path)


def test_2x_deep_merge_equals_containerds_published_result(tmp_path):
    eff = load_effective(merge_test_tree(tmp_path), "/etc/containerd/config.toml", 2)
    expected = tomllib.loads((UPSTREAM / "containerd2-merge-test.expected-merged-cri-plugin.toml").read_text())
    # containerd 2.x then reads the merged version-2 config as version 3: the merged CRI
    # runtime settings are found in the version-3 runtime plugin (plugins/cri/runtime/plugin.go).
    assert eff.version == 3
    assert eff.merged["plugins"][CRI_V3_RUNTIME] == expected


def test_1x_keeps_only_the_last_files_cri_table(tmp_path):
    eff = load_effective(merge_test_tree(tmp_path), "/etc/containerd/config.toml", 1)
    last = tomllib.loads((UPSTREAM / "containerd2-merge-test.dropin-2-nvidia.toml").read_text())
    assert eff.merged["plugins"][CRI_V2] == last["plugins"][CRI_V2]
    assert "runc" not in eff.runtimes()
    assert eff.plugin_owner[CRI_V2] == "/etc/containerd/conf.d/02-nvidia.toml"


def test_v3_root_migrates_a_v2_drop_in_before_merging(tmp_path):
    write(tmp_path, {
        "/etc/containerd/config.toml": (UPSTREAM / "nvidia-ctk-installer.v3.after.config.toml").read_text(),
        "/etc/containerd/conf.d/50-runc.toml": (UPSTREAM / "containerd2-merge-test.dropin-1-runc.toml").read_text(),
    })
    eff = load_effective(Host(tmp_path), "/etc/containerd/config.toml", 2)
    assert eff.cri_key() == CRI_V3_RUNTIME
    runc = eff.runtimes()["runc"]
    assert runc["options"] == {"BinaryName": "/usr/bin/runc", "SystemdCgroup": True}


def test_imports_relative_to_the_importing_file_and_globbed_sorted(tmp_path):
    write(tmp_path, {"/etc/containerd/conf.d/b.toml": "", "/etc/containerd/conf.d/a.toml": "",
                     "/etc/containerd/conf.d/c.txt": ""})
    got = resolve_imports(Host(tmp_path), "/etc/containerd/config.toml", ["conf.d/*.toml", "/x/y.toml", 7])
    assert got == ["/etc/containerd/conf.d/a.toml", "/etc/containerd/conf.d/b.toml", "/x/y.toml"]


def test_import_loops_terminate(tmp_path):
    write(tmp_path, {"/etc/containerd/config.toml": 'imports = ["/etc/containerd/config.toml", "*.toml"]\n'})
    eff = load_effective(Host(tmp_path), "/etc/containerd/config.toml", 1)
    assert eff.loaded == ["/etc/containerd/config.toml"] and not eff.errors


CHECKS = (CONTAINERD_NVIDIA_RUNTIME, CONTAINERD_CDI, CDI_SPEC_CURRENT, ALLOCATION_OWNER)
TARGETS = (
    "/etc/containerd/config.toml",
    "/etc/containerd/conf.d/99-nvidia.toml",
    "/etc/cdi/nvidia.yaml",
    "/var/run/cdi/nvidia.json",
    "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json",
    "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
    "/proc/driver/nvidia/version",
)
VERSIONS = [{"argv": ["containerd", "--version"], "rc": 0, "stdout": "containerd x 1.7.24\n"}]


def _run_all(files):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root, {"/etc/containerd/config.toml": 'version = 2\nimports = ["conf.d/*.toml"]\n'})
        write(root, files)
        host = Host(root, commands=RecordedCommands(VERSIONS, "test"))
        for path in ("dra", "device-plugin"):
            pol = ResolvedPolicy(load_policy(1), path, settings=Config().model_dump())
            for check in CHECKS:
                out = check.run(host, pol)  # must return, never raise
                assert out.status in ("pass", "warn", "fail", "unknown", "skip")
                assert isinstance(out.summary, str) and out.summary


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(TARGETS), data=st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(target, data):
    _run_all({target: data})


toml_like = st.text(alphabet=st.sampled_from(list('[]."=\n abcdeinpvrtu_0123{}#,\'')), max_size=300)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=toml_like, spec=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["cdiVersion", "kind", "devices", "name", "containerEdits", "deviceNodes",
                         "mounts", "hooks", "path", "hostPath", "args", "preparedClaims", "v2",
                         "nodeBootID", "checkpointState", "Data", "PodDeviceEntries", "ResourceName"]),
        inner, max_size=4),
    max_leaves=12))
def test_structured_garbage_never_raises(text, spec):
    import json

    blob = json.dumps(spec)
    _run_all({"/etc/containerd/conf.d/99-nvidia.toml": text, "/var/run/cdi/nvidia.json": blob,
              "/etc/cdi/nvidia.yaml": blob,
              "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json": blob,
              "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint": blob})


def _toml_value(v):
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_value(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"


_keys = st.sampled_from(["version", "imports", "plugins", "io.containerd.grpc.v1.cri", "cri",
                         "io.containerd.cri.v1.runtime", "containerd", "runtimes", "nvidia",
                         "runtime_type", "options", "BinaryName", "enable_cdi", "cdi_spec_dirs"])
_values = st.recursive(
    st.booleans() | st.integers(-3, 4) | st.sampled_from(["io.containerd.runc.v2", "conf.d/*.toml", "/etc/containerd/config.toml", "", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=15)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(root=st.dictionaries(_keys, _values, max_size=4), dropin=st.dictionaries(_keys, _values, max_size=4))
def test_structured_containerd_configs_never_raise(root, dropin):
    """Valid TOML of the right vocabulary but arbitrary shape (plugins = 3, runtimes = [], ...)."""
    def render(d):
        return "".join(f"{_toml_value(k)} = {_toml_value(v)}\n" for k, v in d.items())
    _run_all({"/etc/containerd/config.toml": render({"imports": ["conf.d/*.toml"], **root}),
              "/etc/containerd/conf.d/99-nvidia.toml": render(dropin)})
