"""The mutation tier (scripts/mutation-tier runs this with the 3.13 venv; docs/testing.md).

Two parts, both on a throwaway copy of the working tree (the checkout is never modified):

1. Named mutations: the bugs a mutation pass once slipped past the suite, each applied as a
   text edit and run against the test that must catch it. Every one must fail its test.
2. mutmut 3 over the target modules (checks/, gate evaluation in agent/report.py, the Node
   reconcile in agent/outputs/node/reconcile.py and condition.py, redaction in agent/host/redact*.py): on a change, only the
   targets the change touches (``--base REV``: ``git diff --name-only REV`` intersected with
   the targets); ``--all`` for the nightly-sized run; or modules named on the command line.
   Prints killed/survived per module and the kill rate over non-equivalent mutants
   (tests/mutation/equivalent.txt lists equivalent ones with the reason).

    scripts/mutation-tier --base origin/main --budget-s 600 --jobs 2
    scripts/mutation-tier --all --budget-s 3600
    scripts/mutation-tier checks/driver/driver_branch.py agent/report.py
    scripts/mutation-tier --named-only
    scripts/mutation-tier --record --tests tests/checks/test_gpu_common.py checks/gpu/common.py
    scripts/mutation-tier --summary

``--record`` keeps each fully run module's score in the ledger (tests/mutation/ledger.py);
``--summary`` prints the ledger: the kill rate over every target scored on today's source.

Exit status: 1 when a named mutation survives, or when the kill rate is under
``--min-kill-rate`` (default 0: report only); 0 otherwise. Mutants not reached within the
budget are reported as "not run", never counted as killed.
"""
import argparse
import ast
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ledger  # noqa: E402  (tests/mutation/ledger.py, beside this file)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# agent/gpu_health.py is gate evaluation too: which GPUs keep the gate open under min_healthy_gpus.
TARGET_GLOBS = ("checks/*.py", "agent/report.py", "agent/gpu_health.py", "agent/outputs/node/reconcile.py",
                "agent/outputs/node/condition.py", "agent/host/redact*.py")
NOT_TARGETS = ("checks/__init__.py",)
PYTEST_ARGS = ["-p", "no:cacheprovider", "-q", "-m", "not integration", "-x"]
# Not run under mutmut: the bundle-isolation test's audit hook sees mutmut's own trampoline
# reading setup.cfg/pyproject.toml inside the check and reports it as a leak.
# test_bundle_isolation: its audit hook sees mutmut's trampoline read setup.cfg and calls it a
# leak. test_add_a_check: it copies the tracked tree (git ls-files) and runs pytest there, which
# judges the recipe, not a mutant, and the tier's copy is not a git checkout.
# test_import_arrows, test_runtime_dependencies: they read the source files, which mutmut
# rewrites with its trampolines (longer, and importing mutmut).
# The operator bundles' collect round trip asserts that collect keeps the library's symlink;
# mutmut's copy of the tree follows the fixtures' symlinks (regular files there), so the
# premise is gone in it: a collect test, not a mutant judge of the checks.
MUTMUT_IGNORE = ["--ignore=tests/checks/test_bundle_isolation.py",
                 "--ignore=tests/unit/test_add_a_check.py",
                 "--ignore=tests/unit/test_import_arrows.py",
                 "--ignore=tests/unit/test_runtime_dependencies.py",
                 "--deselect=tests/checks/test_operator_state.py::"
                 "test_a_collected_bundle_judges_as_the_host_did",
                 # The daemon loop's tests (threads, a child process, the upgrade flag file)
                 # wait on timing; under mutmut's trampolines on loaded cores one failed in the
                 # mapping run, which needs every test green, so nothing was scored. They reach
                 # no target the unit tests of report/reconcile do not judge directly.
                 "--ignore=tests/unit/test_daemon_cycle.py",
                 "--ignore=tests/unit/test_daemon_upgrade.py",
                 "--ignore=tests/unit/test_daemon_upgrade_run.py"]
# The tests mutants are judged by: the unit and fixture tiers plus the policy, constants and
# safety-guard tables. Not the fuzz tier (hypothesis draws differ per run, so a kill would not
# be reproducible) nor integration (real daemons; minutes per mutant).
# The walks: tests that evaluate every registered check on every fixture bundle (256) or run
# the whole CLI per bundle. mutmut maps a test to every function it reaches, so each of these
# ~600 parametrized cases is mapped to every check function and rerun for every mutant in it
# (5.5 s a mutant, measured). What they assert is registry-wide (each path's gate equals the
# path alone, every skip names its kind, the wording rules, each code has a bundle, whole
# fixture hosts): a mutant in one check changes both sides of a self-consistency walk alike.
# The per-check tests in tests/checks (one Outcome per branch, expected values from the cited
# sources) judge a check's mutants; the walks keep running in the unit tier. `--with-walks`
# puts them back (a full-strength, ~7 h run).
MUTMUT_WALKS = ["--ignore=tests/checks/test_per_path_truth.py",
                "--ignore=tests/checks/test_honest_skips.py",
                "--ignore=tests/checks/test_bundle_wording.py",
                "--ignore=tests/checks/test_contract.py",
                "--ignore=tests/checks/test_full_hosts.py",
                "--ignore=tests/checks/test_this_machine.py",
                "--ignore=tests/unit/test_check_docs_drift.py",
                # the CLI over all 256 bundles in a module fixture (23 s of setup, measured,
                # paid by every mutant whose function any bundle reaches)
                "--deselect=tests/unit/test_kube_condition.py::test_every_bundle_is_covered",
                "--deselect=tests/unit/test_kube_condition.py::test_condition_message_and_reason"]
WITH_WALKS = False  # --with-walks
MUTMUT_TESTS = ["tests/unit", "tests/checks", "tests/test_policy_tables.py",
                "tests/test_xid_policy_table.py", "tests/test_nvml_constants.py",
                "tests/test_safety_guards.py", "tests/test_xid_eval.py",
                "tests/test_reconcile_messages.py"]

# (name, file, old text, new text, tests that must fail). The texts are exact; a mutation
# whose old text is gone (the code moved) is reported as "cannot apply", which fails too, so
# this table is kept in step with the code.
NAMED: Tuple[Tuple[str, str, str, str, Tuple[str, ...]], ...] = (
    ("operator-clusterpolicy driver minimum 535 -> 580", "checks/policy_v1.yaml",
     "    operator-clusterpolicy: 535\n", "    operator-clusterpolicy: 580\n",
     ("tests/test_policy_tables.py",)),
    ("device-plugin driver minimum 535 -> 550", "checks/policy_v1.yaml",
     "    device-plugin: 535\n", "    device-plugin: 550\n",
     ("tests/test_policy_tables.py",)),
    ("XID 160 reboot -> restart-app", "checks/xid_policy_v1.yaml",
     "  160:\n    class: reboot\n", "  160:\n    class: restart-app\n",
     ("tests/test_xid_policy_table.py",)),
    ("sticky XID 119 reset-gpu -> restart-app", "checks/xid_policy_v1.yaml",
     "  119:\n    class: reset-gpu\n", "  119:\n    class: restart-app\n",
     ("tests/test_xid_policy_table.py",)),
    ("mixed XIDs advise a reset where a reboot is needed", "checks/xid/gpu_xid.py",
     'reboot = any(v["class"] == "reboot" for v in fatal.values())',
     'reboot = all(v["class"] == "reboot" for v in fatal.values())',
     ("tests/test_xid_policy_table.py",)),
    ("allocation-label guard removed (renamed label)", "agent/outputs/node/reconcile.py",
     "if old == old_alloc and (in_use is None or in_use > 0):",
     "if False:",
     ("tests/test_safety_guards.py",)),
    ("allocation-label guard removed (current label)", "agent/outputs/node/reconcile.py",
     "    elif in_use is None or in_use > 0:\n        want[akey] = current\n",
     "    elif False:\n        want[akey] = current\n",
     ("tests/test_safety_guards.py",)),
    ("non-executable CDI hook passes", "checks/containerd/cdi_spec_current.py",
     "[p for p in refs.hooks if not host.is_executable(p)]",
     "[p for p in refs.hooks if not host.exists(p)]",
     ("tests/test_safety_guards.py",)),
    ("clock-event bits swapped (HW thermal <-> sync boost)", "agent/nvml/readers.py",
     '    (0x10, "sync_boost"),\n    (0x20, "sw_thermal_slowdown"),\n    (0x40, "hw_thermal_slowdown"),\n',
     '    (0x40, "sync_boost"),\n    (0x20, "sw_thermal_slowdown"),\n    (0x10, "hw_thermal_slowdown"),\n',
     ("tests/test_nvml_constants.py",)),
    ("containerd 1.x import merges plugin tables key by key", "checks/containerd/config.py",
     "                section[name] = copy.deepcopy(sub)\n",
     "                section[name] = copy.deepcopy(sub) if name not in section else "
     "{**section[name], **copy.deepcopy(sub)}\n",
     ("tests/test_safety_guards.py",)),
    ("collect records command output unredacted", "agent/host/collect.py",
     'rec["stdout"] = redact_command_output(rec["argv"], rec["stdout"])',
     'rec["stdout"] = rec["stdout"]',
     ("tests/unit/test_redaction.py",)),
    ("unreadable boot id drops sticky faults", "checks/xid/eval.py",
     'if sticky.get("boot_id") is not None and boot_id is not None and sticky["boot_id"] != boot_id:',
     'if sticky.get("boot_id") != boot_id:',
     ("tests/reliability/test_state_faults.py::"
      "test_sticky_faults_kept_when_the_boot_id_is_unreadable",)),
)


def targets() -> List[str]:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    return sorted(f for f in files if any(fnmatch.fnmatch(f, g) for g in TARGET_GLOBS)
                  and f not in NOT_TARGETS and f.endswith(".py") and (REPO / f).exists())


def changed_since(base: str) -> List[str]:
    known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", base + "^{commit}"],
                           cwd=REPO, capture_output=True, text=True)
    if known.returncode != 0:
        print(f"== mutmut: base revision {base!r} not in this clone (shallow?): no module "
              "selected; pass --all or a reachable --base")
        return []
    out = subprocess.run(["git", "diff", "--name-only", base], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    return sorted(set(out) & set(targets()))


REV: Optional[str] = None  # --rev: copy this committed revision instead of the working tree


def copy_tree(dest: Path) -> None:
    if REV is not None:
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", "--format=tar", REV], cwd=REPO,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    for rel in files:
        src = REPO / rel
        if not src.is_file() or src.is_symlink() and not src.exists():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def _python() -> str:
    return sys.executable


def run_named(work: Path) -> int:
    """Apply each named mutation to a fresh copy; its tests must fail. Returns survivors."""
    survivors = 0
    print("== named mutations (each must be caught)")
    for name, rel, old, new, tests in NAMED:
        copy = work / "named"
        if copy.exists():
            shutil.rmtree(copy)
        copy_tree(copy)
        path = copy / rel
        text = path.read_text()
        if text.count(old) != 1:
            print(f"  CANNOT APPLY  {name}: {rel} no longer has the text (update tests/mutation/tier.py)")
            survivors += 1
            continue
        path.write_text(text.replace(old, new))
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([_python(), "-m", "pytest", *PYTEST_ARGS, *tests], cwd=copy,
                              capture_output=True, text=True, env=env, timeout=900)
        failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
        if proc.returncode == 1 and failed:
            print(f"  killed        {name}  by {failed[0]}")
        else:
            print(f"  SURVIVED      {name}  (pytest exit {proc.returncode})")
            survivors += 1
    return survivors


def baseline_failures(work: Path) -> List[str]:
    """Tests that fail with no mutation at all: mutmut needs a green run to map tests to
    functions, so these are deselected (and listed; the unit tier fails on them anyway)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    args = [a for a in PYTEST_ARGS if a != "-x"] + _ignores() + ["-rf"] + MUTMUT_TESTS
    started = time.monotonic()
    proc = subprocess.run([_python(), "-m", "pytest", *args], cwd=work, capture_output=True,
                          text=True, env=env, timeout=1800)
    failing = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+?)(?: - .*)?$", proc.stdout, re.M)))
    tail = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"== baseline (no mutation): {tail[0]} in {time.monotonic() - started:.0f}s")
    for node in failing:
        print(f"  failing without a mutation, deselected: {node}")
    return failing


def _ignores() -> List[str]:
    return MUTMUT_IGNORE + ([] if WITH_WALKS else MUTMUT_WALKS)


def write_mutmut_config(work: Path, modules: Sequence[str], deselect: Sequence[str] = ()) -> None:
    sources = sorted({m.split("/")[0] for m in modules})
    tops = sorted({p.name for p in work.iterdir()} - set(sources) - {"tests", "setup.cfg",
                                                                       "pyproject.toml"})
    lines = ["[mutmut]", "source_paths="] + [f"    {s}" for s in sources]
    lines += ["only_mutate="] + [f"    {m}" for m in modules]
    lines += ["also_copy="] + [f"    {t}" for t in tops if not t.startswith(".")]
    lines += ["pytest_add_cli_args="] + [f"    {a}" for a in PYTEST_ARGS + _ignores()
                                          if a != "-x"]
    lines += [f"    --deselect={d}" for d in deselect]
    lines += ["pytest_add_cli_args_test_selection="] + [f"    {t}" for t in MUTMUT_TESTS]
    lines += ["use_git_change_detection=false", "timeout_multiplier=5.0"]
    (work / "setup.cfg").write_text("\n".join(lines) + "\n")


def _mutmut() -> List[str]:
    exe = Path(_python()).with_name("mutmut")
    return [str(exe)] if exe.exists() else [_python(), "-m", "mutmut"]


def parse_results(text: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([\w.]+__mutmut_\d+):\s*(.+?)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def equivalents() -> Dict[str, str]:
    path = HERE / "equivalent.txt"
    out: Dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, why = line.partition(" ")
                out[name] = why.strip()
    return out


def _calls_at_import(node: ast.AST, out: set) -> None:
    """Names called while the module is imported: module-level statements, class bodies,
    decorators and default values; not function bodies or lambdas (they run later)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for sub in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if sub is not None:
                _calls_at_import(sub, out)
        return
    if isinstance(node, ast.Lambda):
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        out.add(node.func.id)
    for child in ast.iter_child_nodes(node):
        _calls_at_import(child, out)


def import_time_functions(tree: Path, module: str) -> set:
    """Top-level functions of ``module`` that its own import calls. mutmut 3 forks each mutant
    run from a process that has already imported the module, and a trampoline picks the mutant
    only when called, so a mutant in such a function is never active: it survives whatever the
    tests assert. Reported apart ("import-time"), never counted as killed or as survived."""
    out: set = set()
    try:
        _calls_at_import(ast.parse((tree / module).read_text()), out)
    except (OSError, SyntaxError):
        return set()
    return out


def function_of(mutant: str) -> str:
    # "checks.allocation.policy.x__v1_allowed__mutmut_1" -> "_v1_allowed" (methods: "")
    tail = mutant.partition("__mutmut_")[0].rpartition(".")[2]
    return tail[2:] if tail.startswith("x_") and "\u01c1" not in tail else ""


def module_of(mutant: str) -> str:
    # "checks.driver.driver_branch.x__driver_branch__mutmut_3" -> "checks/driver/driver_branch.py"
    head = mutant.split(".x_")[0].split(".x\u01c1")[0]
    return head.replace(".", "/") + ".py"


def _mutmut_run(work: Path, jobs: int, budget_s: float, env: Dict[str, str]) -> Tuple[str, bool, int]:
    """One `mutmut run` within ``budget_s``: (its output, whether the budget stopped it, rc)."""
    proc = subprocess.Popen([*_mutmut(), "run", "--max-children", str(jobs)], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=budget_s)
        return log or "", False, proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            log, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
        return log or "", True, proc.returncode


BASELINE = False  # --baseline: a separate no-mutation run first (the old way; one more full run)


def run_mutmut(work: Path, modules: Sequence[str], budget_s: float, jobs: int,
               show: int) -> Tuple[int, int, int]:
    deselect: List[str] = baseline_failures(work) if BASELINE else []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    print(f"== mutmut over {len(modules)} module(s), budget {budget_s:.0f}s, {jobs} job(s)")
    started = time.monotonic()
    # mutmut's first (mapping) run is itself a no-mutation run of every selected test and stops
    # at the first failure (-x). A test that fails there is deselected and mutmut rerun, at most
    # three times, instead of paying for a separate baseline run of the whole selection first.
    for _attempt in range(4):
        write_mutmut_config(work, modules, deselect)
        left = max(budget_s - (time.monotonic() - started), 1.0)
        log, timed_out, returncode = _mutmut_run(work, jobs, left, env)
        new: List[str] = []
        if not timed_out and returncode != 0 and ("failed to collect stats" in log
                                                  or "Failed to run clean test" in log):
            new = [n for n in re.findall(r"^FAILED (\S+?)(?: - .*)?$", log, re.M)
                   if n not in deselect]
        if not new:
            break
        for node in new:
            print(f"  failing without a mutation, deselected: {node}")
        deselect += new
    took = time.monotonic() - started
    (work / "mutmut-run.log").write_text(log or "")
    res = subprocess.run([*_mutmut(), "results", "--all", "true"], cwd=work, env=env,
                         capture_output=True, text=True)
    results = parse_results(res.stdout)
    if not results:
        print(log[-3000:] if log else "(no mutmut output)")
        print(res.stdout[-2000:], res.stderr[-2000:])
        print("mutmut produced no results")
        LAST_RUN.clear()  # no mutant in any module, when mutmut ran to its end
        # ("could not find any test case": mutants exist, no selected test reaches them)
        LAST_RUN.update(per={}, survivors=[], complete=not timed_out and returncode == 0
                        and "could not find any test case" not in (log or ""))
        return 0, 0, 1
    if not timed_out and returncode != 0:
        # mutmut stopped before its budget without a clean run (its stats run needs every
        # selected test green): nothing was scored, so say so and fail, never "100 %".
        print(log[-3000:] if log else "(no mutmut output)")
        print(f"mutmut exited {returncode} before its budget; no mutant was scored")
        return 0, 0, -1
    eq = equivalents()
    per: Dict[str, Dict[str, int]] = {}
    survivors: List[str] = []
    at_import: Dict[str, int] = {}
    killed = survived = not_run = equivalent = imported = 0
    import_fns = {m: import_time_functions(work, m) for m in modules}
    cols = ("killed", "survived", "equivalent", "import-time", "not run")
    for name, status in sorted(results.items()):
        mod = module_of(name)
        row = per.setdefault(mod, {c: 0 for c in cols})
        if name in eq and status in ("survived", "no tests"):
            row["equivalent"] += 1
            equivalent += 1
        elif status in ("killed", "timeout", "segfault", "caught by type check"):
            row["killed"] += 1
            killed += 1
        elif (status in ("survived", "no tests")
              and function_of(name) in import_fns.get(mod, set())):
            row["import-time"] += 1
            imported += 1
            key = f"{mod}:{function_of(name)}"
            at_import[key] = at_import.get(key, 0) + 1
        elif status in ("survived", "no tests", "suspicious"):
            row["survived"] += 1
            survived += 1
            survivors.append(name)
        else:  # "not checked", "skipped", interrupted
            row["not run"] += 1
            not_run += 1
    print(f"{'module':48} {'killed':>7} {'survived':>9} {'equiv':>6} {'import':>7} "
          f"{'not run':>8} {'rate':>6}")
    for mod, row in sorted(per.items()):
        ran = row["killed"] + row["survived"]
        rate = f"{100.0 * row['killed'] / ran:5.1f}%" if ran else "     -"
        print(f"{mod:48} {row['killed']:7} {row['survived']:9} {row['equivalent']:6} "
              f"{row['import-time']:7} {row['not run']:8} {rate:>6}")
    scored = killed + survived
    print(f"mutants: {len(results)}; killed {killed}, survived {survived}, equivalent "
          f"{equivalent}, import-time {imported}, not run {not_run}"
          f"{' (budget reached)' if timed_out else ''}; {took:.0f}s"
          + (f" ({took / (scored + equivalent + imported):.2f}s a mutant, mapping run included)"
             if scored + equivalent + imported else ""))
    if at_import:
        print("unreachable by mutmut (called at import time, before the fork; not scored):")
        for key, n in sorted(at_import.items()):
            print(f"  {key} ({n} mutants)")
    if scored:
        print(f"kill rate (non-equivalent, run): {100.0 * killed / scored:.1f}%")
    else:
        # mutmut first runs every selected test once under its trampolines to map tests to
        # mutants; when that alone takes the budget nothing is scored, and a rate over nothing
        # would read as 100 %. Say so instead (the named mutations above still gate).
        print("kill rate (non-equivalent, run): not measured: no mutant was scored within the "
              f"budget ({took:.0f}s; mutmut's test-mapping run over the selected tests used it)")
    if survivors:
        print(f"survivors (first {show}; `cd {work} && mutmut show NAME` for the diff):")
        for name in survivors[:show]:
            # "no tests": no selected test reaches the function at all (a gap, not a verdict)
            print(f"  {name}" + ("  (no tests)" if results[name] == "no tests" else ""))
    (work / "survivors.txt").write_text("\n".join(survivors) + "\n")
    LAST_RUN.clear()
    LAST_RUN.update(per=per, survivors=survivors, statuses=results, complete=not timed_out)
    return killed, survived, not_run


LAST_RUN: Dict[str, Any] = {}  # run_mutmut's per-module rows and survivors, for --record


def _diff(work: Path, name: str) -> str:
    """The changed lines of one mutant (`mutmut show`), joined, at most 400 characters."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    try:
        out = subprocess.run([*_mutmut(), "show", name], cwd=work, env=env, capture_output=True,
                             text=True, timeout=300).stdout
    except subprocess.TimeoutExpired:  # a loaded machine: the score stands without the diff
        return f"(diff not shown: `mutmut show {name}` timed out)"
    lines = [ln.strip() for ln in out.splitlines()
             if ln[:1] in "-+" and not ln.startswith(("---", "+++"))]
    text = " | ".join(" ".join(ln.split()) for ln in lines)
    return text if len(text) <= 400 else text[:397] + "..."


def _has_functions(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
               for n in ast.walk(tree))


def record(work: Path, modules: Sequence[str], narrowed: Optional[Sequence[str]]) -> None:
    """Write a ledger entry for every module whose mutants all ran; say which were not."""
    per = LAST_RUN.get("per") or {}
    survivors = list(LAST_RUN.get("survivors") or [])
    commit = subprocess.run(["git", "rev-parse", "--short", REV or "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    date = time.strftime("%Y-%m-%d", time.gmtime())
    note = " ".join(narrowed) if narrowed else "unit tier without the walks"
    if WITH_WALKS:
        note += ", with the walks"
    for module in modules:
        row = per.get(module)
        if row is None and (LAST_RUN.get("complete") or not _has_functions(work / module)):
            # mutmut made no mutant of it in a run that ended by itself: it mutates
            # undecorated function bodies only (a package's __init__, validators under a
            # decorator, a dict comprehension with nothing to change): a complete score
            row = {"killed": 0, "survived": 0, "equivalent": 0, "import-time": 0, "not run": 0}
        if row is None or row["not run"]:
            print(f"ledger: {module} not recorded ({'not reached' if row is None else str(row['not run']) + ' not run'})")
            continue
        names = [n for n in survivors if module_of(n) == module]
        entry = ledger.make_entry(module, ledger.source_sha(work, module), row,
                                  [(n, _diff(work, n)) for n in names], note, commit, date)
        print(f"ledger: recorded {ledger.write_entry(entry).relative_to(REPO)}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="mutation-tier", description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help="target modules (default: see --base/--all)")
    ap.add_argument("--base", help="mutate the targets changed since this git revision")
    ap.add_argument("--all", action="store_true", help="every target (nightly-sized)")
    ap.add_argument("--budget-s", type=float, default=600.0, help="time budget for mutmut")
    ap.add_argument("--jobs", type=int, default=2, help="parallel mutant runs")
    ap.add_argument("--min-kill-rate", type=float, default=0.0)
    ap.add_argument("--named-only", action="store_true", help="only the named mutations")
    ap.add_argument("--no-named", action="store_true", help="skip the named mutations")
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one)")
    ap.add_argument("--rev", help="mutate this committed revision (default: the working tree)")
    ap.add_argument("--show", type=int, default=200, help="survivors to list")
    ap.add_argument("--with-walks", action="store_true",
                    help="judge mutants by the whole-registry walks too (slow)")
    ap.add_argument("--tests", nargs="+",
                    help="judge mutants by these test paths only (default: the unit tier)")
    ap.add_argument("--record", action="store_true",
                    help="write each fully run module's score to the ledger")
    ap.add_argument("--summary", action="store_true",
                    help="print the ledger over every target and exit")
    ap.add_argument("--baseline", action="store_true",
                    help="run the selected tests once without mutmut first (one more full run)")
    args = ap.parse_args(argv)
    global REV, WITH_WALKS, BASELINE, MUTMUT_TESTS
    REV = args.rev
    WITH_WALKS = args.with_walks
    BASELINE = args.baseline
    if args.tests:
        MUTMUT_TESTS = list(args.tests)

    all_targets = targets()
    if args.summary:
        ledger.print_summary(ledger.summarize(REPO, all_targets, equivalent=equivalents()))
        return 0
    if args.modules:
        unknown = [m for m in args.modules if m not in all_targets]
        if unknown:
            print(f"mutation-tier: not a mutation target: {', '.join(unknown)} "
                  f"(targets: {', '.join(TARGET_GLOBS)})", file=sys.stderr)
            return 2
        modules = sorted(args.modules)
    elif args.all:
        modules = all_targets
    elif args.base:
        modules = changed_since(args.base)
    else:
        modules = []
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="mutation-tier-"))
    work.mkdir(parents=True, exist_ok=True)
    status = 0
    try:
        if not args.no_named:
            named_survivors = run_named(work)
            print(f"named mutations: {len(NAMED) - named_survivors} of {len(NAMED)} caught")
            if named_survivors:
                status = 1
        if args.named_only:
            return status
        if not modules:
            print("== mutmut: no target module touched (targets: " + ", ".join(TARGET_GLOBS) + ")")
            return status
        tree = work / "tree"
        if tree.exists():
            shutil.rmtree(tree)
        copy_tree(tree)
        killed, survived, not_run = run_mutmut(tree, modules, args.budget_s, args.jobs, args.show)
        if not_run < 0:
            return 1
        if args.record:
            record(tree, modules, args.tests)
        scored = killed + survived
        rate = 100.0 * killed / scored if scored else 100.0
        if rate < args.min_kill_rate:
            print(f"kill rate {rate:.1f}% is under {args.min_kill_rate:.0f}%")
            status = 1
        return status
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
