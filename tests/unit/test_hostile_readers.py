"""Hostile input through today's new readers: one test per problem found, each failing on the
tree before its fix (checks/rpmdb.py, agent/safeio/nodeadm.py, checks/site/loader.py and
outcome.py)."""
import base64
import gzip
import json
import os
import sqlite3
from pathlib import Path
from typing import List, Tuple

import pytest

from agent.hostview import CommandResult
from agent.safeio.nodeadm import (
    MAX_INFLATED,
    NODE_CONFIG_MEDIA_TYPE,
    args_words,
    node_configs,
    node_labels,
)
from checks.allocation.cluster import node_labels as cluster_node_labels
from checks.rpmdb import RpmDbError, installed_versions
from checks.site.loader import load_site_checks
from checks.site.outcome import _json_line
from tests.fixtures.families.toolkit import rpm_header

PKG = "nvidia-container-toolkit"


def _db(tmp_path: Path, schema: str, rows: int = 3) -> bytes:
    path = tmp_path / "rpmdb.sqlite"
    db = sqlite3.connect(str(path))
    db.execute(schema)
    for _ in range(rows):
        db.execute("INSERT INTO Packages (hnum) VALUES (NULL)")
    db.commit()
    db.close()
    return path.read_bytes()


# sqlite.org gencol.html: a VIRTUAL generated column is computed each time it is read; rpm's
# own schema (lib/backend/sqlite.c) has none.
@pytest.mark.parametrize("schema", [
    "CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT, "
    "blob BLOB GENERATED ALWAYS AS (zeroblob(200000000)) VIRTUAL)",
    "CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT, "
    "blob BLOB AS (zeroblob(hnum * 100000000)))",
    # A virtual table is type 'table' in sqlite_master too; its module runs on every read.
    "CREATE VIRTUAL TABLE Packages USING fts5(blob, hnum)",
])
def test_rpmdb_with_a_computed_blob_column_is_refused_before_any_row(tmp_path, schema):
    # Before: each row read allocated 200 MB (20 rows: 7 s and 775 MiB peak here).
    with pytest.raises(RpmDbError, match="no stored blob column"):
        installed_versions(_db(tmp_path, schema), [PKG])


def test_rpmdb_in_rpms_own_schema_still_reads(tmp_path):
    path = tmp_path / "rpmdb.sqlite"
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT, "
               "blob BLOB NOT NULL)")
    db.execute("INSERT INTO Packages (blob) VALUES (?)",
               (rpm_header([(1000, PKG), (1001, "1.18.0"), (1002, "1")]),))
    db.commit()
    db.close()
    assert installed_versions(path.read_bytes(), [PKG]) == {PKG: ("1.18.0", "1")}


def test_rpmdb_whose_schema_text_is_not_utf8_is_refused(tmp_path):
    # Found by tests/fuzz/test_fuzz_todays_readers.py (one byte of a database changed): a
    # schema SQLite cannot parse near a byte that is not UTF-8 makes an error message the
    # sqlite3 module cannot decode, and it raised UnicodeDecodeError, not an sqlite3.Error.
    path = tmp_path / "rpmdb.sqlite"
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT, "
               "blob BLOB NOT NULL)")
    db.commit()
    db.close()
    data = path.read_bytes().replace(b"'Packages' (hnum", b"'Packages' \xb8hnum")
    # Python 3.13 raises UnicodeDecodeError here; 3.9's sqlite3 an sqlite3.Error with no text.
    with pytest.raises(RpmDbError, match=r"^SQLite: (text in the schema is not UTF-8|\w)"):
        installed_versions(data, [PKG])


def _mime(parts: List[Tuple[str, str]]) -> str:
    out = ['MIME-Version: 1.0', 'Content-Type: multipart/mixed; boundary="B"', ""]
    for header, body in parts:
        out += ["--B", header, "", body]
    return "\n".join(out + ["--B--", ""])


def test_nodeadm_gzip_parts_are_capped_together_not_each():
    # Each part inflates to half the per-part cap (under it); 4 of them pass it together. Before:
    # no problem and every part held (a 4 MiB file of ~1 KiB parts decoded to gigabytes).
    part = base64.b64encode(gzip.compress(b"#" * (MAX_INFLATED // 2))).decode()
    text = _mime([(f"Content-Type: {NODE_CONFIG_MEDIA_TYPE}", part)] * 4)
    assert len(text) < 16 * 1024
    configs, problem = node_configs(text)
    assert configs == ()
    assert problem == (f"the {NODE_CONFIG_MEDIA_TYPE} parts decode past {MAX_INFLATED} bytes "
                       "together")


def _site_dir(tmp_path: Path, names: List[str]) -> Path:
    d = tmp_path / "site.d"
    d.mkdir()
    for name in names:
        (d / name).write_text("#!/bin/sh\nexit 0\n")
        os.chmod(d / name, 0o755)
    os.chmod(d, 0o755)
    return d


def test_site_check_name_with_a_trailing_newline_is_not_a_check(tmp_path):
    # Before: `^...$` matched "ib\n" (`$` matches before a final newline) and a check with id
    # "site-ib\n" was made.
    d = _site_dir(tmp_path, ["ib\n"])
    checks = load_site_checks(str(d))
    assert [c.id for c in checks] == ["site-checks"]
    assert all("\n" not in c.id for c in checks)


def test_site_json_line_nested_deeply_is_refused_not_raised():
    line = '{"details":' + "[" * 2040 + "]" * 2040 + "}"
    assert len(line) <= 4096
    data, problem = _json_line(line)
    assert data is None and problem is not None


class _Live:
    is_live = True

    def __init__(self) -> None:
        self.ran: List[Tuple[str, ...]] = []

    def run(self, argv, timeout=None):
        self.ran.append(tuple(argv))
        return CommandResult(tuple(argv), 0, "ok\n", "")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own the files")
@pytest.mark.parametrize("change", ["chmod", "symlink", "dir"])
def test_site_check_changed_after_load_is_not_run(tmp_path, change):
    d = _site_dir(tmp_path, ["ib.sh"])
    (check,) = load_site_checks(str(d))
    path = d / "ib.sh"
    if change == "chmod":
        os.chmod(path, 0o757)
    elif change == "symlink":
        other = tmp_path / "other.sh"
        other.write_text("#!/bin/sh\nexit 0\n")
        path.unlink()
        path.symlink_to(other)
    else:
        os.chmod(d, 0o777)
    host = _Live()
    out = check.run(host, None)  # type: ignore[arg-type]
    assert host.ran == []
    assert out.status.value == "unknown" and out.code == "site-check-refused"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own the files")
def test_site_check_unchanged_still_runs(tmp_path):
    d = _site_dir(tmp_path, ["ib.sh"])
    (check,) = load_site_checks(str(d))
    host = _Live()
    out = check.run(host, None)  # type: ignore[arg-type]
    assert len(host.ran) == 1 and out.status.value == "pass"


@pytest.mark.parametrize("status", [[], {}, ["pass"]])
def test_site_json_status_of_the_wrong_type_is_refused_not_raised(status):
    # Found by the fuzz target: `[] in {...}` raised TypeError (unhashable type: 'list').
    data, problem = _json_line(json.dumps({"status": status}))
    assert data is None and problem is not None and "is not pass, warn or fail" in problem


@pytest.mark.parametrize("node, labels", [
    ({"metadata": True}, {}), ({"metadata": ["x"]}, {}),
    ({"metadata": {"labels": {"a": "b"}}}, {"a": "b"}),
])
def test_node_labels_of_a_node_with_metadata_of_the_wrong_type(node, labels):
    # Found by the fuzz target through allocation-owner (a bundle's `node` fact is any JSON):
    # `True.get` raised AttributeError.
    assert cluster_node_labels(node) == labels


def test_a_megabyte_of_kubelet_args_in_one_quoted_value_is_split():
    # Before: shlex grew the one quoted token a character at a time (quadratic); 1.1 MB took
    # 38 s here and the 4 MiB read cap ~10 minutes (registration-labels' 5 s deadline passed
    # first). The words are the same as shlex's (tests/fuzz/test_fuzz_todays_readers.py).
    key = "workload.example.com/gpu-allocation"
    flags = " ".join(f"--node-labels={key}=v{i}" for i in range(20_000))
    pairs = node_labels(args_words(f'NODEADM_KUBELET_ARGS="{flags}"\n'))
    assert len(pairs) == 20_000 and pairs[0] == (key, "v0") and pairs[-1] == (key, "v19999")


def test_a_site_check_file_name_with_a_newline_is_shown_escaped(tmp_path):
    d = _site_dir(tmp_path, ["ib\n", "ok-name"])
    checks = load_site_checks(str(d))
    (dir_check,) = [c for c in checks if c.id == "site-checks"]
    out = dir_check.run(None, None)  # type: ignore[arg-type]  # a refusal reads no host
    assert "\n" not in out.summary
    assert "'ib\\n' (not lowercase kebab-case)" in out.summary
