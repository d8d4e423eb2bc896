"""gpu-pcie-link: the PCIe link trained at its maximum width (a lower generation at idle is
power management, not a fault: policy_v1.yaml's `gpu.pcie` cites it)."""
from typing import List

from agent.snapshot import GpuSnapshot
from checks.base import ALL_PATHS, Check, Failure, HostView, Interval, Outcome, Severity, Status
from checks.gpu.common import (
    NVML_REQUIRES,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    gpu_policy,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, opt_int
from checks.policy import ResolvedPolicy

WIDTH_BELOW_MAX = "link-width-below-max"


def _gpu_pcie_link(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
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
            (f.fail if pp.width_below_max == "fail" else f.warn)(
                WIDTH_BELOW_MAX, f"{gpu_label(gpu)} PCIe link x{width} of x{width_max}")
        # A lower generation at idle is power management, not a fault (policy_v1.yaml).
        if (gen or 0) < (gen_max or 0):
            downshifted.append(gpu["index"])
    summary = "{n} GPU(s) at full PCIe link width"
    if downshifted:
        gpus = ", ".join(map(str, downshifted))
        summary += f"; GPU {gpus} at a lower generation (normal at idle)"
    return f.outcome(summary, "PCIe link", gen_downshifted_gpus=downshifted)


GPU_PCIE_LINK = Check(
    id="gpu-pcie-link",
    title="PCIe link width at its maximum (a lower generation at idle is normal)",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Reseat the GPU/riser; compare `lspci -vv` LnkSta with LnkCap.",
    run=gpu_check(_gpu_pcie_link),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    failures=(
        # The status is gpu.pcie.width_below_max (fail by default).
        Failure(WIDTH_BELOW_MAX, Status.FAIL,
                "a GPU's PCIe link trained below its maximum width",
                "A link trained below its width is a hardware fault: reseat the GPU or riser, "
                "check the slot and retimer, and compare `lspci -vv` LnkSta with LnkCap; reboot "
                "to retrain.", "nvml.h nvmlDeviceGetCurrPcieLinkWidth/MaxPcieLinkWidth; lspci(8) "
                "LnkSta/LnkCap"),
    ) + snapshot_failures(),
)
