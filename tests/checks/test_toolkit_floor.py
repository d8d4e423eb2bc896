"""toolkit-version under both policy versions: the security floor (policy version 2 only), the
pre-release fix (every version), and versions read from dpkg's and rpm's databases.

Expectations by hand: the floor's bounds are NVIDIA's bulletins (CVE-2024-0132 fixed in
1.16.2, CVE-2025-23266 fixed in 1.17.8; checks/policy_v2.yaml); the dra minimum is 1.18.0
(policy_v1.yaml); a candidate sorts below its release (semver.org §11, deb-version(5) "~",
NVIDIA's rpm release "0.1.rc.N").
"""
import pytest
import yaml

from tests.conftest import bundle, run_cli


def verdict(name, path, version, check="toolkit-version", tmp_path=None):
    """(status, code, summary) of ``check`` on bundle ``name`` under policy ``version``,
    with the bundle's own test-config.yaml merged in."""
    cfg: dict = {}
    own = f"{bundle(name)}/test-config.yaml"
    try:
        with open(own) as fh:
            cfg = yaml.safe_load(fh) or {}
    except FileNotFoundError:
        pass
    cfg["policy_version"] = version
    cfg.pop("allocation_path", None)
    config = tmp_path / f"{name}-{version}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    res = run_cli(["check", "--bundle", bundle(name), "--config", str(config), "--path", path,
                   "--only", check, "--format", "json"])
    assert res.rc in (0, 1), res.err
    got = {c["id"]: c for c in res.json()["checks"]}[check]
    return got["status"], got.get("code"), got["summary"]


@pytest.mark.parametrize("name, path, v1, v2", [
    # 1.17.5 < 1.17.8 (CVE-2025-23266): version 2 fails it on every path; version 1 only
    # knows dra's minimum.
    ("toolkit-ctk-1175", "device-plugin", ("pass", None), ("fail", "toolkit-vulnerable")),
    ("toolkit-ctk-1175", "operator-clusterpolicy", ("pass", None),
     ("fail", "toolkit-vulnerable")),
    ("toolkit-ctk-1175", "dra", ("fail", "toolkit-too-old"), ("fail", "toolkit-vulnerable")),
    # 1.16.1 from rpm's SQLite database: below both bounds.
    ("toolkit-rpmdb-1161", "device-plugin", ("pass", None), ("fail", "toolkit-vulnerable")),
    # The GPU Operator's own nvidia-ctk, 1.17.5 (version 1 does not judge the operator's
    # toolkit: policy.operator.judge_managed is false there).
    ("toolkit-floor-operator-1175", "operator-clusterpolicy", ("skip", None),
     ("fail", "toolkit-vulnerable")),
    # 1.17.8 is the fixed release itself: at the floor, not below it.
    ("host-toolkit-117", "device-plugin", ("pass", None), ("pass", None)),
])
def test_security_floor_is_version_2_only(name, path, v1, v2, tmp_path):
    assert verdict(name, path, 1, tmp_path=tmp_path)[:2] == v1
    assert verdict(name, path, 2, tmp_path=tmp_path)[:2] == v2


def test_floor_names_each_cve_and_the_fix(tmp_path):
    _, _, summary = verdict("toolkit-rpmdb-1161", "device-plugin", 2, tmp_path=tmp_path)
    assert "CVE-2024-0132 (fixed in 1.16.2)" in summary
    assert "CVE-2025-23266 (fixed in 1.17.8)" in summary
    assert "upgrade to 1.17.8 or newer" in summary
    _, _, summary = verdict("toolkit-ctk-1175", "dra", 2, tmp_path=tmp_path)
    assert "CVE-2025-23266" in summary and "CVE-2024-0132" not in summary


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name, shown", [
    ("toolkit-ctk-118-rc1", "1.18.0-rc.1"),      # nvidia-ctk --version
    ("toolkit-deb-118-rc1", "1.18.0-rc.1"),      # dpkg 1.18.0~rc.1-1
    ("toolkit-rpmdb-118-rc1", "1.18.0-rc.1"),    # rpm 1.18.0-0.1.rc.1
])
def test_a_candidate_is_below_its_release_on_every_version(name, shown, version, tmp_path):
    status, code, summary = verdict(name, "dra", version, tmp_path=tmp_path)
    assert (status, code) == ("fail", "toolkit-too-old")
    assert f"{shown} is below 1.18.0" in summary


@pytest.mark.parametrize("version", [1, 2])
def test_rpm_sqlite_database_gives_the_version(version, tmp_path):
    status, code, summary = verdict("toolkit-rpmdb-118", "dra", version, tmp_path=tmp_path)
    assert (status, code) == ("pass", None)
    assert "1.18.0 (>= 1.18.0)" in summary


@pytest.mark.parametrize("version", [1, 2])
def test_berkeley_db_is_unknown_with_the_command(version, tmp_path):
    status, code, summary = verdict("toolkit-rpmdb-bdb", "dra", version, tmp_path=tmp_path)
    assert (status, code) == ("unknown", "toolkit-rpmdb-unreadable")
    assert "/var/lib/rpm/Packages" in summary
    assert "`rpm -q nvidia-container-toolkit nvidia-container-toolkit-base`" in summary


def test_corrupt_sqlite_database_is_unknown(tmp_path):
    status, code, summary = verdict("toolkit-rpmdb-corrupt", "dra", 2, tmp_path=tmp_path)
    assert (status, code) == ("unknown", "toolkit-version-unreadable")
    assert "/var/lib/rpm/rpmdb.sqlite" in summary and "rpm -q" in summary


@pytest.mark.parametrize("version", [1, 2])
def test_rpm_query_answers_where_berkeley_db_is_not_parsed(version, tmp_path):
    # Collected live on RHEL 8: nvidia-ctk not on PATH, `rpm -q` recorded 1.18.0-1.
    status, code, summary = verdict("toolkit-rpm-query-rhel8", "dra", version,
                                    tmp_path=tmp_path)
    assert (status, code) == ("pass", None)
    assert "1.18.0 (>= 1.18.0)" in summary
