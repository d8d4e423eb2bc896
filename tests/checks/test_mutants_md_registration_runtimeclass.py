"""registration-labels' summary at its list limit, and runtimeclass-handler's settings and
early outcomes, value by value.

Expected values are written by hand: registration-labels names the first five presets and
"; and N more" only past five (its SHOWN); --node-labels is comma-separated key=value, every
instance adding (k8s.io/component-base MapStringString), one flag a line in Canonical
Kubernetes' args file. runtimeclass-handler looks for RuntimeClass `kube.runtimeclass`
(default nvidia) and compares its handler with `containerd.handler` (default nvidia) where
containerd's config cannot be judged (kubernetes.io/docs/concepts/containers/runtime-class/).
"""
from types import SimpleNamespace

from agent.config import Config
from agent.host.seam import Host, StaticFacts
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.registration_labels import REGISTRATION_LABELS
from checks.runtimeclass_handler import RUNTIMECLASS_HANDLER

KEY = "workload.example.com/gpu-allocation"
SNAP_ARGS = "/var/snap/k8s/common/args/kubelet"


def host_with(root, files, facts=None):
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return Host(root, facts=StaticFacts(facts or {}))


def test_five_presets_are_all_named_with_no_more(tmp_path):
    text = "".join(f"--node-labels={KEY}=v{i}\n" for i in range(5))
    host = host_with(tmp_path, {SNAP_ARGS: text})
    out = REGISTRATION_LABELS.run(host, ResolvedPolicy(load_policy(2), "dra",
                                                       settings=Config().model_dump()))
    assert (out.status, out.code) == (Status.FAIL, "allocation-label-preset")
    assert out.summary == (
        "a kubelet registration label pre-sets the allocation label, so GPU pods can land "
        "before the gate opens: "
        + "; ".join(f"{SNAP_ARGS} --node-labels sets {KEY}=v{i}" for i in range(5)))


def rc_items(*pairs):
    return {"items": [{"metadata": {"name": n}, "handler": h} for n, h in pairs]}


def test_runtimeclasses_not_captured_skip_as_input_missing(tmp_path):
    out = RUNTIMECLASS_HANDLER.run(host_with(tmp_path, {}),
                                   ResolvedPolicy(load_policy(1), "device-plugin"))
    assert out == Outcome(Status.SKIP, "RuntimeClasses not captured for this host (needs the "
                          "Kubernetes API)", skip="input-missing")


def test_a_policy_without_settings_takes_the_defaults(tmp_path):
    # No containerd config on the host: the handler is compared with the default, nvidia.
    host = host_with(tmp_path, {}, {"runtimeclasses": rc_items(("nvidia", "nvidia"))})
    for pol in (SimpleNamespace(path="device-plugin"),
                ResolvedPolicy(load_policy(1), "device-plugin")):
        out = RUNTIMECLASS_HANDLER.run(host, pol)
        assert (out.status, out.summary) == (Status.PASS, "RuntimeClass 'nvidia' handler 'nvidia'")


def test_the_runtimeclass_name_comes_from_the_kube_settings(tmp_path):
    host = host_with(tmp_path, {}, {"runtimeclasses": rc_items(("nvidia", "runc"),
                                                               ("nvidia-gpu", "nvidia"))})
    settings = Config().model_dump()
    settings["kube"] = {**settings["kube"], "runtimeclass": "nvidia-gpu"}
    out = RUNTIMECLASS_HANDLER.run(host, ResolvedPolicy(load_policy(1), "device-plugin",
                                                        settings=settings))
    assert (out.status, out.summary) == (Status.PASS,
                                         "RuntimeClass 'nvidia-gpu' handler 'nvidia'")


def test_an_unreachable_api_skips_as_input_missing_cut_at_200(tmp_path):
    host = host_with(tmp_path, {}, {"runtimeclasses": {"error": "x" * 300}})
    out = RUNTIMECLASS_HANDLER.run(host, ResolvedPolicy(load_policy(1), "device-plugin"))
    assert out == Outcome(Status.SKIP, "Kubernetes API not reachable: " + "x" * 200,
                          skip="input-missing")
