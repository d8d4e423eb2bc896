"""The mutation ledger counts only scores measured on today's source (tests/mutation/ledger.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mutation"))
import ledger  # noqa: E402


def _entry(repo: Path, module: str, killed: int, survivors, equivalent: int = 0):
    counts = {"killed": killed, "survived": len(survivors), "equivalent": equivalent,
              "import-time": 0}
    return ledger.make_entry(module, ledger.source_sha(repo, module), counts, survivors,
                             "unit tier without the walks", "abc1234", "2026-12-02")


def test_fresh_stale_and_unscored_modules_are_told_apart(tmp_path: Path) -> None:
    repo, book = tmp_path / "repo", tmp_path / "ledger"
    (repo / "checks").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (repo / "checks" / f"{name}.py").write_text(f"X = {name!r}\n")
    ledger.write_entry(_entry(repo, "checks/a.py", 18, [("checks.a.x_f__mutmut_1", "- a | + b")],
                              equivalent=3), book)
    ledger.write_entry(_entry(repo, "checks/b.py", 5, []), book)
    (repo / "checks" / "b.py").write_text("X = 'changed since it was scored'\n")

    s = ledger.summarize(repo, ["checks/a.py", "checks/b.py", "checks/c.py"], book)

    assert [r["state"] for r in s["rows"]] == ["fresh", "stale", "unscored"]
    # Only a's score counts: 18 killed of 19 run (b's 5 killed describe code that is gone).
    assert s["totals"] == {"killed": 18, "survived": 1, "equivalent": 3, "import_time": 0}
    assert s["rate"] == pytest.approx(100.0 * 18 / 19)
    assert (s["fresh"], s["stale"], s["unscored"]) == (1, 1, 1)


def test_nothing_fresh_is_not_a_rate(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("")
    assert ledger.summarize(tmp_path, ["m.py"], tmp_path / "none")["rate"] is None


def test_an_entry_must_list_every_survivor(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("")
    with pytest.raises(ValueError, match="2 survived but 1 survivors listed"):
        ledger.make_entry("m.py", "0" * 64, {"killed": 1, "survived": 2}, [("x", "")], "", "", "")


def test_an_entry_for_another_module_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("")
    entry = _entry(tmp_path, "m.py", 1, [])
    path = ledger.write_entry(entry, tmp_path / "book")
    path.rename(ledger.entry_path("n.py", tmp_path / "book"))
    (tmp_path / "n.py").write_text("")
    with pytest.raises(ValueError, match="not a format-1 ledger entry for n.py"):
        ledger.summarize(tmp_path, ["n.py"], tmp_path / "book")


def test_a_survivor_listed_as_equivalent_after_the_run_counts_as_equivalent(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("")
    book = tmp_path / "book"
    ledger.write_entry(_entry(tmp_path, "m.py", 8, [("m.x_f__mutmut_1", ""),
                                                    ("m.x_f__mutmut_2", "")]), book)
    s = ledger.summarize(tmp_path, ["m.py"], book, equivalent=["m.x_f__mutmut_2", "other"])
    assert s["totals"] == {"killed": 8, "survived": 1, "equivalent": 1, "import_time": 0}
    assert [x["name"] for x in s["rows"][0]["entry"]["survivors"]] == ["m.x_f__mutmut_1"]
