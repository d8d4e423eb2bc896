"""GPU interconnect: gpu-pcie-link, gpu-nvlink."""
from typing import Any, List, Mapping, Optional, Tuple

from checks.base import ALL_PATHS, Check, Interval, Outcome, Severity, skipped
from checks.gpu_common import (
    NVML_REQUIRES,
    Findings,
    SnapshotError,
    each_field,
    flag,
    gpu_label,
    gpu_policy,
    gpus_of,
    opt_int,
)


# -- gpu-pcie-link ---------------------------------------------------------------------
def _gpu_pcie_link(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
    pp = gpu_policy(policy).pcie
    f = Findings()
    downshifted: List[int] = []
    for gpu, link in each_field(snap, "pcie", f):
        try:
            width, width_max = (opt_int(link, "width_current", f.where),
                                opt_int(link, "width_max", f.where))
            gen, gen_max = opt_int(link, "gen_current", f.where), opt_int(link, "gen_max", f.where)
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        f.per_gpu[gpu["index"]] = link
        if width is not None and width_max is not None and width < width_max:
            bucket = f.failures if pp.width_below_max == "fail" else f.warnings
            bucket.append(f"{gpu_label(gpu)} PCIe link x{width} of x{width_max}")
        # A lower generation at idle is power management, not a fault (policy_v1.yaml).
        if (gen or 0) < (gen_max or 0):
            downshifted.append(gpu["index"])
    summary = "{n} GPU(s) at full PCIe link width"
    if downshifted:
        gpus = ", ".join(map(str, downshifted))
        summary += f"; GPU {gpus} at a lower generation (normal at idle)"
    return f.outcome(
        summary, "PCIe link",
        "A link trained below its width is a hardware fault: reseat the GPU or riser, check the "
        "slot and retimer, and compare `lspci -vv` LnkSta with LnkCap; reboot to retrain.",
        gen_downshifted_gpus=downshifted,
    )


GPU_PCIE_LINK = Check(
    id="gpu-pcie-link",
    title="PCIe link width at its maximum (a lower generation at idle is normal)",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Reseat the GPU/riser; compare `lspci -vv` LnkSta with LnkCap.",
    run=_gpu_pcie_link,
    uses_gpus=True,
    requires=NVML_REQUIRES,
)


# -- gpu-nvlink ------------------------------------------------------------------------
def _gpu_nvlink(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
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
            f.failures.append(
                f"{gpu_label(gpu)} NVLink {', '.join(map(str, down))} inactive "
                f"({len(links) - len(down)} of {len(links)} active)")
    if f.checked == 0 and not f.failures and not f.unreadable and not f.lost:
        return skipped("no NVLink on any GPU")
    return f.outcome(
        "every NVLink active on {n} GPU(s)", "NVLink state",
        "Check `nvidia-smi nvlink --status` and the fabric manager log; an inactive link needs "
        "a GPU reset or reboot, and a link that stays down needs the baseboard serviced.",
    )


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
    run=_gpu_nvlink,
    uses_gpus=True,
    requires=NVML_REQUIRES,
)
