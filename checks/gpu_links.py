"""GPU interconnect: gpu-pcie-link, gpu-nvlink."""
from typing import Any, List

from checks.base import ALL_PATHS, Check, Interval, Outcome, Severity, skipped
from checks.gpu_common import NVML_REQUIRES, Findings, each_field, gpu_label, gpu_policy, gpus_of


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
        f.per_gpu[gpu["index"]] = link
        width, width_max = link.get("width_current"), link.get("width_max")
        if isinstance(width, int) and isinstance(width_max, int) and width < width_max:
            bucket = f.failures if pp.width_below_max == "fail" else f.warnings
            bucket.append(f"{gpu_label(gpu)} PCIe link x{width} of x{width_max}")
        # A lower generation at idle is power management, not a fault (policy_v1.yaml).
        if (link.get("gen_current") or 0) < (link.get("gen_max") or 0):
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
        links = nvlink.get("links") or []
        if not nvlink.get("supported") or not links:
            f.checked -= 1
            f.unsupported.append(gpu["index"])
            continue
        down = [link.get("link") for link in links if not link.get("active")]
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
