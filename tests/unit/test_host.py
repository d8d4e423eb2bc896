"""The Host seam: chroot path semantics and the refusal to mix a fixture with this machine."""
import os

import pytest

from agent.host.resolve import HostPathError
from agent.host.seam import Host


def test_absolute_symlink_resolves_inside_the_root(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "real/os-release").write_text("ID=inside\n")
    os.symlink("/real/os-release", tmp_path / "etc/os-release")
    host = Host(tmp_path)
    assert host.read_text("/etc/os-release") == "ID=inside\n"
    assert host.real_path("/etc/os-release") == tmp_path / "real/os-release"


def test_dotdot_and_links_cannot_leave_the_root(tmp_path):
    (tmp_path / "etc").mkdir()
    os.symlink("../../../../etc/passwd", tmp_path / "etc/escape")
    host = Host(tmp_path)
    assert host.real_path("/../../etc/passwd") == tmp_path / "etc/passwd"
    assert str(host.real_path("/etc/escape")).startswith(str(tmp_path))
    assert host.read_text_or_none("/etc/escape") is None  # /etc/passwd of the fixture: absent


def test_symlink_loop_is_an_error_not_a_hang(tmp_path):
    os.symlink("/b", tmp_path / "a")
    os.symlink("/a", tmp_path / "b")
    host = Host(tmp_path)
    with pytest.raises(HostPathError):
        host.real_path("/a")
    assert host.read_text_or_none("/a") is None


def test_fixture_root_refuses_real_commands(tmp_path):
    host = Host(tmp_path)
    res = host.run(["true"])
    assert res.not_recorded and not res.ok and res.rc == -1
    assert "not recorded" in res.describe()


def test_glob_matches_only_the_last_component(tmp_path):
    (tmp_path / "etc/cdi").mkdir(parents=True)
    for name in ("a.yaml", "b.json", "c.yaml"):
        (tmp_path / "etc/cdi" / name).write_text("x")
    host = Host(tmp_path)
    assert host.glob("/etc/cdi/*.yaml") == ["/etc/cdi/a.yaml", "/etc/cdi/c.yaml"]
    assert host.glob("/etc/none/*.yaml") == []
    with pytest.raises(ValueError):
        host.glob("/etc/*/a.yaml")


def test_readlink_reports_the_written_target(tmp_path):
    (tmp_path / "lib").mkdir()
    os.symlink("libnvidia-ml.so.580.1", tmp_path / "lib/libnvidia-ml.so.1")
    host = Host(tmp_path)
    assert host.readlink("/lib/libnvidia-ml.so.1") == "libnvidia-ml.so.580.1"
    assert host.readlink("/lib/none") is None
