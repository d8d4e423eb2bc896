"""What a one-shot `check --bundle` no longer pays twice, and what it no longer imports: the
bundle Host's per-path memo (agent/host/seam.py), safe_load's memo (agent/safeio/yamlio.py),
and the imports deferred to the paths that use them."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.host.bundle import load_bundle
from agent.host.seam import Host
from agent.safeio import yamlio
from agent.safeio.bounded import ReadCapExceeded

REPO = Path(__file__).resolve().parents[2]
FULL_HOST = REPO / "tests" / "fixtures" / "bundles" / "full-healthy-dra"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/a.yaml").write_text("kind: nvidia.com/gpu\n")
    (root / "etc/real").mkdir()
    (root / "etc/real/os-release").write_text("ID=first\n")
    os.symlink("/etc/real/os-release", root / "etc/os-release")
    return root


def test_a_static_host_answers_each_path_as_it_first_read_it(tmp_path):
    root = _tree(tmp_path)
    host = Host(root, static=True)
    assert host.read_text("/etc/os-release") == "ID=first\n"
    assert host.listdir("/etc/cdi") == ["a.yaml"]
    # The tree changes under it: a static Host is a recording, so its answers do not.
    (root / "etc/real/os-release").write_text("ID=second\n")
    (root / "etc/cdi/b.yaml").write_text("x")
    assert host.read_text("/etc/os-release") == "ID=first\n"
    assert host.listdir("/etc/cdi") == ["a.yaml"]
    assert host.real_path("/etc/os-release") == root / "etc/real/os-release"
    # A Host that is not static (a bare tree, --host-root) reads the tree as it is now.
    plain = Host(root)
    assert plain.read_text("/etc/os-release") == "ID=second\n"
    assert plain.listdir("/etc/cdi") == ["a.yaml", "b.yaml"]


def test_a_listing_handed_out_cannot_change_the_memo(tmp_path):
    host = Host(_tree(tmp_path), static=True)
    names = host.listdir("/etc/cdi")
    names.append("injected.yaml")
    assert host.listdir("/etc/cdi") == ["a.yaml"]


def test_a_refused_read_is_refused_and_noted_every_time(tmp_path):
    root = _tree(tmp_path)
    (root / "etc/big").write_bytes(b"x" * 100)
    host = Host(root, static=True)
    for _ in range(2):
        with pytest.raises(ReadCapExceeded):
            host.read_bytes("/etc/big", limit=10)
    assert host.read_warnings == ["/etc/big: larger than the 10-byte read cap; not read"]
    # The same file under a cap it fits is read (the memo is per path and cap).
    assert host.read_bytes("/etc/big", limit=100) == b"x" * 100
    assert host.read_text_or_none("/etc/absent") is None
    (root / "etc/absent").write_text("late\n")  # a miss is never kept
    assert host.read_text_or_none("/etc/absent") == "late\n"


def test_a_bundle_host_is_static_and_a_live_host_never_is(tmp_path):
    loaded = load_bundle(FULL_HOST)
    try:
        assert loaded.host._memo is not None
    finally:
        loaded.close()
    assert Host("/", live=True, static=True)._memo is None


def test_safe_load_hands_out_copies_of_what_it_kept():
    text = "a: &shared {k: [1, 2]}\nb: *shared\nc: 2026-12-02\n"
    first = yamlio.safe_load(text)
    assert first["a"] is first["b"]  # PyYAML shares an aliased node
    first["a"]["k"].append(3)
    first["c"] = "changed"
    again = yamlio.safe_load(text)
    assert again["a"] == {"k": [1, 2]} and again["c"].isoformat() == "2026-12-02"
    assert again["a"] is again["b"]  # the copy keeps the sharing
    assert again is not yamlio.safe_load(text)


def test_safe_load_errors_are_raised_every_time_and_limits_are_part_of_the_key():
    for _ in range(2):
        with pytest.raises(yamlio.YamlError):
            yamlio.safe_load("a: [1, 2\n")
    deep = "a: [[[1]]]\n"
    assert yamlio.safe_load(deep) == {"a": [[[1]]]}
    with pytest.raises(yamlio.YamlError, match="nested deeper than 2 levels"):
        yamlio.safe_load(deep, max_depth=2)


def test_safe_load_memo_is_bounded_by_the_texts_it_holds():
    big = "k: " + "x" * (yamlio.MEMO_TEXT_MAX + 1) + "\n"
    assert yamlio.safe_load(big) == {"k": "x" * (yamlio.MEMO_TEXT_MAX + 1)}
    assert (big, yamlio.MAX_DEPTH, yamlio.MAX_NODES) not in yamlio._memo
    for n in range(2 * yamlio.MEMO_TOTAL_MAX // yamlio.MEMO_TEXT_MAX + 2):
        text = f"n: {n}\npad: '{'p' * (yamlio.MEMO_TEXT_MAX - 20)}'\n"
        assert yamlio.safe_load(text)["n"] == n
    assert yamlio._memo_chars <= yamlio.MEMO_TOTAL_MAX
    assert yamlio._memo_chars == sum(len(key[0]) for key in yamlio._memo)


PROBE = """
import contextlib, io, json, sys
NAMES = ("subprocess", "tarfile", "logging", "calendar", "platform", "agent.host.bundle_unpack")
by = {}
class Who:  # notes which module imports each name first; finds nothing itself
    def find_spec(self, name, path=None, target=None):
        if name in NAMES and name not in by:
            f = sys._getframe(1)
            while f is not None and f.f_globals.get("__name__", "").startswith(("importlib", "_frozen")):
                f = f.f_back
            by[name] = f.f_globals.get("__name__") if f is not None else None
        return None
sys.meta_path.insert(0, Who())
from agent.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["check", "--bundle", "tests/fixtures/bundles/full-healthy-dra"])
print(json.dumps({"code": code, "verdict": out.getvalue().splitlines()[-1], "by": by}))
"""


def test_a_bundle_check_imports_no_command_runner_extractor_or_logging():
    # Only the agent's own imports are judged: on 3.9 pydantic's uuid import brings platform
    # and subprocess, which is not this path's doing.
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=120)
    got = json.loads(out.stdout)
    assert (got["code"], got["verdict"]) == (0, "gate dra: OPEN")  # the fixture's verdict
    ours = {name: who for name, who in got["by"].items()
            if who is None or who.split(".")[0] in ("agent", "checks", "__main__")}
    assert ours == {}
