"""gpu-workload: a GPU container started through the real runtime lists the GPUs NVML sees.

Every other verdict reads configuration; this one judges what containerd did with it, as the
GPU Operator's validator does (NVIDIA gpu-operator, validator/main.go: it runs nvidia-smi in a
container under the nvidia runtime). The action itself runs behind the host fact `workload`
(agent/host/workload.py); this check is a pure function of its record and the NVML snapshot:
the UUIDs `nvidia-smi -L` printed (NVIDIA nvidia-smi documentation, `-L`/`--list-gpus`:
"GPU <i>: <name> (UUID: GPU-...)") against gpus[].uuid.

Opt-in per allocation path (`workload.paths`, docs/workload.md); bootstrap-only.
"""
import re
from typing import Any, Dict, List, Mapping

from checks.base import (
    ALL_PATHS,
    DRA_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    input_missing,
    not_applicable,
    passed,
    skipped,
    unknown,
    warned,
)
from checks.policy import ResolvedPolicy

SOURCE = ("NVIDIA gpu-operator validator/main.go (nvidia-smi in a container); kubernetes/cri-api "
          "api.proto (RunPodSandbox runtime_handler, ContainerConfig.CDI_devices); containerd "
          "docs/namespaces.md")
UUID = re.compile(r"\(UUID:\s*(GPU-[0-9A-Fa-f-]+)\)")



def _f(code: str, status: Status, means: str, fix: str) -> Failure:
    return Failure(code=code, status=status, means=means, fix=fix, source=SOURCE)


FAILURES = (
    _f("image-missing", Status.FAIL, "the workload image is neither on the host nor pullable",
       "Preload the image named in the summary (`ctr -n k8s.io images import IMAGE.tar` on an "
       "air-gapped host) or set workload.image to one that is; workload.skip_if_image_missing "
       "turns this into a skip."),
    _f("image-failed", Status.FAIL, "containerd could not resolve the workload image",
       "Read the error in the summary (registry credentials, a mirror); `crictl pull IMAGE`."),
    _f("sandbox-failed", Status.FAIL, "containerd refused the pod sandbox",
       "The runtime handler is missing or broken: check containerd-nvidia-runtime and "
       "`journalctl -u containerd` for the sandbox error."),
    _f("create-failed", Status.FAIL, "containerd could not create the GPU container",
       "Usually the CDI device: check containerd-cdi and that the CDI spec names the device "
       "(`nvidia-ctk cdi list`); the summary has containerd's error."),
    _f("start-failed", Status.FAIL, "the GPU container did not start",
       "The runtime or its hook failed (nvidia-container-runtime mode, missing libraries, an "
       "SELinux/AppArmor denial): read the error and `journalctl -u containerd`."),
    _f("exit-nonzero", Status.FAIL, "the command in the container exited non-zero",
       "Run the command by hand in the image with the GPU injected; a missing nvidia-smi or "
       "libnvidia-ml in the container means the toolkit's CDI spec or hook lacks them."),
    _f("output-mismatch", Status.FAIL, "the container saw other GPUs than NVML on the host",
       "Regenerate the CDI spec (`nvidia-ctk cdi generate`) or fix the device list the runtime "
       "injects; the summary lists missing and unexpected UUIDs."),
    _f("deadline", Status.FAIL, "a step did not finish within workload.step_deadline_s",
       "The runtime hangs at the named step: `journalctl -u containerd`, the runtime's own log; "
       "raise workload.step_deadline_s only for a slow image pull."),
    _f("runtime-unreachable", Status.FAIL, "containerd's socket is not there",
       "Start containerd (`systemctl start containerd`) or set workload.socket."),
    _f("cleanup-incomplete", Status.WARN, "objects labelled gpu-node-agent.workload=1 remain",
       "The next run removes them; if they persist, `ctr -n gpu-node-agent containers ls` / "
       "`crictl pods --label gpu-node-agent.workload=1` and remove them."),
    _f("tool-missing", Status.UNKNOWN, "the client the route needs is not installed",
       "Install the `[workload]` extra (CRI route) or containerd's `ctr` (native route)."),
    _f("record-malformed", Status.UNKNOWN, "the workload record is not in the expected form",
       "Capture the bundle again with `collect --with-workload`."),
)
STEP_CODES = {"image": "image-failed", "sandbox": "sandbox-failed", "create": "create-failed",
              "start": "start-failed", "exit": "exit-nonzero", "runtime": "runtime-unreachable",
              "tool": "tool-missing"}


def _enabled(policy: ResolvedPolicy) -> List[str]:
    wl = (getattr(policy, "settings", {}) or {}).get("workload") or {}
    return [str(p) for p in wl.get("paths") or []]


def _skip_missing_image(policy: ResolvedPolicy) -> bool:
    wl = (getattr(policy, "settings", {}) or {}).get("workload") or {}
    return bool(wl.get("skip_if_image_missing"))


def _nvml_uuids(host: HostView) -> Any:
    snap = host.gpus()
    if not isinstance(snap, Mapping) or not isinstance(snap.get("gpus"), list):
        return None
    gpus = [g for g in snap["gpus"] if isinstance(g, Mapping)]
    return sorted(str(g.get("uuid")) for g in gpus if g.get("uuid"))


def _gpu_workload(host: HostView, policy: ResolvedPolicy) -> Outcome:
    record = host.fact("workload")
    path = str(getattr(policy, "path", ""))
    if record is None:
        if path not in _enabled(policy):
            return not_applicable(f"workload not enabled for the {path} path (workload.paths)")
        return input_missing("the workload was not run for this host (a bare tree, or "
                             "`collect` without --with-workload)")
    if not isinstance(record, Mapping) or not isinstance(record.get("cleanup"), Mapping):
        return unknown("workload record malformed", code="record-malformed")
    want = "cdi" if path in DRA_PATHS else "handler"
    if record.get("mode") != want:
        return not_applicable(f"the workload ran the {record.get('mode')} route "
                              f"(path {record.get('path')}), not this path's {want} route")
    details: Dict[str, Any] = {k: record.get(k) for k in (
        "route", "mode", "image", "handler", "cdi_device", "failed_step", "exit_code",
        "elapsed_s")}
    left = [str(x) for x in record["cleanup"].get("left") or []]
    details["cleanup_left"] = left
    route = f"{record.get('route')} route"
    step = record.get("failed_step")
    if step is not None:
        err = str(record.get("error") or "")[:300]
        if record.get("deadline_hit"):
            return failed(f"{route}: step `{step}` past its {record.get('deadline_s')}s deadline: "
                          f"{err}", code="deadline", **details)
        if step == "image" and record.get("image_missing"):
            if _skip_missing_image(policy):
                return skipped(f"image {record.get('image')} not on the host "
                               "(workload.skip_if_image_missing)", kind="configured", **details)
            return failed(f"image {record.get('image')} not on the host and not pullable: {err}",
                          code="image-missing", **details)
        code = STEP_CODES.get(str(step))
        if code is None:
            return unknown(f"workload record names an unknown step {step!r}",
                           code="record-malformed")
        out = str(record.get("output") or "").strip()[:200]
        return (unknown if code == "tool-missing" else failed)(
            f"{route}: step `{step}` failed: {err}" + (f" (output: {out})" if out else ""),
            code=code, **details)
    seen = sorted(set(UUID.findall(str(record.get("output") or ""))))
    nvml = _nvml_uuids(host)
    details["container_uuids"] = seen
    if nvml is None:
        return input_missing("no NVML snapshot to hold the container's GPUs against",
                             **details)
    missing = sorted(set(nvml) - set(seen))
    extra = sorted(set(seen) - set(nvml))
    if missing or extra or not seen:
        return failed(f"{route}: the container listed {len(seen)} GPU(s), NVML {len(nvml)}; "
                      f"missing {', '.join(missing) or 'none'}; unexpected "
                      f"{', '.join(extra) or 'none'}", code="output-mismatch", **details)
    if left:
        return warned(f"{route}: passed, but left behind: {', '.join(left)[:300]}",
                      code="cleanup-incomplete", **details)
    return passed(f"{route}: a container with {record.get('image')} saw all {len(nvml)} "
                  "GPU(s) NVML sees", **details)


GPU_WORKLOAD = Check(
    id="gpu-workload",
    title="A GPU container through the real runtime lists NVML's GPUs",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.BOOTSTRAP,
    remediation="See the failure's fix; docs/workload.md describes both routes.",
    run=_gpu_workload,
    facts=("workload",),
    uses_gpus=True,
    # Steps (up to 5 at workload.step_deadline_s) and cleanup fit in this; past it the
    # engine reports `unknown` while the thread finishes its cleanup (agent/engine.py).
    timeout_s=300.0,
    description="Opt-in (workload.paths): starts the configured image through containerd "
    "(CRI before join, the native API in namespace gpu-node-agent after) and holds the GPU "
    "UUIDs it prints against NVML.",
    failures=FAILURES,
    since_policy=2,
)
