"""checks/rpmdb.py at its edges: the exact refusal messages, the header bounds, the progress
bound on SQLite's work, and the private-file path Pythons without Connection.deserialize take.

Expected values are written by hand from the sources the module cites: rpm
docs/manual/format_header.md (il, dl, 16-byte index entries, NUL-terminated RPM_STRING_TYPE 6
strings), rpm lib/header.c hdrchkTags/hdrchkData (0xffff entries, 0x0fffffff data bytes), and
sqlite.org c3ref/progress_handler.html (a non-zero return interrupts the statement:
SQLITE_INTERRUPT, "interrupted").
"""
import os
import shutil
import sqlite3
import stat
import struct
import tempfile

import pytest

import checks.rpmdb as rpmdb
from tests.fixtures.families.toolkit import rpm_header, write_rpmdb

PKG = "nvidia-container-toolkit"


def _raw(entries, data: bytes, dl=None) -> bytes:
    """A header from its parts: il, dl, the (tag, type, offset, count) entries, the data."""
    return (struct.pack(">II", len(entries), len(data) if dl is None else dl)
            + b"".join(struct.pack(">IIII", *e) for e in entries) + data)


def _db_bytes(tmp_path, packages) -> bytes:
    path = tmp_path / "db" / "rpmdb.sqlite"
    write_rpmdb(path, packages)
    return path.read_bytes()


def _sqlite_bytes(tmp_path, *statements: str) -> bytes:
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(str(path))
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()
    return path.read_bytes()


# -- header_fields ----------------------------------------------------------------------
def test_an_eight_byte_header_has_its_preamble_but_no_room_for_its_entry():
    # il = 1, dl = 0: the preamble is whole (8 bytes), the one 16-byte entry is missing.
    with pytest.raises(rpmdb.RpmDbError) as exc:
        rpmdb.header_fields(struct.pack(">II", 1, 0))
    assert str(exc.value) == "header index or data runs past the blob"


@pytest.mark.parametrize("blob, message", [
    (b"\x00" * 7, "header shorter than its 8-byte preamble"),
    (struct.pack(">II", 0, 0), "header counts out of range (il=0, dl=0)"),
    # dl is unsigned (format_header.md: big-endian uint32): 2^31 is a count, not a negative.
    (struct.pack(">II", 1, 0x80000000) + b"\x00" * 16,
     "header counts out of range (il=1, dl=2147483648)"),
    # exactly hdrchkData's limit is a count in range: the blob is what is too short
    (struct.pack(">II", 1, rpmdb.MAX_DATA) + b"\x00" * 16,
     "header index or data runs past the blob"),
    (_raw([(1000, 6, 4, 1)], b"abc\x00"), "tag 1000: not one string inside the data (type 6)"),
    # an offset of 2^31 is past the data, not 2^31 bytes before it
    (_raw([(1000, 6, 0x80000000, 1)], b"abc\x00"),
     "tag 1000: not one string inside the data (type 6)"),
    (_raw([(1000, 6, 0, 1)], b"abc"), "tag 1000: string not terminated within the data"),
])
def test_malformed_headers_are_refused_with_their_reason(blob, message):
    with pytest.raises(rpmdb.RpmDbError) as exc:
        rpmdb.header_fields(blob)
    assert str(exc.value) == message


def test_a_header_of_exactly_0xffff_entries_is_read():
    filler = [(1, 0, 0, 0)] * (rpmdb.MAX_INDEX - 1)  # tag 1: not one of NAME/VERSION/RELEASE
    blob = _raw(filler + [(rpmdb.TAG_NAME, 6, 0, 1)], b"cuda\x00")
    assert rpmdb.header_fields(blob) == {rpmdb.TAG_NAME: "cuda"}


def test_a_string_longer_than_the_cap_is_not_terminated_within_it():
    name = "n" * 1100  # MAX_STRING is 1024 bytes
    with pytest.raises(rpmdb.RpmDbError, match="string not terminated"):
        rpmdb.header_fields(_raw([(rpmdb.TAG_NAME, 6, 0, 1)], name.encode() + b"\x00"))
    # just under the cap it is read whole
    assert rpmdb.header_fields(_raw([(rpmdb.TAG_NAME, 6, 0, 1)], b"n" * 1000 + b"\x00")) == {
        rpmdb.TAG_NAME: "n" * 1000}


def test_the_package_file_magic_is_skipped_only_when_present():
    blob = rpm_header([(rpmdb.TAG_NAME, PKG), (rpmdb.TAG_VERSION, "1.17.8")])
    assert rpmdb.header_fields(rpmdb.HEADER_MAGIC + blob) == {
        rpmdb.TAG_NAME: PKG, rpmdb.TAG_VERSION: "1.17.8"}
    assert rpmdb.header_fields(blob) == {rpmdb.TAG_NAME: PKG, rpmdb.TAG_VERSION: "1.17.8"}


def test_bytes_that_are_not_utf8_are_replaced_not_refused():
    blob = _raw([(rpmdb.TAG_NAME, 6, 0, 1)], b"caf\xe9\x00")
    assert rpmdb.header_fields(blob) == {rpmdb.TAG_NAME: "caf\ufffd"}


# -- installed_versions / rpm_version ---------------------------------------------------------
def test_a_package_without_a_release_has_an_empty_one(tmp_path):
    db = tmp_path / "rpmdb.sqlite"
    write_rpmdb(db, [])
    conn = sqlite3.connect(str(db))
    conn.execute("INSERT INTO Packages (blob) VALUES (?)",
                 (rpm_header([(rpmdb.TAG_NAME, PKG), (rpmdb.TAG_VERSION, "1.18.0")]),))
    conn.commit()
    conn.close()
    found = rpmdb.installed_versions(db.read_bytes(), [PKG])
    assert found == {PKG: ("1.18.0", "")}
    assert rpmdb.rpm_version(found, PKG) == "1.18.0"  # rpm prints VERSION-RELEASE; no dash alone


def test_rpm_version_joins_version_and_release():
    assert rpmdb.rpm_version({PKG: ("1.18.0", "")}, PKG) == "1.18.0"
    assert rpmdb.rpm_version({PKG: ("1.18.0", "1.el9")}, PKG) == "1.18.0-1.el9"


def test_a_damaged_first_row_does_not_hide_the_rows_after_it(tmp_path):
    db = tmp_path / "rpmdb.sqlite"
    write_rpmdb(db, [])
    conn = sqlite3.connect(str(db))
    conn.execute("INSERT INTO Packages (blob) VALUES (?)", (b"\x00\x00\x00\x09garbage",))
    conn.execute("INSERT INTO Packages (blob) VALUES (?)",
                 (rpm_header([(rpmdb.TAG_NAME, PKG), (rpmdb.TAG_VERSION, "1.17.8"),
                              (rpmdb.TAG_RELEASE, "1")]),))
    conn.commit()
    conn.close()
    assert rpmdb.installed_versions(db.read_bytes(), [PKG]) == {PKG: ("1.17.8", "1")}


def test_not_a_database_names_the_missing_header():
    with pytest.raises(rpmdb.RpmDbError) as exc:
        rpmdb.installed_versions(b"PK\x03\x04" + b"\x00" * 100, [PKG])
    assert str(exc.value) == "not an SQLite 3 database (no 'SQLite format 3' header)"


@pytest.mark.parametrize("statements, message", [
    (["CREATE TABLE other (x)"], "no Packages table (not rpm's SQLite database)"),
    (["CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, data BLOB)"],
     "Packages is not rpm's table (no stored blob column)"),
])
def test_a_database_without_rpms_table_is_refused_with_the_reason(tmp_path, statements, message):
    with pytest.raises(rpmdb.RpmDbError) as exc:
        rpmdb.installed_versions(_sqlite_bytes(tmp_path, *statements), [PKG])
    assert str(exc.value) == message


# -- the progress bound -------------------------------------------------------------------------
def _many(tmp_path) -> bytes:
    # 5,000 rows: reading them takes well over one progress period (10,000 VM steps).
    return _db_bytes(tmp_path, [(f"pkg{i}", "1.0", "1") for i in range(5000)]
                     + [(PKG, "1.18.0", "1")])


def test_a_large_database_is_read_within_the_default_bound(tmp_path):
    assert rpmdb.installed_versions(_many(tmp_path), [PKG, "pkg7"]) == {
        PKG: ("1.18.0", "1"), "pkg7": ("1.0", "1")}


def test_work_past_the_progress_bound_is_interrupted(tmp_path, monkeypatch):
    data = _many(tmp_path)
    monkeypatch.setattr(rpmdb, "MAX_PROGRESS_CALLS", 0)  # the first call stops it
    with pytest.raises(rpmdb.RpmDbError) as exc:
        rpmdb.installed_versions(data, [PKG])
    assert str(exc.value) == "SQLite: interrupted"


class _Recording:
    """A real connection that keeps the progress handler it is given."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real
        self.handlers = []

    def set_progress_handler(self, handler, n):
        self.handlers.append((handler, n))
        return self.real.set_progress_handler(handler, n)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_the_progress_handler_allows_exactly_the_bound_then_interrupts(tmp_path, monkeypatch):
    data = _db_bytes(tmp_path, [(PKG, "1.18.0", "1")])
    made = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):
        made.append(_Recording(real_connect(*args, **kwargs)))
        return made[-1]

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(rpmdb, "MAX_PROGRESS_CALLS", 3)
    assert rpmdb.installed_versions(data, [PKG]) == {PKG: ("1.18.0", "1")}
    assert len(made) == 1 and len(made[0].handlers) == 1
    handler, period = made[0].handlers[0]
    assert period == 10_000  # VM instructions between calls
    # non-zero interrupts the statement (sqlite.org c3ref/progress_handler.html)
    assert [bool(handler()) for _ in range(5)] == [False, False, False, True, True]


# -- where the database is opened -------------------------------------------------------------
def test_reading_in_memory_leaves_no_file_behind(tmp_path, monkeypatch):
    data = _db_bytes(tmp_path, [(PKG, "1.18.0", "1")])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    made = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        made.append(kwargs)
        return real_mkdtemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    assert rpmdb.installed_versions(data, [PKG]) == {PKG: ("1.18.0", "1")}
    assert os.listdir(cwd) == []
    # With Connection.deserialize (3.11+) no temporary directory either; before it, one.
    assert len(made) == (0 if hasattr(sqlite3.Connection, "deserialize") else 1)


class _NoDeserialize:
    """sqlite3.Connection as Python 3.9/3.10 have it: no deserialize()."""


def test_without_deserialize_a_private_read_only_copy_is_read_and_removed(tmp_path, monkeypatch):
    data = _db_bytes(tmp_path, [("bash", "5.1.8", "9.el9"), (PKG, "1.18.0", "0.1.rc.1")])
    monkeypatch.setattr(sqlite3, "Connection", _NoDeserialize)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    seen = []
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        entries = sorted(os.listdir(path))
        modes = [stat.S_IMODE(os.stat(os.path.join(path, e)).st_mode) for e in entries]
        seen.append((os.path.basename(path), entries, modes))
        # a temporary-file cleaner got there first: the read must not fail for it
        real_rmtree(path)
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert rpmdb.installed_versions(data, [PKG]) == {PKG: ("1.18.0", "0.1.rc.1")}
    assert len(seen) == 1
    name, entries, modes = seen[0]
    assert name.startswith("gna-rpmdb-")
    assert len(entries) == 1 and modes == [0o600]  # owner-only copy
    assert os.listdir(tmp_path / "tmp") == []


def test_without_deserialize_the_copy_is_opened_read_only(tmp_path, monkeypatch):
    data = _db_bytes(tmp_path, [(PKG, "1.18.0", "1")])
    monkeypatch.setattr(sqlite3, "Connection", _NoDeserialize)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert rpmdb.installed_versions(data, [PKG]) == {PKG: ("1.18.0", "1")}
    assert os.listdir(cwd) == []
