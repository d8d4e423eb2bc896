"""The mutation ledger: each target module's last complete mutmut score, kept in the repository.

A whole-target run is ~11,700 mutants (hours on the two cores CI has), so no single run scores
everything; the score is assembled per module. `scripts/mutation-tier --record MODULE...`
writes one JSON file per module whose mutants all ran (none left "not run" by the budget) under
tests/mutation/ledger/, with the sha256 of the module source it was measured on and every
survivor with its diff. `scripts/mutation-tier --summary` reads them back: an entry whose
module source has changed since is *stale* and is not counted, a target without an entry is
*unscored*, so the printed kill rate is only ever over scores that still describe the code.

Equivalent mutants are not survivors: they are listed with their reason in equivalent.txt and
counted apart, as the tier does.
"""
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

LEDGER_DIR = Path(__file__).resolve().parent / "ledger"
FORMAT = 1


def entry_path(module: str, ledger_dir: Path = LEDGER_DIR) -> Path:
    # "checks/gpu/common.py" -> ledger/checks__gpu__common.json (flat: one file a module)
    return ledger_dir / (module[:-3].replace("/", "__") + ".json")


def source_sha(repo: Path, module: str) -> str:
    return hashlib.sha256((repo / module).read_bytes()).hexdigest()


def make_entry(module: str, sha: str, counts: Dict[str, int], survivors: Sequence[Tuple[str, str]],
               tests: str, commit: str, date: str) -> Dict[str, Any]:
    """``counts``: killed, survived, equivalent, import-time; ``survivors``: (name, diff)."""
    if counts.get("survived", 0) != len(survivors):
        raise ValueError(f"{module}: {counts.get('survived')} survived but "
                         f"{len(survivors)} survivors listed")
    return {"format": FORMAT, "module": module, "sha256": sha, "commit": commit, "date": date,
            "tests": tests,
            "killed": counts.get("killed", 0), "survived": counts.get("survived", 0),
            "equivalent": counts.get("equivalent", 0),
            "import_time": counts.get("import-time", 0),
            "survivors": [{"name": n, "diff": d} for n, d in survivors]}


def write_entry(entry: Dict[str, Any], ledger_dir: Path = LEDGER_DIR) -> Path:
    path = entry_path(entry["module"], ledger_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def read_entry(module: str, ledger_dir: Path = LEDGER_DIR) -> Optional[Dict[str, Any]]:
    path = entry_path(module, ledger_dir)
    if not path.exists():
        return None
    entry = json.loads(path.read_text())
    if entry.get("format") != FORMAT or entry.get("module") != module:
        raise ValueError(f"{path}: not a format-{FORMAT} ledger entry for {module}")
    return dict(entry)


def reclassify(entry: Dict[str, Any], equivalent: Iterable[str]) -> Dict[str, Any]:
    """The entry with its survivors that equivalent.txt now lists (with a reason, after the
    run) counted as equivalent: the list is where equivalence is decided, whenever."""
    names = set(equivalent)
    moved = [s for s in entry["survivors"] if s["name"] in names]
    if not moved:
        return entry
    return {**entry, "survived": entry["survived"] - len(moved),
            "equivalent": entry["equivalent"] + len(moved),
            "survivors": [s for s in entry["survivors"] if s["name"] not in names]}


def summarize(repo: Path, modules: Sequence[str], ledger_dir: Path = LEDGER_DIR,
              equivalent: Iterable[str] = ()) -> Dict[str, Any]:
    """Per module: "fresh" (scored on today's source), "stale" or "unscored"; totals over the
    fresh entries only. A survivor named in ``equivalent`` counts as equivalent."""
    rows: List[Dict[str, Any]] = []
    totals = {"killed": 0, "survived": 0, "equivalent": 0, "import_time": 0}
    equivalent = set(equivalent)
    for module in modules:
        entry = read_entry(module, ledger_dir)
        if entry is None:
            rows.append({"module": module, "state": "unscored"})
            continue
        entry = reclassify(entry, equivalent)
        state = "fresh" if entry["sha256"] == source_sha(repo, module) else "stale"
        rows.append({"module": module, "state": state, "entry": entry})
        if state == "fresh":
            for key in totals:
                totals[key] += int(entry[key])
    scored = totals["killed"] + totals["survived"]
    return {"rows": rows, "totals": totals,
            "rate": (100.0 * totals["killed"] / scored) if scored else None,
            "fresh": sum(r["state"] == "fresh" for r in rows),
            "stale": sum(r["state"] == "stale" for r in rows),
            "unscored": sum(r["state"] == "unscored" for r in rows)}


def print_summary(summary: Dict[str, Any], show_survivors: bool = True) -> None:
    print(f"{'module':48} {'state':9} {'killed':>7} {'survived':>9} {'equiv':>6} {'rate':>6}")
    for row in summary["rows"]:
        e = row.get("entry")
        if e is None:
            print(f"{row['module']:48} {row['state']:9}")
            continue
        ran = e["killed"] + e["survived"]
        rate = f"{100.0 * e['killed'] / ran:5.1f}%" if ran else "     -"
        print(f"{row['module']:48} {row['state']:9} {e['killed']:7} {e['survived']:9} "
              f"{e['equivalent']:6} {rate:>6}")
    t = summary["totals"]
    rate = "not measured" if summary["rate"] is None else f"{summary['rate']:.1f}%"
    print(f"ledger: {summary['fresh']} fresh, {summary['stale']} stale, {summary['unscored']} "
          f"unscored of {len(summary['rows'])} targets; over the fresh ones killed {t['killed']}, "
          f"survived {t['survived']}, equivalent {t['equivalent']}, import-time "
          f"{t['import_time']}: kill rate {rate}")
    if show_survivors:
        for row in summary["rows"]:
            if row["state"] == "fresh":
                for s in row["entry"]["survivors"]:
                    print(f"  survivor {s['name']}: {s['diff']}")
