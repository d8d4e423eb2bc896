"""checks/operator (state.py, ownership.py): the waiting verdict's whole Outcome and the
package evidence read from dpkg's status file, value by value.

Expected values are written by hand from the sources the modules cite: NVIDIA/gpu-operator
cmd/nvidia-validator/main.go (the markers in /run/nvidia/validations), policy_v2.yaml's
operator grace period (900 s), deb-control(5) paragraphs in /var/lib/dpkg/status with
`Status: install ok installed` for an installed package (dpkg(1)), and the package names
ownership.py cites (Ubuntu's nvidia-driver-<branch> and libnvidia-compute-<branch>,
nvidia-container-toolkit).
"""
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host
from agent.model import Outcome, Status
from checks.operator.gpu_operator import GPU_OPERATOR
from checks.operator.ownership import installed_packages
from checks.operator.state import Waiting, driver_waiting, waiting_outcome
from checks.policy import ResolvedPolicy, load_policy

VALIDATIONS = "/run/nvidia/validations"


def policy(path="operator-clusterpolicy"):
    return ResolvedPolicy(load_policy(2), path)


def host_with(root, files):
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    # no command recorded: `rpm -qa` answers "not recorded", as on a host without rpm
    return Host(root, commands=RecordedCommands([], "test"))


def test_late_driver_fails_with_the_waiting_details():
    w = Waiting("driver", "no libnvidia-ml under /run/nvidia/driver", ["driver-ready"],
                1000.7, 900)
    assert waiting_outcome(w, policy(), "operator-driver-late") == Outcome(
        Status.FAIL,
        "the GPU Operator driver is still not on the host 1000s after boot (grace period "
        "900s): no libnvidia-ml under /run/nvidia/driver; validator markers in "
        f"{VALIDATIONS}: driver-ready",
        {"waiting_for": "gpu-operator-driver", "markers": ["driver-ready"], "uptime_s": 1000,
         "grace_period_s": 900, "driver_upgrade_state": None},
        code="operator-driver-late")


def test_waiting_driver_is_input_missing_with_its_details(tmp_path):
    host = host_with(tmp_path, {"/proc/uptime": "120.50 200.00\n",
                                f"{VALIDATIONS}/toolkit-ready": "",
                                f"{VALIDATIONS}/.driver-ctr-ready": ""})
    w = driver_waiting(host, policy())
    out = waiting_outcome(w, policy(), "operator-driver-late")
    assert (out.status, out.skip) == (Status.SKIP, "input-missing")
    assert out.details == {"waiting_for": "gpu-operator-driver",
                           "markers": [".driver-ctr-ready", "toolkit-ready"], "uptime_s": 120,
                           "grace_period_s": 900, "driver_upgrade_state": None}


DPKG_STATUS = """\
Package: bash
Status: install ok installed
Version: 5.1-6

Package: nvidia-driver-550
Status: install ok installed

Package: libnvidia-compute-550
Version: 550.127.05-0ubuntu1

Status: install ok installed
Version: 1.0

Package: nvidia-container-toolkit
Status: deinstall ok config-files
Version: 1.17.8-1
"""


def test_installed_packages_are_the_installed_nvidia_ones_from_dpkg(tmp_path):
    host = host_with(tmp_path, {"/var/lib/dpkg/status": DPKG_STATUS})
    answered = []
    # nvidia-driver-550 has no Version field: "?"; libnvidia-compute-550 has no Status: not
    # installed; bash is installed but not NVIDIA's; a paragraph without Package is no package.
    assert installed_packages(host, answered) == ["nvidia-driver-550 ?"]
    assert answered == ["dpkg"]


def test_no_package_database_answers_nothing(tmp_path):
    answered = []
    assert installed_packages(host_with(tmp_path, {}), answered) == []
    assert answered == []


RPM = ["rpm", "-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n", "nvidia-driver*",
       "kmod-nvidia*", "cuda-drivers*", "nvidia-container-toolkit*"]


def rpm_host(root, stdout):
    root.mkdir(parents=True, exist_ok=True)
    records = [{"argv": RPM, "rc": 0, "stdout": stdout, "stderr": ""}]
    return Host(root, commands=RecordedCommands(records, "test"))


def test_rpm_packages_are_the_nvidia_ones_rpm_lists(tmp_path):
    stdout = ("nvidia-driver 550.127.05-1.el9\n\nbash 5.1-6\nkmod-nvidia-open-dkms 550.127.05-1.el9\n"
              "nvidia-container-toolkit 1.17.8-1\nnvidia-container-toolkit-base 1.17.8-1\n"
              "nvidia-driver-libs\n")
    answered = []
    assert installed_packages(rpm_host(tmp_path, stdout), answered) == [
        "nvidia-driver 550.127.05-1.el9", "kmod-nvidia-open-dkms 550.127.05-1.el9",
        "nvidia-container-toolkit 1.17.8-1", "nvidia-container-toolkit-base 1.17.8-1",
        "nvidia-driver-libs"]
    assert answered == ["rpm"]


def test_rpm_output_is_read_to_200_lines(tmp_path):
    stdout = "bash 5.1-6\n" * 200 + "nvidia-driver 550.127.05-1.el9\n"
    assert installed_packages(rpm_host(tmp_path, stdout), []) == []
    stdout = "bash 5.1-6\n" * 199 + "nvidia-driver 550.127.05-1.el9\n"
    assert installed_packages(rpm_host(tmp_path, stdout), []) == [
        "nvidia-driver 550.127.05-1.el9"]


def test_the_operators_copies_on_a_host_owned_path_fail_naming_both(tmp_path):
    lib = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    runtime = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    host = host_with(tmp_path, {lib: "", runtime: ""})
    out = GPU_OPERATOR.run(host, policy("device-plugin"))
    assert (out.status, out.code) == (Status.FAIL, "operator-driver-unmanaged")
    assert out.summary == (
        "ownership conflict: the GPU Operator's driver while the config says the host owns the "
        f"driver (policy.driver.managed_by_operator false on device-plugin: {lib}); also the "
        "GPU Operator's toolkit while the config says the host owns the toolkit "
        f"(policy.toolkit.managed_by_operator false on device-plugin: {runtime}); no validator "
        f"markers in {VALIDATIONS}")
    assert out.details["evidence"] == {"host_driver": [], "operator_driver": [lib],
                                       "host_toolkit": [], "operator_toolkit": [runtime]}
    assert out.details["conflicts"] == ["operator-driver-unmanaged", "operator-toolkit-unmanaged"]
