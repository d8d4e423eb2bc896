"""gpu-nvlink: every NVLink active on GPUs that have NVLink (nvmlDeviceGetNvLinkState per
link, nvml.h; a GPU without NVLink answers not_supported and is left out)."""
from typing import Any, List, Mapping, Optional, Tuple

from agent.snapshot import GpuSnapshot
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    skipped,
)
from checks.gpu.common import (
    NVML_REQUIRES,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, flag, opt_int
from checks.policy import ResolvedPolicy

NVLINK_INACTIVE = "nvlink-inactive"
FIX = ("Check `nvidia-smi nvlink --status` and the fabric manager log; an inactive link needs a "
       "GPU reset or reboot, and a link that stays down needs the baseboard serviced.")


def _gpu_nvlink(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    f = Findings()
    for gpu, nvlink in each_field(snap, "nvlink", f):
        try:
            links = _links(nvlink, f.where)
            supported = flag(nvlink, "supported", f.where)
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        if not supported or not links:
            f.checked -= 1
            f.unsupported.append(gpu["index"])
            continue
        down = [link for link, active in links if not active]
        f.per_gpu[gpu["index"]] = {"links": len(links), "down": down}
        if down:
            f.fail(
                NVLINK_INACTIVE, f"{gpu_label(gpu)} NVLink {', '.join(map(str, down))} inactive "
                f"({len(links) - len(down)} of {len(links)} active)")
    if f.checked == 0 and not f.failures and not f.unreadable and not f.lost:
        return skipped("no NVLink on any GPU")
    return f.outcome("every NVLink active on {n} GPU(s)", "NVLink state")


def _links(nvlink: Mapping[str, Any], where: str) -> List[Tuple[Optional[int], bool]]:
    """(link number, active) for each entry of ``nvlink.links``."""
    links = nvlink.get("links")
    if links is None:
        return []
    if not isinstance(links, list):
        raise SnapshotError(f"{where}.links", "a list", links)
    out = []
    for i, link in enumerate(links):
        if not isinstance(link, Mapping):
            raise SnapshotError(f"{where}.links[{i}]", "an object", link)
        out.append((opt_int(link, "link", f"{where}.links[{i}]"),
                    flag(link, "active", f"{where}.links[{i}]") is True))
    return out


GPU_NVLINK = Check(
    id="gpu-nvlink",
    title="Every NVLink active on NVLink GPUs",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="`nvidia-smi nvlink --status`; reset the GPU or service the baseboard.",
    run=gpu_check(_gpu_nvlink),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    failures=(
        Failure(NVLINK_INACTIVE, Status.FAIL, "an NVLink of a GPU that has NVLink is inactive",
                FIX, "nvml.h nvmlDeviceGetNvLinkState"),
    ) + snapshot_failures(),
)
