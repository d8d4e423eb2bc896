"""fatal_faults (agent/outputs/node/condition.py): the fatal checks that fail, less those the
per-GPU health attributes to GPUs while it tolerates them on the report's path (a device-plugin
path; nothing is tolerated on DRA paths, agent/gpu_health.py), and a report without any health
(a plain object the plan is handed) spares none. Expected values by hand."""
from agent.gpu_health import GpuHealth, GpuState
from agent.model import ALL_PATHS, CheckResult, Severity, Status
from agent.outputs.node.condition import fatal_faults


def _res(cid: str, status: Status) -> CheckResult:
    return CheckResult(id=cid, title=cid, severity=Severity.CRITICAL, status=status,
                       summary=cid, remediation="-", gates=ALL_PATHS, details={},
                       duration_s=0.0)


class _Report:
    def __init__(self, path, results, **extra):
        self.path = path
        self._results = {r.id: r for r in results}
        self.__dict__.update(extra)

    def result(self, cid):
        return self._results.get(cid)


def _health(min_healthy):
    gpus = tuple(GpuState(index=i, uuid=f"GPU-{i}", pci_bus_id=None, in_nvml=True,
                          failing=("gpu-xid",) if i == 1 else ()) for i in range(4))
    return GpuHealth(gpus=gpus, min_healthy=min_healthy, attributed=("gpu-xid",))


FATAL = ["gpu-xid", "gpu-ecc", "gpu-row-remap"]
RESULTS = [_res("gpu-xid", Status.FAIL), _res("gpu-ecc", Status.FAIL),
           _res("gpu-row-remap", Status.WARN)]


def test_a_report_without_health_spares_nothing():
    assert fatal_faults(_Report("device-plugin", RESULTS), FATAL) == ["gpu-xid", "gpu-ecc"]


def test_tolerated_gpus_spare_their_checks_on_a_device_plugin_path_only():
    tolerant = _health(3)  # one of four down, three required
    assert fatal_faults(_Report("device-plugin", RESULTS, health=tolerant), FATAL) == [
        "gpu-ecc"]
    assert fatal_faults(_Report("dra", RESULTS, health=tolerant), FATAL) == [
        "gpu-xid", "gpu-ecc"]


def test_health_that_does_not_tolerate_spares_nothing():
    every = _health(None)  # "all" required
    assert fatal_faults(_Report("device-plugin", RESULTS, health=every), FATAL) == [
        "gpu-xid", "gpu-ecc"]
