"""checks/rpmdb.py: RPM headers and rpm's SQLite database, read without rpm; hostile input.

Headers are written by hand from rpm docs/manual/format_header.md (tests/fixtures/families/
toolkit.py rpm_header); the real rpm (4.18 here) reading the same database is the oracle.
"""
import shutil
import sqlite3
import struct
import subprocess

import pytest

from checks.rpmdb import (
    HEADER_MAGIC,
    TAG_NAME,
    TAG_RELEASE,
    TAG_VERSION,
    RpmDbError,
    header_fields,
    installed_versions,
    rpm_version,
)
from checks.toolkit_release import Version, parse_version, version_text
from tests.conftest import BUNDLES
from tests.fixtures.families.toolkit import rpm_header, write_rpmdb

PKG = "nvidia-container-toolkit"


def test_header_fields_by_hand():
    blob = rpm_header([(1000, "nvidia-container-toolkit"), (1001, "1.18.0"), (1002, "1"),
                       (1022, "x86_64")])
    # il = 5 entries (region + 4 strings); data = the strings + the 16-byte region trailer.
    assert struct.unpack_from(">II", blob) == (5, len(b"nvidia-container-toolkit\x001.18.0\x00"
                                                      b"1\x00x86_64\x00") + 16)
    assert header_fields(blob) == {TAG_NAME: PKG, TAG_VERSION: "1.18.0", TAG_RELEASE: "1"}
    # The same header with the package file's magic in front (format_header.md).
    assert header_fields(HEADER_MAGIC + blob)[TAG_VERSION] == "1.18.0"


def _entry(blob: bytes, i: int, tag: int, typ: int, offset: int, count: int) -> bytes:
    at = 8 + 16 * i
    return blob[:at] + struct.pack(">IIII", tag, typ, offset, count) + blob[at + 16:]


@pytest.mark.parametrize("mutate, why", [
    (lambda b: b[:7], "shorter than its 8-byte preamble"),
    (lambda b: struct.pack(">II", 0, 0) + b[8:], "out of range"),
    (lambda b: struct.pack(">II", 0x10000, 0) + b[8:], "out of range"),
    (lambda b: struct.pack(">II", 2, 0x7FFFFFFF) + b[8:], "out of range"),
    (lambda b: b[:-20], "runs past the blob"),
    (lambda b: _entry(b, 1, 1000, 6, 10_000, 1), "not one string inside the data"),
    (lambda b: _entry(b, 1, 1000, 4, 0, 1), "not one string"),  # INT32, not a string
    (lambda b: _entry(b, 1, 1000, 6, 0, 3), "not one string"),
])
def test_hostile_headers_are_refused(mutate, why):
    blob = rpm_header([(1000, PKG), (1001, "1.18.0"), (1002, "1")])
    with pytest.raises(RpmDbError, match=why):
        header_fields(mutate(blob))


def test_unterminated_string_is_refused():
    # One string entry whose bytes run to the end of the data with no NUL.
    data = b"abc"
    blob = struct.pack(">II", 1, len(data)) + struct.pack(">IIII", 1000, 6, 0, 1) + data
    with pytest.raises(RpmDbError, match="not terminated"):
        header_fields(blob)


def _db(tmp_path, packages):
    path = tmp_path / "rpmdb.sqlite"
    write_rpmdb(path, packages)
    return path


def test_installed_versions_from_a_database(tmp_path):
    path = _db(tmp_path, [("bash", "5.1.8", "9.el9"), (PKG, "1.18.0", "0.1.rc.1")])
    found = installed_versions(path.read_bytes(), [PKG, "absent"])
    assert found == {PKG: ("1.18.0", "0.1.rc.1")}
    assert rpm_version(found, PKG) == "1.18.0-0.1.rc.1"
    assert rpm_version(found, "absent") is None


def test_a_damaged_row_does_not_hide_the_others(tmp_path):
    path = _db(tmp_path, [(PKG, "1.17.8", "1")])
    db = sqlite3.connect(str(path))
    db.execute("INSERT INTO Packages (blob) VALUES (?)", (b"\x00\x00\x00\x09garbage",))
    db.commit()
    db.close()
    assert installed_versions(path.read_bytes(), [PKG]) == {PKG: ("1.17.8", "1")}


@pytest.mark.parametrize("data, why", [
    (b"", "not an SQLite 3 database"),
    (b"PK\x03\x04" + b"\x00" * 100, "not an SQLite 3 database"),
    (b"SQLite format 3\x00" + b"\xa5" * 4080, "SQLite: "),
])
def test_not_a_database(data, why):
    with pytest.raises(RpmDbError, match=why):
        installed_versions(data, [PKG])


def test_a_view_named_packages_is_refused(tmp_path):
    # A view could run any query (a recursive CTE) when selected: only a table is read.
    path = tmp_path / "evil.sqlite"
    db = sqlite3.connect(str(path))
    db.execute("CREATE VIEW Packages AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
               "SELECT x + 1 FROM c) SELECT x AS blob FROM c")
    db.commit()
    db.close()
    with pytest.raises(RpmDbError, match="no Packages table"):
        installed_versions(path.read_bytes(), [PKG])


def test_rpm_itself_reads_the_fixture_database_the_same(tmp_path):
    """Oracle: rpm (Debian's rpm 4.18 package, on this machine) on the committed bundle's
    database prints what checks/rpmdb.py reads."""
    rpm = shutil.which("rpm")
    assert rpm, "rpm is the oracle for this test (Debian package `rpm`)"
    for name in ("toolkit-rpmdb-118", "toolkit-rpmdb-118-rc1", "toolkit-rpmdb-1161"):
        dbdir = tmp_path / name
        dbdir.mkdir()
        src = BUNDLES / name / "root/var/lib/rpm/rpmdb.sqlite"
        shutil.copy(src, dbdir / "rpmdb.sqlite")
        out = subprocess.run(
            [rpm, "--dbpath", str(dbdir), "--define", "_db_backend sqlite", "-q", "--qf",
             "%{VERSION}-%{RELEASE}\\n", PKG],
            capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        ours = rpm_version(installed_versions(src.read_bytes(), [PKG]), PKG)
        assert out == ours, name
    # By hand: what each bundle's description says it holds.
    got = {n: rpm_version(installed_versions(
        (BUNDLES / n / "root/var/lib/rpm/rpmdb.sqlite").read_bytes(), [PKG]), PKG)
        for n in ("toolkit-rpmdb-118", "toolkit-rpmdb-118-rc1", "toolkit-rpmdb-1161")}
    assert got == {"toolkit-rpmdb-118": "1.18.0-1", "toolkit-rpmdb-118-rc1": "1.18.0-0.1.rc.1",
                   "toolkit-rpmdb-1161": "1.16.1-1"}


def test_sqlite3_cli_counts_the_same_rows(tmp_path):
    sqlite = shutil.which("sqlite3")
    assert sqlite, "the sqlite3 CLI is the oracle for this test"
    # A copy: SQLite opens -shm and -wal files beside a WAL-mode database, even read-only.
    src = tmp_path / "rpmdb.sqlite"
    shutil.copy(BUNDLES / "toolkit-rpmdb-118" / "root/var/lib/rpm/rpmdb.sqlite", src)
    out = subprocess.run([sqlite, "-readonly", str(src), "SELECT count(*) FROM Packages"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "4"  # bash, containerd.io, -base, nvidia-container-toolkit


# semver.org §11.4's own example, in order; then the packaging forms of one candidate.
SEMVER_ORDER = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
                "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]


def _v(text: str) -> Version:
    got = parse_version(text)
    assert got is not None, text
    return got


def test_semver_precedence_example():
    parsed = [_v(v) for v in SEMVER_ORDER]
    assert all(a < b for a, b in zip(parsed, parsed[1:]))


@pytest.mark.parametrize("text, shown, is_release", [
    ("1.18.0-rc.1", "1.18.0-rc.1", False),        # nvidia-ctk --version
    ("1.18.0~rc.1-1", "1.18.0-rc.1", False),      # dpkg (deb-version(5) tilde)
    ("1.18.0-0.1.rc.1", "1.18.0-rc.1", False),    # rpm VERSION-RELEASE, NVIDIA's candidate
    ("1.18.0~rc.1-1.el9", "1.18.0-rc.1", False),  # rpm tilde (rpmvercmp "~")
    ("1.18.0-1", "1.18.0", True),                 # deb revision / rpm release
    ("1.16.2-1.amzn2023", "1.16.2", True),
    ("v1.17.8", "1.17.8", True),
])
def test_packaging_forms(text, shown, is_release):
    v = _v(text)
    assert version_text(v) == shown
    assert (v >= _v("1.18.0")) is (is_release and shown == "1.18.0")
    assert (v[3] == 1) is is_release
