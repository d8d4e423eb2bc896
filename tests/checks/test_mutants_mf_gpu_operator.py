"""gpu-operator (checks/operator/gpu_operator.py): the whole Outcome of each branch, the
conflict texts, the owners and the package-database note, value by value.

Expected values are written by hand from the module's documented behaviour and the sources
it cites: the validator's markers in /run/nvidia/validations (NVIDIA/gpu-operator
cmd/nvidia-validator/main.go), the operator's toolkit in /usr/local/nvidia/toolkit
(ClusterPolicy toolkit.installDir default /usr/local/nvidia, plus `toolkit`), the host's
toolkit at /usr/bin/nvidia-container-runtime (NVIDIA Container Toolkit install guide), a
driver package named nvidia-driver-<branch> with `Status: install ok installed` in dpkg's
status file (dpkg(1), deb-control(5)); policy_v2.yaml's defaults: both owners the host
(managed_by_operator false) and ownership conflicts judged.
"""
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host
from agent.model import Outcome, Status
from checks.operator.gpu_operator import GPU_OPERATOR
from checks.policy import ResolvedPolicy, load_policy

VALIDATIONS = "/run/nvidia/validations"
HOST_RUNTIME = "/usr/bin/nvidia-container-runtime"
OPERATOR_RUNTIME = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
DPKG_STATUS = "/var/lib/dpkg/status"
DRIVER_PACKAGE = ("Package: nvidia-driver-580\nStatus: install ok installed\n"
                  "Version: 580.95.05-0ubuntu1\n\n")
OTHER_PACKAGE = "Package: bash\nStatus: install ok installed\nVersion: 5.2.21-2ubuntu4\n\n"
NO_PACKAGE_DB = " (no package database read: dpkg status absent, `rpm -qa` unavailable)"
NO_MARKERS = f"no validator markers in {VALIDATIONS}"
HOST_DRIVER_TEXT = ("a host-installed driver while the GPU Operator installs the driver "
                    "(package nvidia-driver-580 580.95.05-0ubuntu1)")
HOST_TOOLKIT_TEXT = ("a host-installed NVIDIA Container Toolkit while the GPU Operator installs "
                     f"the toolkit ({HOST_RUNTIME})")


def host_with(root, files):
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    root.mkdir(parents=True, exist_ok=True)
    # No command recorded: `rpm -qa` answers "not recorded", as on a host without rpm.
    return Host(root, commands=RecordedCommands([], "test"))


def policy(path="operator-clusterpolicy", driver=False, toolkit=False, judged=True):
    return ResolvedPolicy(load_policy(2, {"driver": {"managed_by_operator": driver},
                                          "toolkit": {"managed_by_operator": toolkit},
                                          "operator": {"ownership_conflicts": judged}}), path)


def details(markers=(), host_driver=(), operator_driver=(), host_toolkit=(),
            operator_toolkit=(), conflicts=(), package_db=()):
    return {"markers": list(markers), "driver_ready": {},
            "evidence": {"host_driver": list(host_driver),
                         "operator_driver": list(operator_driver),
                         "host_toolkit": list(host_toolkit),
                         "operator_toolkit": list(operator_toolkit)},
            "conflicts": list(conflicts), "package_db": list(package_db)}


def both_host_installed(tmp_path):
    return host_with(tmp_path, {DPKG_STATUS: DRIVER_PACKAGE + OTHER_PACKAGE, HOST_RUNTIME: "",
                                f"{VALIDATIONS}/toolkit-ready": ""})


# --- conflicts judged ------------------------------------------------------------------------

def test_two_conflicts_fail_on_the_first_naming_the_second_and_the_markers(tmp_path):
    out = GPU_OPERATOR.run(both_host_installed(tmp_path), policy(driver=True, toolkit=True))
    assert out == Outcome(
        Status.FAIL,
        f"ownership conflict: {HOST_DRIVER_TEXT}; also {HOST_TOOLKIT_TEXT}; validator markers "
        f"in {VALIDATIONS}: toolkit-ready",
        details(["toolkit-ready"], host_driver=["package nvidia-driver-580 580.95.05-0ubuntu1"],
                host_toolkit=[HOST_RUNTIME],
                conflicts=["host-driver-beside-operator", "host-toolkit-beside-operator"],
                package_db=["dpkg"]),
        code="host-driver-beside-operator")


def test_one_conflict_fails_with_no_also(tmp_path):
    host = host_with(tmp_path, {OPERATOR_RUNTIME: ""})
    out = GPU_OPERATOR.run(host, policy())
    assert out == Outcome(
        Status.FAIL,
        "ownership conflict: the GPU Operator's toolkit while the config says the host owns "
        "the toolkit (policy.toolkit.managed_by_operator false on operator-clusterpolicy: "
        f"{OPERATOR_RUNTIME}); {NO_MARKERS}",
        details(operator_toolkit=[OPERATOR_RUNTIME], conflicts=["operator-toolkit-unmanaged"]),
        code="operator-toolkit-unmanaged")


# --- passes: the owners, the markers and the package-database note -----------------------

def test_operator_driver_and_host_toolkit_pass_naming_both_owners(tmp_path):
    host = host_with(tmp_path, {DPKG_STATUS: OTHER_PACKAGE})
    out = GPU_OPERATOR.run(host, policy(driver=True))
    assert out == Outcome(
        Status.PASS,
        f"driver by the GPU Operator, toolkit by the host; {NO_MARKERS}; no ownership conflict",
        details(package_db=["dpkg"]))


def test_without_a_package_database_the_pass_says_so(tmp_path):
    host = host_with(tmp_path, {})
    out = GPU_OPERATOR.run(host, policy(toolkit=True))
    assert out == Outcome(
        Status.PASS,
        f"driver by the host, toolkit by the GPU Operator; {NO_MARKERS}; no ownership conflict"
        + NO_PACKAGE_DB,
        details())


def test_markers_alone_off_the_operator_paths_are_a_trace_judged_there(tmp_path):
    # dra expects no operator; the validator's marker is a trace of one, so the check runs.
    host = host_with(tmp_path, {f"{VALIDATIONS}/toolkit-ready": ""})
    out = GPU_OPERATOR.run(host, policy(path="dra"))
    assert out == Outcome(
        Status.PASS,
        f"no GPU Operator expected on the dra path; validator markers in {VALIDATIONS}: "
        "toolkit-ready; no ownership conflict" + NO_PACKAGE_DB,
        details(["toolkit-ready"]))


def test_no_trace_off_the_operator_paths_is_not_applicable(tmp_path):
    out = GPU_OPERATOR.run(host_with(tmp_path, {HOST_RUNTIME: ""}), policy(path="dra"))
    assert out == Outcome(Status.SKIP, "no GPU Operator on the dra path and no trace of it on "
                          "the host", {}, skip="not-applicable")


def test_conflicts_not_judged_pass_naming_every_conflict(tmp_path):
    out = GPU_OPERATOR.run(both_host_installed(tmp_path),
                           policy(driver=True, toolkit=True, judged=False))
    assert out == Outcome(
        Status.PASS,
        "driver by the GPU Operator, toolkit by the GPU Operator; validator markers in "
        f"{VALIDATIONS}: toolkit-ready; ownership conflict not judged "
        f"(policy.operator.ownership_conflicts false): {HOST_DRIVER_TEXT}; {HOST_TOOLKIT_TEXT}",
        details(["toolkit-ready"], host_driver=["package nvidia-driver-580 580.95.05-0ubuntu1"],
                host_toolkit=[HOST_RUNTIME],
                conflicts=["host-driver-beside-operator", "host-toolkit-beside-operator"],
                package_db=["dpkg"]))
