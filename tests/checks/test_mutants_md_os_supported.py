"""os-supported, value by value: os-release(5) parsing and every verdict's whole Outcome.

Expected values are written by hand from os-release(5) (KEY=value lines with shell quoting,
"#" comments, /etc/os-release first and /usr/lib/os-release as the fallback) and from
policy_v1.yaml's `os` matrix: supported ubuntu 22.04/24.04, rhel 8/9 (RHEL is judged by its
major release), amzn 2023; deprecated ubuntu 20.04.
"""
import pytest

from agent.host.seam import Host
from agent.model import Outcome, Status
from checks.os_supported import OS_SUPPORTED, parse_os_release
from checks.policy import ResolvedPolicy, load_policy

KERNEL = "/proc/sys/kernel/osrelease"
MATRIX = "ubuntu 22.04/24.04, rhel 8/9, amzn 2023"


def host_with(root, files):
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return Host(root)


def run(host):
    return OS_SUPPORTED.run(host, ResolvedPolicy(load_policy(1), "dra"))


def test_parse_os_release_reads_quoted_values_and_skips_the_rest():
    text = ("# a comment\n\nNAME=\"Ubuntu\"\nID=ubuntu\nVERSION_ID='22.04'\nno equals sign\n"
            "PRETTY_NAME=\"Ubuntu 22.04.4 LTS\"\nBROKEN=\"unterminated\nEMPTY=\n"
            "  ID_LIKE = debian \nURL=a=b\n   # indented comment=x\n")
    assert parse_os_release(text) == {
        "NAME": "Ubuntu", "ID": "ubuntu", "VERSION_ID": "22.04",
        "PRETTY_NAME": "Ubuntu 22.04.4 LTS", "EMPTY": "", "ID_LIKE": "debian", "URL": "a=b"}


def details(os_id, version, pretty, kernel=None):
    return {"id": os_id, "version_id": version, "pretty_name": pretty, "kernel": kernel}


def test_supported_os_passes_with_its_details(tmp_path):
    host = host_with(tmp_path, {"/etc/os-release": 'ID=ubuntu\nVERSION_ID="24.04"\n'
                                'PRETTY_NAME="Ubuntu 24.04.1 LTS"\n',
                                "/usr/lib/os-release": "ID=debian\nVERSION_ID=12\n",
                                KERNEL: "6.8.0-45-generic\n"})
    assert run(host) == Outcome(Status.PASS, "Ubuntu 24.04.1 LTS is supported",
                                details("ubuntu", "24.04", "Ubuntu 24.04.1 LTS",
                                        "6.8.0-45-generic"))


def test_the_usr_lib_file_is_the_fallback_and_rhel_is_judged_by_its_major(tmp_path):
    host = host_with(tmp_path, {"/usr/lib/os-release": 'ID="rhel"\nVERSION_ID="9.4"\n'})
    # no PRETTY_NAME: the name is ID and VERSION_ID
    assert run(host) == Outcome(Status.PASS, "rhel 9.4 is supported",
                                details("rhel", "9.4", "rhel 9.4"))


def test_only_rhel_versions_are_cut_to_the_major(tmp_path):
    host = host_with(tmp_path, {"/etc/os-release": "ID=ubuntu\nVERSION_ID=22.04.1\n"})
    out = run(host)
    assert (out.status, out.code) == (Status.WARN, "os-unsupported")


def test_deprecated_os_warns(tmp_path):
    host = host_with(tmp_path, {"/etc/os-release": "ID=ubuntu\nVERSION_ID=20.04\n",
                                KERNEL: "  \n"})
    assert run(host) == Outcome(Status.WARN, "ubuntu 20.04 is deprecated: supported with "
                                "warnings only", details("ubuntu", "20.04", "ubuntu 20.04"),
                                code="os-deprecated")


def test_unsupported_os_warns_naming_the_matrix(tmp_path):
    host = host_with(tmp_path, {"/etc/os-release": "ID=debian\nVERSION_ID=12\n"
                                "PRETTY_NAME='Debian GNU/Linux 12 (bookworm)'\n"})
    assert run(host) == Outcome(
        Status.WARN, f"Debian GNU/Linux 12 (bookworm) is not in the support matrix ({MATRIX})",
        details("debian", "12", "Debian GNU/Linux 12 (bookworm)"), code="os-unsupported")


@pytest.mark.parametrize("os_id, version", [("rhel", "7"), ("amzn", "2"), ("fedora", "9")])
def test_an_id_or_version_outside_the_matrix_warns(tmp_path, os_id, version):
    host = host_with(tmp_path, {"/etc/os-release": f"ID={os_id}\nVERSION_ID={version}\n"})
    assert run(host).code == "os-unsupported"


def test_no_os_release_is_unknown(tmp_path):
    assert run(Host(tmp_path)) == Outcome(
        Status.UNKNOWN, "no /etc/os-release or /usr/lib/os-release on this host",
        code="os-unidentified")


def test_os_release_without_an_id_is_unknown(tmp_path):
    host = host_with(tmp_path, {"/etc/os-release": "VERSION_ID=12\n"})
    assert run(host) == Outcome(Status.UNKNOWN, "os-release has no ID field",
                                details("", "12", "12"), code="os-unidentified")


def test_os_release_without_a_version_names_the_id_alone(tmp_path):
    # VERSION_ID is optional in os-release(5) (rolling releases such as Arch omit it)
    host = host_with(tmp_path, {"/etc/os-release": "ID=arch\n"})
    assert run(host) == Outcome(Status.WARN, f"arch is not in the support matrix ({MATRIX})",
                                details("arch", "", "arch"), code="os-unsupported")
