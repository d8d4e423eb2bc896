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


class _Gate:
    def __init__(self, open_):
        self.open = open_
        self.blocking = () if open_ else ("driver-loaded",)


def _open_report(path, health=None):
    rep = _Report(path, [_res("driver-loaded", Status.PASS)], gate=_Gate(True))
    if health is not None:
        rep.health = health
    return rep


def test_an_open_gate_with_tolerated_gpus_names_them_in_the_condition():
    from agent.outputs.node.condition import desired_condition
    got = desired_condition(_open_report("device-plugin", _health(3)), "GPUReady")
    assert got == {"type": "GPUReady", "status": "True", "reason": "GateOpen",
                   "message": "gate device-plugin open: 3 of 4 GPUs healthy (min_healthy_gpus "
                              "3); unhealthy: GPU-1"}


def test_an_open_gate_without_tolerance_or_health_says_no_critical_check_fails():
    from agent.outputs.node.condition import desired_condition
    plain = {"type": "GPUReady", "status": "True", "reason": "GateOpen",
             "message": "gate dra open: no critical check fails"}
    assert desired_condition(_open_report("dra", _health(3)), "GPUReady") == plain
    assert desired_condition(_open_report("dra"), "GPUReady") == plain
    assert desired_condition(_open_report("dra", _health(None)), "GPUReady") == plain


def test_the_tolerated_message_lists_gpus_sorted_and_is_cut_to_200_characters():
    from agent.outputs.node.condition import desired_condition
    bad = (0, 2, 5)
    gpus = tuple(GpuState(index=i, uuid=f"GPU-{i:02d}-" + "u" * 40, pci_bus_id=None,
                          in_nvml=True, failing=("gpu-xid",) if i in bad else ())
                 for i in range(8))
    health = GpuHealth(gpus=gpus, min_healthy=5, attributed=("gpu-xid",))
    got = desired_condition(_open_report("device-plugin", health), "GPUReady")
    names = ", ".join(f"GPU-{i:02d}-" + "u" * 40 for i in bad)
    full = (f"gate device-plugin open: 5 of 8 GPUs healthy (min_healthy_gpus 5); unhealthy: "
            f"{names}")
    assert len(full) > 200
    assert got["message"] == full[:197] + "..."
    two = tuple(g if g.index in (0, 1) else GpuState(g.index, g.uuid, None, True)
                for g in gpus[:4])
    short = desired_condition(_open_report("device-plugin", GpuHealth(
        gpus=two, min_healthy=3, attributed=("gpu-xid",))), "GPUReady")
    assert short["message"] == ("gate device-plugin open: 3 of 4 GPUs healthy "
                                "(min_healthy_gpus 3); unhealthy: " + gpus[0].uuid)


def test_a_closed_gate_is_closed_whatever_the_health_tolerates():
    from agent.outputs.node.condition import desired_condition
    rep = _Report("device-plugin", [_res("driver-loaded", Status.FAIL)], gate=_Gate(False),
                  health=_health(3))
    assert desired_condition(rep, "GPUReady") == {
        "type": "GPUReady", "status": "False", "reason": "CheckFailed",
        "message": "driver-loaded fail: driver-loaded"}


def test_a_tolerated_message_of_exactly_200_characters_is_kept_whole():
    from agent.outputs.node.condition import desired_condition
    head = "gate device-plugin open: 3 of 4 GPUs healthy (min_healthy_gpus 3); unhealthy: "
    for size, want_cut in ((200, False), (201, True)):
        uuid = "GPU-" + "a" * (size - len(head) - 4)
        gpus = tuple(GpuState(index=i, uuid=uuid if i == 1 else f"GPU-{i}", pci_bus_id=None,
                              in_nvml=True, failing=("gpu-xid",) if i == 1 else ())
                     for i in range(4))
        health = GpuHealth(gpus=gpus, min_healthy=3, attributed=("gpu-xid",))
        message = desired_condition(_open_report("device-plugin", health), "GPUReady")["message"]
        full = head + uuid
        assert len(full) == size
        assert message == (full[:197] + "..." if want_cut else full)


def test_the_unhealthy_gpu_annotation_adds_a_count_only_past_64_names():
    from agent.outputs.node.condition import unhealthy_gpus_value

    def value(n):
        gpus = tuple(GpuState(index=i, uuid=f"GPU-{i:03d}", pci_bus_id=None, in_nvml=True,
                              failing=("gpu-ecc",)) for i in range(n))
        return unhealthy_gpus_value(_Report("dra", [], health=GpuHealth(gpus, None, ())))

    assert value(64) == ",".join(f"GPU-{i:03d}" for i in range(64))
    assert value(65) == ",".join(f"GPU-{i:03d}" for i in range(64)) + ",+1"
    assert unhealthy_gpus_value(_Report("dra", [])) is None
