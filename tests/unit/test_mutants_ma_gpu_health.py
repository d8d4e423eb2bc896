"""agent/gpu_health.py: min_healthy_of (the `health.min_healthy_gpus` policy number, None for
"all" and for any policy that does not carry a usable number), and evaluate (which snapshot
GPUs a closing verdict names: by uuid, PCI slot in NVML's, udev's or the kernel's form, or
index; only a fail, or a warn under strict, on the report's own path).

Expected values are written by hand from the function's docstring and checks/gpu/
health_policy.py ("all" is the default; a number is a GPU count, so at least 1).
"""
from types import SimpleNamespace

import pytest

from agent.gpu_health import closes, evaluate, min_healthy_of
from agent.model import ALL_PATHS, CheckResult, PathOutcome, Severity, Status


def _policy(**health):
    return SimpleNamespace(policy=SimpleNamespace(health=SimpleNamespace(**health)))


@pytest.mark.parametrize("policy,expected", [
    (_policy(min_healthy_gpus=6), 6),
    (_policy(min_healthy_gpus=1), 1),
    (_policy(min_healthy_gpus=None), None),  # "all"
    (_policy(min_healthy_gpus=0), None),
    (_policy(min_healthy_gpus=-2), None),
    (_policy(min_healthy_gpus=True), None),
    (_policy(min_healthy_gpus="6"), None),
    (_policy(), None),  # a health section without the number
    (SimpleNamespace(policy=SimpleNamespace()), None),  # a policy without a health section
    (SimpleNamespace(), None),  # a bare policy
    (None, None),
])
def test_min_healthy_is_the_policy_number_or_none_for_all(policy, expected):
    assert min_healthy_of(policy) == expected


# -- evaluate: which GPUs a closing verdict names, matched to the snapshot's GPUs ---------

PATH = "device-plugin"


def _result(refs, status=Status.FAIL, severity=Severity.CRITICAL, cid="gpu-ecc", by_path=None):
    return CheckResult(id=cid, title=cid, severity=severity, status=status, summary="-",
                       remediation="-", gates=ALL_PATHS, details={"gpus_at_fault": refs},
                       duration_s=0.0, by_path=by_path or {})


def _unhealthy(snapshot, *results, **kw):
    health = evaluate(list(results), snapshot, PATH, **kw)
    return [(g.index, g.uuid, g.pci_bus_id, g.in_nvml, g.failing) for g in health.gpus
            if not g.healthy], len(health.gpus)


SNAP = {"gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:1A:00.0"},
                 {"index": 1, "uuid": "GPU-b", "pci_bus_id": "00000001:2B:00.0"}]}
GPU1 = (1, "GPU-b", "00000001:2B:00.0", True, ("gpu-ecc",))


@pytest.mark.parametrize("ref", [
    {"uuid": "GPU-b"},
    {"index": 1},
    {"pci_bus_id": "0001:2b:00.0"},  # udev's form
    {"pci_bus_id": "PCI:0001:2B:00"},  # the kernel's form
    {"pci_bus_id": "1:2b:00.0"},  # a domain written short
    {"pci_bus_id": " 00000001:2b:00.0 "},
    {"uuid": "GPU-b", "index": 7},  # not every name matches: the first name that does wins
])
def test_a_gpu_named_by_any_of_its_names_is_the_snapshot_gpu(ref):
    assert _unhealthy(SNAP, _result([ref])) == ([GPU1], 2)


@pytest.mark.parametrize("bus", ["0001:2b:00:0.0", "0001:2b", "0001::00.0", "pci:0001:2b"])
def test_a_malformed_bus_id_matches_no_snapshot_gpu(bus):
    # named but matching nothing: a GPU NVML does not list, keyed by its raw bus id
    assert _unhealthy(SNAP, _result([{"pci_bus_id": bus}])) == (
        [(None, None, bus, False, ("gpu-ecc",))], 3)


def test_only_indices_nvml_can_hold_are_snapshot_gpus():
    snap = {"gpus": [{"index": 2**32 - 1}, {"index": 2**32}, {"index": -1}, {"index": True},
                     "GPU 3", {"index": 4, "uuid": ""}]}
    health = evaluate([], snap, PATH)
    assert [(g.index, g.uuid, g.name) for g in health.gpus] == [
        (2**32 - 1, None, f"index:{2**32 - 1}"), (4, None, "index:4")]


@pytest.mark.parametrize("snapshot", [None, [], {"gpus": 5}, {"gpus": {"index": 0}}])
def test_a_snapshot_of_the_wrong_shape_lists_no_gpu(snapshot):
    assert evaluate([], snapshot, PATH).gpus == ()


def test_a_warning_names_gpus_only_under_strict():
    warn = _result([{"index": 1}], status=Status.WARN)
    assert _unhealthy(SNAP, warn) == ([], 2)
    assert _unhealthy(SNAP, warn, strict=True) == ([GPU1], 2)


def test_an_unknown_names_no_gpu_whatever_its_details_say():
    assert _unhealthy(SNAP, _result([{"index": 1}], status=Status.UNKNOWN)) == ([], 2)


def test_a_verdict_that_differs_on_the_path_names_no_gpu():
    # the report's verdict is a warning; on this path it is a failure: the GPUs named are
    # the report path's, so none is marked
    other = PathOutcome(Status.FAIL, "-", "-")
    r = _result([{"index": 1}], status=Status.WARN, by_path={PATH: other})
    assert closes(r, PATH, False) is True
    assert _unhealthy(SNAP, r) == ([], 2)


def test_a_result_closes_by_its_verdict_on_the_path():
    passing = PathOutcome(Status.PASS, "-", "-")
    r = _result([{"index": 1}], by_path={PATH: passing})
    assert (closes(r, PATH, False), closes(r, "dra", False)) == (False, True)


def test_two_gpus_on_one_bus_number_in_different_domains_are_told_apart():
    # A PCI address is domain:bus:device.function (the kernel's pci_name(), lspci -D): the same
    # bus number under domains 0000 and 0001 is two slots, so the domain is part of the key.
    snap = {"gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:2B:00.0"},
                     {"index": 1, "uuid": "GPU-b", "pci_bus_id": "00000001:2B:00.0"}]}
    assert _unhealthy(snap, _result([{"pci_bus_id": "0001:2b:00.0"}])) == ([GPU1], 2)
    assert _unhealthy(snap, _result([{"pci_bus_id": "PCI:0000:2B:00"}])) == (
        [(0, "GPU-a", "00000000:2B:00.0", True, ("gpu-ecc",))], 2)
