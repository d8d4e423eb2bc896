"""runtimeclass-handler (checks/runtimeclass_handler.py): the whole Outcome of each branch, and
the runtimes it reads from containerd's effective config, value by value.

Expected values are written by hand from the module's documented behaviour and the sources it
cites: the RuntimeClass named `kube.runtimeclass` (default nvidia) must exist
(kubernetes.io/docs/concepts/containers/runtime-class/) and its handler must be a runtime
containerd has (`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<name>]` in a
version-2 config, containerd docs/cri/config.md); where containerd's config cannot be judged
(absent, or containerd's version unknown and its 1.x and 2.x import semantics give different
runtimes) the handler is compared with `containerd.handler` (default nvidia); policy version 2
(`containerd.runtimeclass_effective`) requires the handler among containerd's runtimes.
containerd 1.x replaces a plugin's whole table with an imported file's; 2.x merges the tables
(containerd/containerd cmd/containerd/server/config/config.go).
"""
from agent.config import Config
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host, StaticFacts
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.runtimeclass_handler import RUNTIMECLASS_HANDLER, containerd_runtimes

CONFIG = "/etc/containerd/config.toml"
CRI = 'plugins."io.containerd.grpc.v1.cri"'
V2X = "containerd github.com/containerd/containerd/v2 v2.1.4 0000000\n"


def runtimes_toml(*names):
    return "".join(f'[{CRI}.containerd.runtimes.{n}]\n  runtime_type = "io.containerd.runc.v2"\n'
                   for n in names)


def host_with(root, files, runtimeclasses, version=None):
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    records = [{"argv": ["containerd", "--version"], "rc": 0, "stdout": version}] if version else []
    return Host(root, commands=RecordedCommands(records, "test"),
                facts=StaticFacts({"runtimeclasses": runtimeclasses}))


def rc_items(*pairs):
    return {"items": [{"metadata": {"name": n}, "handler": h} for n, h in pairs]}


def policy(version=2):
    return ResolvedPolicy(load_policy(version), "device-plugin", settings=Config().model_dump())


def details(handler, runtimes, name="nvidia", expected="nvidia"):
    return {"runtimeclass": name, "handler": handler, "expected_handler": expected,
            "containerd_runtimes": runtimes}


# --- a missing RuntimeClass ----------------------------------------------------------------

def test_no_runtimeclass_at_all_fails_saying_none(tmp_path):
    out = RUNTIMECLASS_HANDLER.run(host_with(tmp_path, {}, {"items": []}), policy())
    assert out == Outcome(Status.FAIL, "RuntimeClass 'nvidia' not found (cluster has: none)",
                          {"runtimeclasses": []}, code="runtimeclass-missing")


def test_a_missing_runtimeclass_lists_the_others_sorted(tmp_path):
    host = host_with(tmp_path, {}, rc_items(("runc", "runc"), ("kata-qemu", "kata-qemu")))
    out = RUNTIMECLASS_HANDLER.run(host, policy())
    assert out == Outcome(Status.FAIL,
                          "RuntimeClass 'nvidia' not found (cluster has: kata-qemu, runc)",
                          {"runtimeclasses": ["kata-qemu", "runc"]}, code="runtimeclass-missing")


# --- against containerd's effective runtimes ----------------------------------------------

def test_a_handler_containerd_has_passes_naming_the_effective_config(tmp_path):
    # The handler differs from containerd.handler: containerd's runtimes decide.
    host = host_with(tmp_path, {CONFIG: "version = 2\n" + runtimes_toml("nvidia", "nvidia-cdi",
                                                                        "runc")},
                     rc_items(("nvidia", "nvidia-cdi")), V2X)
    out = RUNTIMECLASS_HANDLER.run(host, policy())
    assert out == Outcome(Status.PASS, "RuntimeClass 'nvidia' handler 'nvidia-cdi': a runtime in "
                          "containerd's effective config",
                          details("nvidia-cdi", ["nvidia", "nvidia-cdi", "runc"]))


def test_a_handler_containerd_lacks_fails_under_v2_naming_its_runtimes(tmp_path):
    host = host_with(tmp_path, {CONFIG: "version = 2\n" + runtimes_toml("runc", "nvidia-cdi")},
                     rc_items(("nvidia", "nvidia")), V2X)
    out = RUNTIMECLASS_HANDLER.run(host, policy(2))
    assert out == Outcome(
        Status.FAIL,
        "RuntimeClass 'nvidia' has handler 'nvidia', which containerd's effective config does "
        "not have (containerd has: nvidia-cdi, runc)",
        details("nvidia", ["nvidia-cdi", "runc"]),
        remediation="Make RuntimeClass nvidia use one of containerd's runtimes (nvidia-cdi, "
        "runc; a cluster admin: it is immutable, so delete and re-create it), or configure a "
        "'nvidia' runtime in containerd (`nvidia-ctk runtime configure --runtime=containerd`) "
        "and restart it.",
        code="handler-mismatch")


def test_a_config_without_runtimes_fails_under_v2_saying_none(tmp_path):
    host = host_with(tmp_path, {CONFIG: "version = 2\n"}, rc_items(("nvidia", "nvidia")), V2X)
    out = RUNTIMECLASS_HANDLER.run(host, policy(2))
    assert out == Outcome(
        Status.FAIL,
        "RuntimeClass 'nvidia' has handler 'nvidia', which containerd's effective config does "
        "not have (containerd has: none)",
        details("nvidia", []),
        remediation="Make RuntimeClass nvidia use one of containerd's runtimes (none; a cluster "
        "admin: it is immutable, so delete and re-create it), or configure a 'nvidia' runtime "
        "in containerd (`nvidia-ctk runtime configure --runtime=containerd`) and restart it.",
        code="handler-mismatch")


def test_under_v1_the_configured_handler_passes_though_containerd_lacks_it(tmp_path):
    host = host_with(tmp_path, {CONFIG: "version = 2\n" + runtimes_toml("runc")},
                     rc_items(("nvidia", "nvidia")), V2X)
    out = RUNTIMECLASS_HANDLER.run(host, policy(1))
    assert out == Outcome(Status.PASS, "RuntimeClass 'nvidia' handler 'nvidia'",
                          details("nvidia", ["runc"]))


# --- containerd's config cannot be judged: the name comparison ----------------------------

def test_without_a_containerd_config_a_different_handler_fails_naming_both(tmp_path):
    host = host_with(tmp_path, {}, rc_items(("nvidia", "nvidia-cdi")))
    out = RUNTIMECLASS_HANDLER.run(host, policy(2))
    assert out == Outcome(
        Status.FAIL,
        "RuntimeClass 'nvidia' has handler 'nvidia-cdi', containerd's runtime is 'nvidia'",
        details("nvidia-cdi", None),
        remediation="Make RuntimeClass nvidia use handler 'nvidia' (a cluster admin: it is "
        "immutable, so delete and re-create it), or set containerd.handler to 'nvidia-cdi' if "
        "that is the runtime containerd has.",
        code="handler-mismatch")


def test_without_a_containerd_config_the_same_handler_passes_with_the_details(tmp_path):
    host = host_with(tmp_path, {}, rc_items(("nvidia", "nvidia")))
    out = RUNTIMECLASS_HANDLER.run(host, policy(2))
    assert out == Outcome(Status.PASS, "RuntimeClass 'nvidia' handler 'nvidia'",
                          details("nvidia", None))


def _semantics_disagree(tmp_path):
    # containerd's version unknown (no `containerd --version`, no dpkg record) and a version-2
    # root config: both semantics are evaluated. The drop-in's CRI table replaces the root's
    # under 1.x (runc only) and merges into it under 2.x (nvidia and runc).
    files = {CONFIG: 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
             + runtimes_toml("nvidia", "runc"),
             "/etc/containerd/conf.d/10-runc.toml": runtimes_toml("runc")}
    return host_with(tmp_path, files, rc_items(("nvidia", "nvidia")))


def test_runtimes_are_unknown_when_the_two_merge_semantics_disagree(tmp_path):
    assert containerd_runtimes(_semantics_disagree(tmp_path), policy(2)) is None


def test_disagreeing_semantics_fall_back_to_the_name_comparison_even_under_v2(tmp_path):
    out = RUNTIMECLASS_HANDLER.run(_semantics_disagree(tmp_path), policy(2))
    assert out == Outcome(Status.PASS, "RuntimeClass 'nvidia' handler 'nvidia'",
                          details("nvidia", None))


def test_agreeing_semantics_give_the_runtimes(tmp_path):
    # The same root without the drop-in: both semantics read nvidia and runc.
    host = host_with(tmp_path, {CONFIG: "version = 2\n" + runtimes_toml("runc", "nvidia")},
                     rc_items(("nvidia", "nvidia")))
    assert containerd_runtimes(host, policy(2)) == ["nvidia", "runc"]
