"""The per-GPU health series: ``gpu_node_agent_gpu_healthy{gpu, uuid}``, 1 when no check that
closes the gate names the GPU, 0 when one does (agent/gpu_health.py; docs/metrics.md).

``gpu`` is the NVML index and ``uuid`` the GPU UUID, so a dashboard can name the GPU without
joining ``gpu_info``. A GPU on PCI that NVML does not list has neither: both labels hold its
PCI bus id. A lost GPU NVML names only by its index has ``uuid="index:<n>"`` (GpuState.name).
Absent before the first cycle (nothing has been checked yet).
"""
from agent.outputs.exposition import Writer
from agent.report import Report


def gpu_health_families(out: Writer, report: Report) -> None:
    health = report.health
    if health is None:
        return
    out.family("gpu_healthy", "gauge",
               "1 when no check that closes the gate names the GPU, 0 when one does.", (
                   ((("gpu", str(g.index) if g.index is not None else g.name),
                     ("uuid", g.name)), 1.0 if g.healthy else 0.0)
                   for g in health.gpus))
