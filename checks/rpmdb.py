"""rpm's package database: which version of a package is installed, read without rpm.

RHEL 9, Amazon Linux 2023 and Fedora keep it in SQLite, /var/lib/rpm/rpmdb.sqlite (Fedora 36+
and RHEL 10 under /usr/lib/sysimage/rpm, with /var/lib/rpm linking there): rpm
lib/backend/sqlite.c creates the primary table as
``CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT, blob BLOB NOT NULL)``,
one row per installed package, ``blob`` the package's header as rpm lib/header.c
headerExport writes it. RHEL 8 keeps it in a BerkeleyDB file, /var/lib/rpm/Packages, which
this module does not parse (the caller says so and names `rpm -q`).

The header blob (rpm docs/manual/format_header.md, "Header structure"; lib/header.c
headerImport): an optional 8-byte magic 8e ad e8 01 00 00 00 00 (present in package files,
absent in the database), then big-endian int32 ``il`` (index entries) and ``dl`` (data bytes),
``il`` entries of four big-endian int32 (tag, type, offset, count), then ``dl`` bytes of data
that each entry's offset points into. Tags (rpm include/rpm/rpmtag.h): RPMTAG_NAME 1000,
RPMTAG_VERSION 1001, RPMTAG_RELEASE 1002; their type is RPM_STRING_TYPE 6, a NUL-terminated
string at the offset.

The file is hostile input (a bundle's): its size is capped by the caller, SQLite opens it
read-only (a ``file:...?mode=ro&immutable=1`` URI, or an in-memory copy where Python has
Connection.deserialize), the schema must name Packages a table (a view could run anything),
a progress handler bounds the work, and every header offset is checked against the blob.
"""
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, Optional, Tuple

if TYPE_CHECKING:  # sqlite3 (and libsqlite3) load only where an rpm database is read
    import sqlite3

SQLITE_PATHS = ("/var/lib/rpm/rpmdb.sqlite", "/usr/lib/sysimage/rpm/rpmdb.sqlite")
BDB_PATH = "/var/lib/rpm/Packages"  # RHEL 8 (BerkeleyDB hash), not parsed
RPMDB_CAP = 128 * 1024 * 1024  # a RHEL 9 / AL2023 server's database is tens of MiB
HEADER_MAGIC = b"\x8e\xad\xe8\x01\x00\x00\x00\x00"
TAG_NAME, TAG_VERSION, TAG_RELEASE = 1000, 1001, 1002
RPM_STRING_TYPE = 6
# rpm lib/header.c hdrchkTags / hdrchkData: more than 0xffff entries or 256 MiB of data is
# not a header.
MAX_INDEX = 0xFFFF
MAX_DATA = 0x0FFFFFFF
MAX_ROWS = 100_000  # a distribution installs a few thousand packages
MAX_STRING = 1024
PROGRESS_STEPS = 10_000  # VM instructions between progress-handler calls
MAX_PROGRESS_CALLS = 20_000  # ~2e8 instructions, then the query is interrupted
SQLITE_HEADER = b"SQLite format 3\x00"


class RpmDbError(ValueError):
    """The database is not one this module can read; the message says why."""


def header_fields(blob: bytes) -> Dict[int, str]:
    """NAME, VERSION and RELEASE of one header blob (absent tags left out). Raises
    RpmDbError on a malformed header."""
    if blob[:8] == HEADER_MAGIC:
        blob = blob[8:]
    if len(blob) < 8:
        raise RpmDbError("header shorter than its 8-byte preamble")
    il, dl = struct.unpack_from(">II", blob, 0)
    if not 0 < il <= MAX_INDEX or dl > MAX_DATA:
        raise RpmDbError(f"header counts out of range (il={il}, dl={dl})")
    data_start = 8 + 16 * il
    if data_start + dl > len(blob):
        raise RpmDbError("header index or data runs past the blob")
    found: Dict[int, str] = {}
    for i in range(il):
        tag, typ, offset, count = struct.unpack_from(">IIII", blob, 8 + 16 * i)
        if tag not in (TAG_NAME, TAG_VERSION, TAG_RELEASE):
            continue
        if typ != RPM_STRING_TYPE or count != 1 or offset >= dl:
            raise RpmDbError(f"tag {tag}: not one string inside the data (type {typ})")
        start = data_start + offset
        end = blob.find(b"\x00", start, min(data_start + dl, start + MAX_STRING))
        if end < 0:
            raise RpmDbError(f"tag {tag}: string not terminated within the data")
        found.setdefault(tag, blob[start:end].decode("utf-8", errors="replace"))
    return found


def _connect(data: bytes, workdir: Optional[str]) -> "sqlite3.Connection":
    import sqlite3

    if hasattr(sqlite3.Connection, "deserialize"):  # Python 3.11+: never touches a file
        conn = sqlite3.connect(":memory:")
        conn.deserialize(data)  # type: ignore[attr-defined]
    else:
        assert workdir is not None
        path = Path(workdir) / "rpmdb.sqlite"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)
    conn.execute("PRAGMA query_only = ON")
    calls = [0]

    def _progress() -> int:
        calls[0] += 1
        return 1 if calls[0] > MAX_PROGRESS_CALLS else 0  # non-zero interrupts the query

    conn.set_progress_handler(_progress, PROGRESS_STEPS)
    return conn


def _rows(conn: "sqlite3.Connection") -> Iterator[bytes]:
    kind = conn.execute(
        "SELECT type FROM sqlite_master WHERE name = 'Packages'").fetchone()
    if not kind or kind[0] != "table":
        raise RpmDbError("no Packages table (not rpm's SQLite database)")
    # rpm's table is two stored columns (module docstring). A generated column (sqlite.org
    # gencol.html) runs an expression on every row read: zeroblob(2e8) allocates 200 MB a row
    # in one VM step, which the progress handler cannot stop (20 rows: 7 s, 775 MiB peak).
    # table_xinfo rows are (cid, name, type, notnull, dflt_value, pk, hidden); hidden 2 or 3
    # is a generated column, 1 a virtual table's hidden column.
    columns = conn.execute("PRAGMA table_xinfo('Packages')").fetchall()
    if not any(c[1] == "blob" for c in columns) or any(c[6] != 0 for c in columns):
        raise RpmDbError("Packages is not rpm's table (no stored blob column)")
    cur = conn.execute("SELECT blob FROM Packages LIMIT ?", (MAX_ROWS,))
    for (blob,) in cur:
        if isinstance(blob, bytes):
            yield blob


def installed_versions(data: bytes, packages: Iterable[str]) -> Dict[str, Tuple[str, str]]:
    """{name: (VERSION, RELEASE)} of each of ``packages`` recorded in the database ``data``
    (the bytes of an rpmdb.sqlite). Raises RpmDbError when it cannot be read."""
    if not data.startswith(SQLITE_HEADER):
        raise RpmDbError("not an SQLite 3 database (no 'SQLite format 3' header)")
    if data[18:20] == b"\x02\x02":
        # A WAL-mode database (rpm's default: lib/backend/sqlite.c sets journal_mode WAL) read
        # from a private copy: marking the copy rollback-journal (file format bytes 18-19, 1 =
        # legacy; sqlite.org "Database File Format" 1.3) lets SQLite read it without the -shm
        # and -wal files. Transactions still only in -wal are not seen: rpm checkpoints them
        # into the file when its last connection closes.
        data = data[:18] + b"\x01\x01" + data[20:]
    import shutil  # here, with sqlite3: only a host with an rpm database reads one
    import sqlite3
    import tempfile

    wanted = frozenset(packages)
    workdir = None if hasattr(sqlite3.Connection, "deserialize") else tempfile.mkdtemp(
        prefix="gna-rpmdb-")
    found: Dict[str, Tuple[str, str]] = {}
    try:
        conn = _connect(data, workdir)
        try:
            for blob in _rows(conn):
                try:
                    fields = header_fields(blob)
                except (RpmDbError, struct.error):
                    continue  # one damaged header does not hide the others
                name = fields.get(TAG_NAME)
                if name in wanted and name not in found and TAG_VERSION in fields:
                    found[name] = (fields[TAG_VERSION], fields.get(TAG_RELEASE, ""))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise RpmDbError(f"SQLite: {str(exc) or type(exc).__name__}") from None
    except UnicodeDecodeError:  # the sqlite3 module decodes TEXT values (the schema) as UTF-8
        raise RpmDbError("SQLite: text in the schema is not UTF-8") from None
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    return found


def rpm_version(found: Dict[str, Tuple[str, str]], package: str) -> Optional[str]:
    """"VERSION-RELEASE" as `rpm -q --qf '%{VERSION}-%{RELEASE}'` prints it."""
    pair = found.get(package)
    if pair is None:
        return None
    version, release = pair
    return f"{version}-{release}" if release else version
