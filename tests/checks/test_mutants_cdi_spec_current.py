"""checks/containerd/cdi_spec_current.py, outcome by outcome: the whole Outcome for each branch of
cdi-spec-current (no driver, no spec, stale, missing paths, format, duplicates, coverage and
where the expected GPU count comes from), so a changed word, bound or detail key is caught.

Expected values are written by hand from the CDI specification (cncf-tags/
container-device-interface SPEC.md: spec directories /etc/cdi then /var/run/cdi, later ones
shadowing earlier ones; released cdiVersions; containerEdits deviceNodes/mounts/hooks) and the
/proc/driver/nvidia/version format (checks/driver/nvidia_version.py).
"""
import os
from typing import Any, Dict, List, Optional

import yaml

from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import Outcome, Status
from checks.containerd.cdi_spec_current import CDI_SPEC_CURRENT, REGENERATE

DRIVER = "580.173.02"
NVRM = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  Tue Jun 23 08:38:17 UTC 2026\n"
LIB = "/usr/lib/x86_64-linux-gnu"
HOOK = "/usr/bin/nvidia-cdi-hook"
ETC = "/etc/cdi/nvidia.yaml"
RUN = "/var/run/cdi/nvidia.yaml"


def write(root, path: str, text: str = "", mode: Optional[int] = None) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    if mode is not None:
        os.chmod(target, mode)


def gpu_spec(gpus: int = 2, version: str = DRIVER, kind: str = "nvidia.com/gpu",
             cdi: str = "0.5.0", hook: str = HOOK) -> Dict[str, Any]:
    devices: List[Dict[str, Any]] = [
        {"name": str(i), "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{i}"}]}}
        for i in range(gpus)
    ]
    devices.append({"name": "all", "containerEdits": {
        "deviceNodes": [{"path": f"/dev/nvidia{i}"} for i in range(gpus)]}})
    return {
        "cdiVersion": cdi, "kind": kind, "devices": devices,
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl"}],
            "mounts": [{"hostPath": f"{LIB}/libcuda.so.{version}",
                        "containerPath": f"{LIB}/libcuda.so.{version}"}],
            "hooks": [{"hookName": "createContainer", "path": hook,
                       "args": ["nvidia-cdi-hook", "update-ldcache",
                                f"--host-driver-version={version}"]}],
        },
    }


def healthy_tree(root, gpus: int = 2, version: str = DRIVER) -> None:
    """Every path a gpu_spec(gpus, version) names, and the loaded driver."""
    write(root, "/proc/driver/nvidia/version", NVRM)
    for i in range(gpus):
        write(root, f"/dev/nvidia{i}")
    write(root, "/dev/nvidiactl")
    write(root, f"{LIB}/libcuda.so.{version}")
    write(root, HOOK, "#!/bin/sh\n", 0o755)


def spec(root, path: str, data: Any) -> None:
    write(root, path, data if isinstance(data, str) else yaml.safe_dump(data))


def nodes(*indexes: int) -> List[Dict[str, Any]]:
    return [{"path": f"/dev/nvidia{i}", "major": 195, "minor": i} for i in indexes]


def run(root, facts: Optional[Dict[str, Any]] = None, snapshot: Any = None,
        **settings: Any) -> Outcome:
    from checks.policy import ResolvedPolicy, load_policy

    host = Host(root, facts=StaticFacts(facts or {}), gpus=StaticGpus(snapshot))
    pol = ResolvedPolicy(load_policy(1), "dra", settings=Config(**settings).model_dump())
    return CDI_SPEC_CURRENT.run(host, pol)


def base(specs=(), claims=(), driver: Optional[str] = DRIVER, problems=None,
         expected: Optional[int] = None, source: Optional[str] = None, **more: Any):
    out = {"specs": list(specs), "claim_specs": list(claims), "driver_version": driver,
           "problems": problems or {}, "expected_gpus": expected, "expected_source": source}
    out.update(more)
    return out


# -- no driver, no spec --------------------------------------------------------------------
def test_no_driver_needs_driver_loaded(tmp_path):
    spec(tmp_path, RUN, gpu_spec())
    assert run(tmp_path) == Outcome(
        Status.SKIP,
        "needs the NVIDIA driver loaded (/proc/driver/nvidia/version absent; see driver-loaded)",
        {}, None, "needs:driver-loaded")


def test_no_spec_passes_with_the_gpu_count_from_device_nodes(tmp_path):
    write(tmp_path, "/proc/driver/nvidia/version", NVRM)
    facts = {"dev_nodes": nodes(1, 0, 1) + [{"path": "/dev/nvidiactl"}, "junk", {"major": 195}]}
    assert run(tmp_path, facts) == Outcome(
        Status.PASS, "no NVIDIA CDI spec on this host (none required)",
        base(expected=2, source="/dev/nvidiaN nodes"))


def declared_fix(code: str) -> str:
    """The fix the engine puts in the result where the outcome has no own remediation."""
    return CDI_SPEC_CURRENT.failure(code).fix


def test_no_spec_fails_when_the_config_requires_one(tmp_path):
    write(tmp_path, "/proc/driver/nvidia/version", NVRM)
    write(tmp_path, "/etc/cdi/vendor.yaml", "cdiVersion: [\n")  # another vendor's, broken
    assert run(tmp_path, cdi={"require_spec": True}) == Outcome(
        Status.FAIL,
        "no NVIDIA CDI spec in /etc/cdi, /var/run/cdi and the config requires one "
        "(cdi.require_spec)",
        base(), code="spec-required-missing")
    assert declared_fix("spec-required-missing") == REGENERATE


def test_no_nvidia_spec_but_a_broken_other_spec_warns(tmp_path):
    write(tmp_path, "/proc/driver/nvidia/version", "NVRM version: garbled\n")
    write(tmp_path, "/etc/cdi/vendor.json", "[1]")
    err = "/etc/cdi/vendor.json: line 1: a CDI spec must be a mapping"
    assert run(tmp_path) == Outcome(Status.WARN, err, base(driver=None, warnings=[err]),
                                    code="other-vendor-spec-unparseable")
    # Another vendor's spec is not regenerated by nvidia-ctk: its declared fix says so.
    assert declared_fix("other-vendor-spec-unparseable") == (
        "Fix or remove the file named in the summary.")


# -- a host-wide spec --------------------------------------------------------------------
def test_current_spec_covering_every_gpu_passes(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec())
    assert run(tmp_path, {"dev_nodes": nodes(0, 1)}) == Outcome(
        Status.PASS, f"1 NVIDIA CDI spec(s) current for driver {DRIVER}, 2 GPU(s) covered",
        base([RUN], problems={RUN: {}}, expected=2, source="/dev/nvidiaN nodes",
             covered_gpu_nodes=["/dev/nvidia0", "/dev/nvidia1"]))


def test_gpu_count_unknown_passes_saying_coverage_is_not_verified(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec())
    assert run(tmp_path, snapshot={"gpus": []}) == Outcome(
        Status.PASS, f"1 NVIDIA CDI spec(s) current for driver {DRIVER}, 2 GPU(s) covered",
        base([RUN], problems={RUN: {}}, covered_gpu_nodes=["/dev/nvidia0", "/dev/nvidia1"],
             coverage="not verified: GPU count unknown on this host"))


def test_spec_short_of_the_device_nodes_names_the_missing_ones(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec())
    details = base([RUN], problems={RUN: {}}, expected=4, source="/dev/nvidiaN nodes",
                   covered_gpu_nodes=["/dev/nvidia0", "/dev/nvidia1"])
    summary = "nvidia.com/gpu spec covers 2 of 4 GPUs (missing /dev/nvidia2, /dev/nvidia3) " \
              "(/dev/nvidiaN nodes)"
    assert run(tmp_path, {"dev_nodes": nodes(3, 0, 2, 1)}) == Outcome(
        Status.FAIL, summary, {"failures": [summary], "warnings": [], **details},
        code="gpu-coverage-incomplete")
    assert declared_fix("gpu-coverage-incomplete") == REGENERATE


def test_nvml_snapshot_count_wins_over_device_nodes(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec())
    out = run(tmp_path, {"dev_nodes": nodes(0, 1)}, snapshot={"gpus": [{}, {}, {}]})
    assert out.status == Status.FAIL
    assert out.summary == "nvidia.com/gpu spec covers 2 of 3 GPUs (NVML snapshot)"
    assert (out.details["expected_gpus"], out.details["expected_source"]) == (3, "NVML snapshot")


def test_configured_gpu_count_wins_over_everything(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec())
    out = run(tmp_path, {"dev_nodes": nodes(0, 1, 2)}, snapshot={"gpus": [{}, {}, {}]},
              expected_gpus=2)
    assert out.status == Status.PASS
    assert (out.details["expected_gpus"], out.details["expected_source"]) == (
        2, "config expected_gpus")
    out = run(tmp_path, {"dev_nodes": nodes(0, 1)}, expected_gpus=0)
    assert out.status == Status.PASS and out.details["expected_gpus"] == 0


def test_stale_spec_names_the_first_old_version_and_lists_the_evidence(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec(version="570.195.03"))
    lib = f"{LIB}/libcuda.so.570.195.03"
    stale = [f"{lib} is 570.195.03", "hook --host-driver-version=570.195.03 is 570.195.03"]
    summary = f"{RUN} was generated for another driver (loaded {DRIVER}; {lib} is 570.195.03)"
    assert run(tmp_path, {"dev_nodes": nodes(0, 1)}) == Outcome(
        Status.FAIL, summary,
        {"failures": [summary], "warnings": [],
         **base([RUN], problems={RUN: {"missing": [lib], "stale": stale}}, expected=2,
                source="/dev/nvidiaN nodes", covered_gpu_nodes=["/dev/nvidia0", "/dev/nvidia1"])},
        code="spec-stale")
    assert declared_fix("spec-stale") == REGENERATE


def test_missing_paths_without_a_known_driver_name_the_first_and_count_the_rest(tmp_path):
    write(tmp_path, "/proc/driver/nvidia/version", "NVRM version: no version here\n")
    write(tmp_path, "/dev/nvidia0")
    write(tmp_path, HOOK, "#!/bin/sh\n", 0o644)  # present but not executable
    spec(tmp_path, RUN, gpu_spec(version="570.195.03"))
    # The spec-wide containerEdits come before the per-device ones (device nodes, then mounts,
    # then hooks).
    missing = ["/dev/nvidiactl", "/dev/nvidia1", f"{LIB}/libcuda.so.570.195.03", HOOK]
    summary = f"{RUN} references /dev/nvidiactl, which does not exist (+3 more)"
    assert run(tmp_path) == Outcome(
        Status.FAIL, summary,
        {"failures": [summary], "warnings": [],
         **base([RUN], driver=None, problems={RUN: {"missing": missing}},
                covered_gpu_nodes=["/dev/nvidia0", "/dev/nvidia1"],
                coverage="not verified: GPU count unknown on this host")},
        code="spec-path-missing")
    assert declared_fix("spec-path-missing") == REGENERATE


def test_one_missing_path_has_no_count(tmp_path):
    healthy_tree(tmp_path)
    (tmp_path / "dev/nvidiactl").unlink()
    spec(tmp_path, RUN, gpu_spec())
    out = run(tmp_path)
    assert out.summary == f"{RUN} references /dev/nvidiactl, which does not exist"
    assert out.details["failures"] == [out.summary]


def test_format_problem_and_missing_path_are_both_failures(tmp_path):
    healthy_tree(tmp_path)
    (tmp_path / "dev/nvidia1").unlink()
    spec(tmp_path, RUN, gpu_spec(cdi="9.9.9"))
    first = f"{RUN}: unsupported cdiVersion '9.9.9'"
    second = f"{RUN} references /dev/nvidia1, which does not exist"
    out = run(tmp_path, {"dev_nodes": nodes(0, 1)})
    assert out == Outcome(
        Status.FAIL, first + " (+1 more)",
        {"failures": [first, second], "warnings": [],
         **base([RUN], problems={RUN: {"format": ["unsupported cdiVersion '9.9.9'"],
                                       "missing": ["/dev/nvidia1"]}},
                expected=2, source="/dev/nvidiaN nodes",
                covered_gpu_nodes=["/dev/nvidia0", "/dev/nvidia1"])},
        code="spec-invalid-format")  # the first failure's code
    assert declared_fix("spec-invalid-format") == REGENERATE


def test_duplicate_devices_across_directories_warn_and_in_one_directory_fail(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, ETC, gpu_spec(gpus=1))
    spec(tmp_path, RUN, gpu_spec(gpus=2))
    shadow = [f"device nvidia.com/gpu=0 defined in {ETC} and {RUN}",
              f"device nvidia.com/gpu=all defined in {ETC} and {RUN}"]
    covered = ["/dev/nvidia0", "/dev/nvidia1"]
    assert run(tmp_path, {"dev_nodes": nodes(0, 1)}) == Outcome(
        Status.WARN, shadow[0],
        {"warnings": shadow,
         **base([ETC, RUN], problems={ETC: {}, RUN: {}}, expected=2,
                source="/dev/nvidiaN nodes", covered_gpu_nodes=covered)},
        code="device-shadowed")
    assert declared_fix("device-shadowed") == REGENERATE
    spec(tmp_path, "/etc/cdi/nvidia-old.yaml", gpu_spec(gpus=1))
    out = run(tmp_path, {"dev_nodes": nodes(0, 1)})
    assert out.status == Status.FAIL and out.code == "device-duplicate"
    assert out.details["failures"] == [
        f"device nvidia.com/gpu=0 defined in /etc/cdi/nvidia-old.yaml and {ETC}",
        f"device nvidia.com/gpu=all defined in /etc/cdi/nvidia-old.yaml and {ETC}"]
    assert out.summary == out.details["failures"][0] + " (+1 more)"
    assert out.details["warnings"] == [
        f"device nvidia.com/gpu=0 defined in /etc/cdi/nvidia-old.yaml and {RUN}",
        f"device nvidia.com/gpu=all defined in /etc/cdi/nvidia-old.yaml and {RUN}"]


def test_claim_specs_are_checked_for_paths_only_and_never_as_duplicates(tmp_path):
    healthy_tree(tmp_path)
    claim = gpu_spec(gpus=1, kind="k8s.gpu.nvidia.com/claim", cdi="0.1.0")  # bad version
    one = "/var/run/cdi/k8s.gpu.nvidia.com-claim_a.yaml"
    two = "/var/run/cdi/k8s.gpu.nvidia.com-claim_b.yaml"
    spec(tmp_path, one, claim)
    spec(tmp_path, two, claim)
    assert run(tmp_path, {"dev_nodes": nodes(0, 1)}) == Outcome(
        Status.PASS, f"2 NVIDIA CDI spec(s) current for driver {DRIVER}",
        base([one, two], [one, two], problems={one: {}, two: {}}, expected=2,
             source="/dev/nvidiaN nodes"))


def test_other_nvidia_kinds_are_not_the_host_wide_spec(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec(kind="nvidia.com/mig"))
    out = run(tmp_path, {"dev_nodes": nodes(0, 1, 2)})
    assert out == Outcome(Status.PASS, f"1 NVIDIA CDI spec(s) current for driver {DRIVER}",
                          base([RUN], problems={RUN: {}}, expected=3,
                               source="/dev/nvidiaN nodes"))


def test_broken_nvidia_spec_fails_with_its_error(tmp_path):
    write(tmp_path, "/proc/driver/nvidia/version", NVRM)
    write(tmp_path, RUN, "- just\n- a list\n")
    err = f"{RUN}: line 1: a CDI spec must be a mapping"
    assert run(tmp_path) == Outcome(
        Status.FAIL, err, {"failures": [err], "warnings": [], **base([RUN])},
        code="spec-unparseable")
    assert declared_fix("spec-unparseable") == REGENERATE


def test_stale_evidence_is_sorted_not_in_spec_order(tmp_path):
    # The spec-wide hook is read before the per-device mount; the summary names the first
    # evidence in sorted order (a path sorts before "hook ...").
    healthy_tree(tmp_path)
    data = gpu_spec()
    data["containerEdits"]["hooks"][0]["args"][-1] = "--host-driver-version=570.195.03"
    data["containerEdits"]["mounts"] = []
    lib = f"{LIB}/libnvidia-ml.so.570.195.03"
    write(tmp_path, lib)
    data["devices"][0]["containerEdits"]["mounts"] = [{"hostPath": lib, "containerPath": lib}]
    spec(tmp_path, RUN, data)
    out = run(tmp_path, {"dev_nodes": nodes(0, 1)})
    assert out.summary == (f"{RUN} was generated for another driver (loaded {DRIVER}; {lib} is "
                           "570.195.03)")
    assert out.details["problems"][RUN] == {
        "stale": [f"{lib} is 570.195.03", "hook --host-driver-version=570.195.03 is 570.195.03"]}


def test_two_missing_paths_count_one_more(tmp_path):
    healthy_tree(tmp_path)
    (tmp_path / "dev/nvidiactl").unlink()
    (tmp_path / HOOK.lstrip("/")).unlink()
    spec(tmp_path, RUN, gpu_spec())
    assert run(tmp_path).summary == (
        f"{RUN} references /dev/nvidiactl, which does not exist (+1 more)")


def test_every_format_problem_of_a_spec_in_one_failure(tmp_path):
    healthy_tree(tmp_path)
    spec(tmp_path, RUN, gpu_spec(cdi="9.9.9", kind="nvidia.com/gpu!"))
    out = run(tmp_path, {"dev_nodes": nodes(0, 1)})
    assert out.summary == (f"{RUN}: unsupported cdiVersion '9.9.9'; invalid kind "
                           "'nvidia.com/gpu!'")


def test_current_spec_with_an_unparsable_driver_version_says_unknown(tmp_path):
    healthy_tree(tmp_path)
    write(tmp_path, "/proc/driver/nvidia/version", "NVRM version: garbled\n")
    spec(tmp_path, RUN, gpu_spec())
    out = run(tmp_path, {"dev_nodes": nodes(0, 1)})
    assert out.status == Status.PASS
    assert out.summary == "1 NVIDIA CDI spec(s) current for driver unknown, 2 GPU(s) covered"


def test_unreadable_version_file_leaves_the_driver_unknown(tmp_path):
    (tmp_path / "proc/driver/nvidia/version").mkdir(parents=True)  # exists, cannot be read
    assert run(tmp_path) == Outcome(
        Status.PASS, "no NVIDIA CDI spec on this host (none required)", base(driver=None))
