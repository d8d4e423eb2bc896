"""containerd-nvidia-runtime, each way it fails, in full: summary, fix, code and details.

Expected texts are written by hand from the rules the check states (containerd docs/cri/config.md:
a runtime is a table with runtime_type and options.BinaryName; containerd 1.x replaces the whole
CRI plugin table per imported file; the runc v2 shim looks a bare BinaryName up on its PATH;
nvidia-ctk 1.18.1+ writes /etc/containerd/conf.d/99-nvidia.toml). containerd's `--version` is
replayed (1.7.24 = 1.x merging, 2.1.4 = 2.x); `config dump` is only replayed where a test says.
"""

from agent.config import Config
from agent.host.seam import Host
from agent.hostview import CommandResult
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.containerd.effective import nodeadm_fix
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.answers_support import Answers
from tests.checks.containerd_support import V2X, V17, policy, tree, write_files

ROOT = "/etc/containerd/config.toml"
CRI = 'plugins."io.containerd.grpc.v1.cri"'
RT = f"{CRI}.containerd.runtimes"
NVIDIA = (f'[{RT}.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
          f'[{RT}.nvidia.options]\nBinaryName = "/usr/bin/nvidia-container-runtime"\n')
RUNC = f'[{RT}.runc]\nruntime_type = "io.containerd.runc.v2"\n'
CONFIGURE = ("Run `nvidia-ctk runtime configure --runtime=containerd` (NVIDIA Container Toolkit) "
             "and restart containerd.")
NCR = "/usr/bin/nvidia-container-runtime"


def run(host, pol=None):
    return CONTAINERD_NVIDIA_RUNTIME.run(host, pol or policy())


def v2(**settings) -> ResolvedPolicy:
    return ResolvedPolicy(load_policy(2), "device-plugin", settings=Config(**settings).model_dump())


# -- the handler exists but is wrong ---------------------------------------------------------
def test_a_handler_that_is_not_a_table_says_how_to_write_it(tmp_path):
    out = run(tree(tmp_path, {ROOT: f'version = 2\n[{RT}]\nnvidia = "x"\n'}, V17))
    assert (out.status, out.code) == ("fail", "config-unloadable")
    assert out.summary == "containerd cannot load its config: runtime handler 'nvidia' is not a table"
    assert out.remediation == (
        "Write the 'nvidia' runtime as a table with runtime_type and options.BinaryName (or "
        "re-run `nvidia-ctk runtime configure --runtime=containerd`), then restart containerd.")
    assert out.details["source"] == "own merge with containerd 1.x semantics"
    assert out.details["loaded"] == [ROOT]


def test_a_wrong_runtime_type_names_both_types_and_the_fix(tmp_path):
    text = (f'version = 2\n[{RT}.nvidia]\nruntime_type = "io.containerd.runc.v1"\n'
            f'[{RT}.nvidia.options]\nBinaryName = "{NCR}"\n')
    out = run(tree(tmp_path, {ROOT: text}, V17, execs=(NCR,)))
    assert (out.status, out.code) == ("fail", "runtime-type-not-runc-v2")
    assert out.summary == ("runtime handler 'nvidia' has runtime_type 'io.containerd.runc.v1', not "
                           "'io.containerd.runc.v2'")
    assert out.remediation == ('Set runtime_type = "io.containerd.runc.v2" for the \'nvidia\' '
                               "runtime and restart containerd.")
    assert (out.details["runtime_type"], out.details["binary_name"]) == ("io.containerd.runc.v1", NCR)
    assert out.details["source"] == "own merge with containerd 1.x semantics"


def test_a_binary_name_that_is_not_a_string_is_no_binary_name(tmp_path):
    for value in ("5", '""', "true"):
        text = (f'version = 2\n[{RT}.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
                f'[{RT}.nvidia.options]\nBinaryName = {value}\n')
        out = run(tree(tmp_path / value.strip('"') / "x", {ROOT: text}, V17))
        assert (out.status, out.code) == ("fail", "binary-name-missing"), value
        assert out.summary == ("runtime handler 'nvidia' has no options.BinaryName: it runs plain "
                               "runc, which does not inject GPUs")
        assert out.details["runtime_type"] == "io.containerd.runc.v2"
        assert out.details["source"] == "own merge with containerd 1.x semantics"


def test_a_binary_that_is_not_there_names_it(tmp_path):
    out = run(tree(tmp_path, {ROOT: "version = 2\n" + NVIDIA}, V17))
    assert (out.status, out.code) == ("fail", "binary-not-executable")
    assert out.summary == ("runtime handler 'nvidia' names BinaryName "
                           "/usr/bin/nvidia-container-runtime, which is not an executable on this host")
    assert out.details["source"] == "own merge with containerd 1.x semantics"
    assert out.details["binary_name"] == NCR


# -- the handler is missing -------------------------------------------------------------------
def _replaced(tmp_path, execs=()):
    files = {ROOT: 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
             "/etc/containerd/conf.d/10-nvidia.toml": "version = 2\n" + NVIDIA,
             "/etc/containerd/conf.d/20-other.toml": f'version = 2\n[{CRI}]\nenable_cdi = true\n'}
    return run(tree(tmp_path, files, V17, execs=execs + (NCR,)))


def test_a_later_dropin_that_replaces_the_cri_table_is_named(tmp_path):
    out = _replaced(tmp_path)
    assert (out.status, out.code) == ("fail", "handler-replaced-by-later-dropin")
    assert out.summary == (
        "runtime handler 'nvidia' is defined in /etc/containerd/conf.d/10-nvidia.toml but "
        "containerd 1.x replaces the whole CRI plugin table with the one in "
        "/etc/containerd/conf.d/20-other.toml (imported after it), which does not define it")
    assert out.remediation == (
        "containerd 1.x does not merge drop-ins: keep every CRI setting, including the 'nvidia' "
        "runtime, in the one file that is imported last (/etc/containerd/conf.d/20-other.toml), "
        "or upgrade to containerd 2.x (deep merge).")
    assert out.details["defined_in"] == ["/etc/containerd/conf.d/10-nvidia.toml"]
    assert out.details["cri_table_from"] == "/etc/containerd/conf.d/20-other.toml"
    assert out.details["source"] == "own merge with containerd 1.x semantics"
    assert out.details["loaded"] == [ROOT, "/etc/containerd/conf.d/10-nvidia.toml",
                                     "/etc/containerd/conf.d/20-other.toml"]


def test_a_replaced_handler_on_a_nodeadm_host_adds_nodeadms_fix(tmp_path):
    out = _replaced(tmp_path, execs=("/usr/bin/nodeadm",))
    assert out.code == "handler-replaced-by-later-dropin"
    assert out.remediation == (
        "containerd 1.x does not merge drop-ins: keep every CRI setting, including the 'nvidia' "
        "runtime, in the one file that is imported last (/etc/containerd/conf.d/20-other.toml), "
        "or upgrade to containerd 2.x (deep merge). " + nodeadm_fix("nvidia"))


DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"


def test_an_unimported_dropin_without_imports(tmp_path):
    out = run(tree(tmp_path, {ROOT: "version = 2\n" + RUNC, DROPIN: "version = 2\n" + NVIDIA}, V17))
    assert (out.status, out.code) == ("fail", "handler-file-not-imported")
    assert out.summary == ("runtime handler 'nvidia' is defined in /etc/containerd/conf.d/99-nvidia.toml, "
                           "which is not imported: /etc/containerd/config.toml has no imports")
    assert out.remediation == (
        'Add "/etc/containerd/conf.d/*.toml" to `imports` in /etc/containerd/config.toml (or move '
        "/etc/containerd/conf.d/99-nvidia.toml into an imported directory) and restart containerd; "
        "nvidia-ctk 1.18.1+ writes conf.d/, 1.18.0 wrote config.d/.")
    assert out.details["defined_in"] == [DROPIN]
    assert out.details["root_imports"] == []


def test_an_unimported_dropin_after_an_imported_one_names_the_imports(tmp_path):
    imported = "/etc/containerd/conf.d/10-cdi.toml"
    files = {ROOT: f'version = 2\nimports = ["{imported}"]\n' + RUNC,
             imported: f'version = 2\n[{CRI}]\nenable_cdi = true\n',
             DROPIN: "version = 2\n" + NVIDIA}
    out = run(tree(tmp_path, files, V17))
    assert out.code == "handler-file-not-imported"
    assert out.summary == ("runtime handler 'nvidia' is defined in /etc/containerd/conf.d/99-nvidia.toml, "
                           "which is not imported: /etc/containerd/config.toml imports only "
                           "['/etc/containerd/conf.d/10-cdi.toml']")
    assert out.details["root_imports"] == [imported]


def test_imports_that_are_not_a_list_are_no_imports(tmp_path):
    files = {ROOT: 'version = 2\nimports = "/etc/containerd/config.d/*.toml"\n' + RUNC,
             DROPIN: "version = 2\n" + NVIDIA}
    out = run(tree(tmp_path, files, V17))
    assert out.code == "handler-file-not-imported"
    assert out.summary.endswith("/etc/containerd/config.toml has no imports")
    assert out.details["root_imports"] == []


def test_an_unimported_dropin_on_a_nodeadm_host_gets_nodeadms_fix(tmp_path):
    files = {ROOT: "version = 2\n" + RUNC, DROPIN: "version = 2\n" + NVIDIA}
    out = run(tree(tmp_path, files, V17, execs=("/usr/local/bin/nodeadm",)))
    assert out.code == "handler-file-not-imported"
    assert out.remediation == nodeadm_fix("nvidia")


def test_an_absent_root_with_the_handler_in_an_unimported_dropin(tmp_path):
    out = run(tree(tmp_path, {DROPIN: "version = 2\n" + NVIDIA}, V17))
    assert out.code == "handler-file-not-imported"
    assert out.summary.endswith("/etc/containerd/config.toml has no imports")


def test_an_absent_root_runs_on_built_in_defaults(tmp_path):
    out = run(tree(tmp_path, {"/etc/hostname": "x\n"}, V17))
    assert (out.status, out.code) == ("fail", "config-absent")
    assert out.summary == ("/etc/containerd/config.toml absent: containerd runs on its built-in "
                           "defaults, which have no 'nvidia' runtime handler")
    assert out.remediation is None  # the check's declared fix stands
    assert (out.details["source"], out.details["loaded"]) == (
        "own merge with containerd 1.x semantics", [])
    nodeadm = run(tree(tmp_path / "n", {"/etc/hostname": "x\n"}, V17, execs=("/usr/bin/nodeadm",)))
    assert nodeadm.code == "config-absent"
    assert nodeadm.remediation == CONFIGURE + " " + nodeadm_fix("nvidia")


def test_a_missing_handler_with_an_unrelated_unimported_dropin(tmp_path):
    files = {ROOT: "version = 2\n" + RUNC,
             "/etc/containerd/conf.d/50-other.toml": f'version = 2\n[{CRI}]\nenable_cdi = true\n'}
    out = run(tree(tmp_path, files, V17))
    assert (out.status, out.code) == ("fail", "handler-missing")
    assert out.summary == ("no runtime handler 'nvidia' in containerd's effective config (own "
                           "merge with containerd 1.x semantics)")
    assert out.remediation is None
    assert (out.details["source"], out.details["loaded"]) == (
        "own merge with containerd 1.x semantics", [ROOT])
    nodeadm = run(tree(tmp_path / "n", files, V17, execs=("/usr/bin/nodeadm",)))
    assert nodeadm.code == "handler-missing"
    assert nodeadm.remediation == CONFIGURE + " " + nodeadm_fix("nvidia")


def test_files_containerd_or_our_merge_loaded_are_not_called_unimported(tmp_path):
    # containerd 1.x's dump lists the files it loaded under `imports` (here a.toml); our walk
    # loaded b.toml: neither is "not imported", whichever of the two named it.
    a, b = "/etc/containerd/conf.d/a.toml", "/etc/containerd/conf.d/b.toml"
    files = {ROOT: f'version = 2\nimports = ["{b}"]\n',
             a: f'version = 2\n[{CRI}]\nenable_cdi = true\n', b: "version = 2\n" + NVIDIA}
    write_files(tmp_path, files)
    version = ("containerd", "--version")
    dump = ("containerd", "--config", ROOT, "config", "dump")
    answers = {version: CommandResult(version, 0, V17),
               dump: CommandResult(dump, 0, f'version = 2\nimports = ["{a}"]\n' + RUNC)}
    out = run(Host(tmp_path, commands=Answers(answers)))
    assert (out.status, out.code) == ("fail", "handler-missing")
    assert out.summary == ("no runtime handler 'nvidia' in containerd's effective config "
                           "(containerd config dump)")
    assert out.details["loaded"] == [a]


# -- nodeadm's partial CRI table beside another verdict ---------------------------------------
PARTIAL_ROOT = ('version = 2\nimports = ["/etc/containerd/config.d/*.toml"]\n'
                f'[{CRI}]\nsandbox_image = "localhost/kubernetes/pause:0.1.0"\n')
PARTIAL_DROPIN = "/etc/containerd/config.d/00-nodeadm.toml"


def test_a_partial_table_on_a_passing_known_1x_host_warns_with_nodeadms_fix(tmp_path):
    files = {ROOT: PARTIAL_ROOT, PARTIAL_DROPIN: "version = 2\n" + NVIDIA}
    out = run(tree(tmp_path, files, V17, execs=(NCR,)), v2())
    assert (out.status, out.code) == ("warn", "nodeadm-partial-cri-table")
    assert out.summary == (
        "runtime handler 'nvidia' (io.containerd.runc.v2, /usr/bin/nvidia-container-runtime) in "
        "the effective config (own merge with containerd 1.x semantics); but "
        "/etc/containerd/config.d/00-nodeadm.toml (nodeadm's NodeConfig spec.containerd.config) "
        "defines a partial [plugins.\"io.containerd.grpc.v1.cri\"] table and containerd 1.x "
        "replaces the whole table per imported file: it removes sandbox_image that "
        "/etc/containerd/config.toml set")
    assert out.remediation == (
        "Make the NodeConfig's spec.containerd.config a complete CRI table (carry over nodeadm's "
        "sandbox_image, the runc runtime with SystemdCgroup = true, registry config_path and the "
        "cni bin_dir/conf_dir), then re-run `nodeadm init`; or run containerd 2.x, which merges "
        "imported tables key by key.")


def test_a_partial_table_with_an_unknown_version_is_noted_not_warned(tmp_path):
    files = {ROOT: PARTIAL_ROOT, PARTIAL_DROPIN: "version = 2\n" + NVIDIA}
    out = run(tree(tmp_path, files, None, execs=(NCR,)), v2())
    assert (out.status, out.code) == ("pass", None)
    assert out.details["nodeadm_partial_cri_table"]["removes"] == ["sandbox_image"]


def test_a_partial_table_keeps_a_failing_verdict_whole(tmp_path):
    files = {ROOT: PARTIAL_ROOT, PARTIAL_DROPIN: f'version = 2\n[{CRI}]\nenable_cdi = true\n'}
    out = run(tree(tmp_path, files, V17), v2())
    assert (out.status, out.code) == ("fail", "handler-missing")
    assert out.summary == ("no runtime handler 'nvidia' in containerd's effective config (own "
                           "merge with containerd 1.x semantics)")
    assert out.remediation is None
    assert out.details["nodeadm_partial_cri_table"]["removes"] == ["sandbox_image"]
    wrong = {ROOT: PARTIAL_ROOT, PARTIAL_DROPIN: f'version = 2\n[{RT}.nvidia]\nruntime_type = "x"\n'}
    out = run(tree(tmp_path / "w", wrong, V17), v2())
    assert (out.status, out.code) == ("fail", "runtime-type-not-runc-v2")
    assert out.remediation == ('Set runtime_type = "io.containerd.runc.v2" for the \'nvidia\' '
                               "runtime and restart containerd.")
    assert "nodeadm_partial_cri_table" in out.details


def test_2x_never_reports_a_partial_table(tmp_path):
    files = {ROOT: PARTIAL_ROOT, PARTIAL_DROPIN: "version = 2\n" + NVIDIA}
    out = run(tree(tmp_path, files, V2X, execs=(NCR,)), v2())
    assert out.status == "pass" and "nodeadm_partial_cri_table" not in out.details
