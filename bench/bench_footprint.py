"""The agent's footprint, each figure beside its reference measured in the same run:

- memory: `gpu-node-agent run` with the real NVML worker on the simulated 8x H100 library
  (tests/nvml_sim), every process of it (the agent and all its children) with RSS and PSS from
  /proc/PID/smaps_rollup (PSS: shared pages split between the processes that map them, so the
  sum counts them once), beside Debian's node_exporter and a bare interpreter (``site`` only,
  the floor under every Python process) started in the same run;
- series: the same agent's /metrics, counted, beside the ceiling 200 + 5 x (checks - 23), and
  beside an agent with every optional series on (run.gpu_telemetry, run.check_details);
- start-up: a one-shot `check --bundle` on a full fixture host and `version`, beside the bare
  interpreter (`python -c pass`): medians of wall time and of CPU time (children's rusage, which
  another process on the machine does not inflate), as ratios; `-X importtime` top entries.
  Twice: as installed (a fresh venv with no .pth file, the dependencies on PYTHONPATH: what a
  package install runs, and the figure the target is read against), and in the venv running
  the bench (a development venv runs the editable install's .pth finder, which imports pathlib,
  and coverage's .pth at every start, which inflates the reference ~2x);
- what the main process's Python heap holds after importing what `run` imports (tracemalloc,
  by top-level package).

    python bench/bench_footprint.py [--runs 15] [--tree PATH] [--baseline PATH] [--json out]

``--tree`` measures another checkout with this interpreter; ``--baseline`` measures a second
one (e.g. an earlier commit, `git archive <commit> | tar -x -C DIR`) in the same run, the
start-up runs of the two taking turns.
Never asserts a time: a figure is read beside its reference.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.components import locate  # noqa: E402
from tests.integration.agentproc import Proc, free_port, http_get, wait_for  # noqa: E402

FULL_HOST = REPO / "tests" / "fixtures" / "bundles" / "full-healthy-dra"
ROLLUP = ("Rss", "Pss", "Pss_Anon", "Pss_File")
# What `run` imports beyond `check` (agent/cli_run.py and the daemon), for the heap figure.
RUN_IMPORTS = ("yaml", "agent.cli", "agent.cli_run", "agent.config", "checks.registry",
               "agent.daemon.service", "agent.daemon.process", "agent.nvml.client",
               "agent.xid.monitor", "agent.outputs.metrics_server", "agent.outputs.node.publish",
               "agent.kube.session", "agent.host.build")


def smaps_rollup(pid: int) -> Dict[str, float]:
    """RSS, PSS and PSS anon/file of ``pid`` in MiB (proc(5), /proc/PID/smaps_rollup)."""
    out: Dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ROLLUP:
            out[key] = int(rest.split()[0]) / 1024
    return out


def process_tree(pid: int) -> List[Dict[str, Any]]:
    import psutil

    main = psutil.Process(pid)
    rows = []
    for proc in [main] + main.children(recursive=True):
        try:
            name = " ".join(proc.cmdline()[1:4])[:60] or proc.name()
            rows.append({"pid": proc.pid, "what": name, **smaps_rollup(proc.pid)})
        except (OSError, psutil.Error):  # exited between the listing and the read
            continue
    return rows


def sim_env(tmp: Path, tree: Path) -> Dict[str, str]:
    from tests.nvml_sim import simlib

    built = simlib.build(tmp / "nvsim")
    scenario = simlib.write_scenario(simlib.resolve("healthy-8xh100.json"), tmp / "scn.json")
    env = simlib.worker_env(built, scenario)
    env.pop("LD_PRELOAD", None)
    env["MALLOC_ARENA_MAX"] = "2"  # as systemd/gpu-node-agent.service runs it
    env["PYTHONPATH"] = str(tree)
    return env


def start_run(tmp: Path, tree: Path, env: Dict[str, str], name: str,
              extra: str = "") -> Tuple[Proc, int]:
    """`run` on the live host (this machine's files and commands, the XID monitor, the Node
    publisher loaded, as bench/bench_scrape.py runs it), from ``tree``."""
    port = free_port()
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(f"state_dir: {tmp / name}-state\nrun:\n  fast_interval: 60\n"
                   f"  slow_interval: 900\n{extra}")
    proc = Proc([sys.executable, "-m", "agent.cli", "run", "--config", str(cfg),
                 "--listen-address", f"127.0.0.1:{port}"], tmp / f"{name}.log", env=env, cwd=tree)
    wait_for(lambda: "first full run done" in proc.text() or proc.popen.poll() is not None,
             120, f"{name}'s first run")
    if proc.popen.poll() is not None:
        raise RuntimeError(f"{name} exited: {proc.text()[-800:]}")
    return proc, port


def series(body: bytes) -> Dict[str, int]:
    names: Dict[str, int] = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            names[name] = names.get(name, 0) + 1
    return names


def checks_in(tree: Path) -> int:
    out = subprocess.run([sys.executable, "-c", "from checks.registry import ALL_CHECKS; "
                          "print(len(ALL_CHECKS))"], cwd=tree, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
    return int(out.stdout)


def timed(argv: List[str], trees: List[Path], runs: int,
          deps: str = "") -> List[Tuple[float, float]]:
    """Median wall and median CPU (user+sys of the child, from rusage) over ``runs`` in each
    tree, the trees taking turns so a change in the machine's load falls on all of them."""
    walls: List[List[float]] = [[] for _ in trees]
    cpus: List[List[float]] = [[] for _ in trees]
    for _ in range(runs):
        for k, tree in enumerate(trees):
            env = {**os.environ, "PYTHONPATH": str(tree) + (os.pathsep + deps if deps else "")}
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                           cwd=tree, check=False)
            walls[k].append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[k].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus)]


def importtime(tree: Path, argv: List[str], top: int = 5,
               tries: int = 3) -> Dict[str, List[Tuple[str, float]]]:
    """Top ``top`` top-level imports by cumulative time and any imports by self time (ms),
    each module's least over ``tries`` runs (the least disturbed by the machine's load)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    best: Dict[str, Tuple[str, float, float, int]] = {}
    for _ in range(tries):
        err = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=tree, env=env,
                             capture_output=True, text=True, check=False).stderr
        for line in err.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$", line)
            if m:
                row = (m.group(4), int(m.group(1)) / 1000, int(m.group(2)) / 1000,
                       len(m.group(3)))
                if row[0] not in best or row[2] < best[row[0]][2]:
                    best[row[0]] = row
    rows = list(best.values())
    first = [r for r in rows if r[3] == 1 and r[0] not in ("site", "encodings")]
    return {"cumulative": [(n, c) for n, _, c, _ in sorted(first, key=lambda r: -r[2])[:top]],
            "self": [(n, s) for n, s, _, _ in sorted(rows, key=lambda r: -r[1])[:top]]}


def clean_layout(tmp: Path) -> Tuple[str, str]:
    """An interpreter as a package install runs the agent: a fresh venv of this Python with
    nothing in its site-packages, so no .pth file runs at start (site.py runs every .pth of a
    site directory; one on PYTHONPATH is only searched), and the agent's runtime dependencies
    in one directory for PYTHONPATH. Returns (python, that directory)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")],
                   check=True)
    deps = tmp / "deps"
    deps.mkdir()
    import yaml  # PyYAML: yaml/ holds its C loader too; _yaml/ is its compatibility shim

    site = Path(yaml.__file__).parent.parent
    for name in ("yaml", "_yaml", "tomli"):
        if (site / name).is_dir():
            (deps / name).symlink_to(site / name)
    return str(tmp / "venv" / "bin" / "python"), str(deps)


def installed_startup(trees: List[Path], runs: int) -> List[Dict[str, Any]]:
    """The start-up figures of each tree run from ``clean_layout``."""
    with tempfile.TemporaryDirectory(prefix="bench-clean-") as tmpdir:
        python, deps = clean_layout(Path(tmpdir))
        for tree in trees:  # the layout must run the agent, or its figures mean nothing
            out = subprocess.run([python, "-m", "agent.cli", "check", "--bundle", str(FULL_HOST)],
                                 capture_output=True, text=True, cwd=tree,
                                 env={**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{deps}"})
            if out.returncode != 0 or not out.stdout.rstrip().endswith("OPEN"):
                raise SystemExit(f"the clean layout cannot run {tree}: {out.stderr.strip()[-300:]}")
        cli = [python, "-m", "agent.cli"]
        floor = timed([python, "-c", "pass"], trees, runs, deps)
        checks = timed(cli + ["check", "--bundle", str(FULL_HOST)], trees, runs, deps)
        versions = timed(cli + ["version"], trees, runs, deps)
    return [{"floor": floor[k], "check": checks[k], "version": versions[k]}
            for k in range(len(trees))]


def heap(tree: Path) -> Dict[str, float]:
    """tracemalloc: what each group of `run`'s imports adds to the Python heap (MiB), in
    order, and the total."""
    code = ("import tracemalloc, importlib, json\n"
            "tracemalloc.start()\n"
            "out, prev = {}, 0\n"
            f"for m in {RUN_IMPORTS!r}:\n"
            "    try: importlib.import_module(m)\n"
            "    except ImportError: continue\n"
            "    cur = tracemalloc.get_traced_memory()[0]\n"
            "    out[m], prev = (cur - prev) / 2**20, cur\n"
            "out['total'] = prev / 2**20\n"
            "print(json.dumps(out))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
    return dict(json.loads(out.stdout))


def bare_interpreter(env: Dict[str, str], tree: Path) -> Dict[str, float]:
    """RSS/PSS of this interpreter doing nothing (``site`` run, nothing imported beyond it),
    in the agent's environment: the floor under each of the agent's Python processes."""
    code = "import sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, cwd=tree)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        return smaps_rollup(proc.pid)
    finally:
        proc.communicate(timeout=30)


def memory_and_series(tree: Path) -> Dict[str, Any]:
    res: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as tmpdir:
        tmp = Path(tmpdir)
        env = sim_env(tmp, tree)
        res["bare_interpreter"] = bare_interpreter(env, tree)
        node: Optional[Proc] = None
        binary = locate("node_exporter")
        if binary is not None:
            nport = free_port()
            node = Proc([str(binary), f"--web.listen-address=127.0.0.1:{nport}"], tmp / "ne.log")
        agent, port = start_run(tmp, tree, env, "agent")
        try:
            time.sleep(2)  # past the first cycle's garbage collection and malloc_trim
            res["agent"] = process_tree(agent.pid)
            body = http_get(f"http://127.0.0.1:{port}/metrics")
            res["series"] = sum(series(body).values())
            res["body_bytes"] = len(body)
            if node is not None:
                wait_for(lambda: http_get(f"http://127.0.0.1:{nport}/metrics"), 30, "node_exporter")
                res["node_exporter"] = process_tree(node.pid)
        finally:
            agent.stop()
            if node is not None:
                node.stop()
        try:  # every optional series on: refused by a tree from before the options
            full, fport = start_run(tmp, tree, env, "full",
                                    "  gpu_telemetry: true\n  check_details: true\n")
        except RuntimeError:
            res["series_all_options"] = None
        else:
            try:
                res["series_all_options"] = sum(series(
                    http_get(f"http://127.0.0.1:{fport}/metrics")).values())
            finally:
                full.stop()
    return res


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--tree", default=str(REPO), help="the checkout to measure")
    ap.add_argument("--baseline", help="another checkout measured in the same run, for before/after")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    trees = [Path(args.tree).resolve()] + ([Path(args.baseline).resolve()] if args.baseline else [])
    for tree in trees:  # bytecode as an installed package has it (pip compiles at install):
        # without it (PYTHONDONTWRITEBYTECODE, a fresh `git archive`) every process compiles
        # each module again, which costs time and memory no installed agent pays
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "agent"),
                        str(tree / "checks")], stdout=subprocess.DEVNULL, check=False)
    cli = [sys.executable, "-m", "agent.cli"]
    check = ["-m", "agent.cli", "check", "--bundle", str(FULL_HOST)]
    installed = installed_startup(trees, args.runs)
    floor = timed([sys.executable, "-c", "pass"], trees, args.runs)
    checks = timed(cli + check[2:], trees, args.runs)
    versions = timed(cli + ["version"], trees, args.runs)
    results = []
    for k, tree in enumerate(trees):
        r: Dict[str, Any] = {"tree": str(tree), "python": sys.version.split()[0],
                             "installed": installed[k],
                             "floor": floor[k], "check": checks[k], "version": versions[k],
                             "importtime": importtime(tree, check), "heap_mib": heap(tree),
                             "checks": checks_in(tree)}
        r.update(memory_and_series(tree))
        results.append(r)
    for r in results:
        report(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def report(r: Dict[str, Any]) -> None:
    print(f"tree {r['tree']}, python {r['python']}")
    for title, row in (("as installed: a clean venv, no .pth (the figure to read)", r["installed"]),
                       ("in the bench's own venv (its .pth files inflate the reference)", r)):
        print(f"start-up, {title}")
        startup_rows(row)
    print("  -X importtime of check --bundle, top-level by cumulative ms: " + ", ".join(
        f"{n} {v:.1f}" for n, v in r["importtime"]["cumulative"]))
    print("  ... any module by self ms: " + ", ".join(
        f"{n} {v:.1f}" for n, v in r["importtime"]["self"]))
    memory_and_series_rows(r)


def startup_rows(r: Dict[str, Any]) -> None:
    (fw, fc), (cw, cc), (vw, vc) = r["floor"], r["check"], r["version"]
    print("  (medians)                         wall        cpu      ratio to the bare interpreter")
    print(f"  python -c pass (reference)   {fw * 1e3:7.1f} ms {fc * 1e3:7.1f} ms")
    print(f"  check --bundle {FULL_HOST.name:<14}{cw * 1e3:7.1f} ms {cc * 1e3:7.1f} ms"
          f"   {cw / fw:.1f}x wall, {cc / max(fc, 1e-3):.1f}x cpu")
    print(f"  version                      {vw * 1e3:7.1f} ms {vc * 1e3:7.1f} ms"
          f"   {vw / fw:.1f}x wall, {vc / max(fc, 1e-3):.1f}x cpu")


def memory_and_series_rows(r: Dict[str, Any]) -> None:
    ceiling = 200 + 5 * (r["checks"] - 23)
    print(f"series: {r['series']} ({r['body_bytes']} bytes) on 8 simulated GPUs with "
          f"{r['checks']} checks; ceiling {ceiling} ({r['series'] / ceiling:.2f} of it); every "
          f"option on: {r['series_all_options']}")
    print("memory (MiB, /proc/PID/smaps_rollup)    RSS     PSS  PSS anon  PSS file")
    for who in ("agent", "node_exporter"):
        rows = r.get(who)
        if rows is None:
            print(f"  {who}: not found (.ci/setup.d/50-prometheus.sh unpacks it)")
            continue
        for p in rows:
            print(f"  {p['what'][:34]:<34} {p['Rss']:7.1f} {p['Pss']:7.1f} {p['Pss_Anon']:9.1f}"
                  f" {p['Pss_File']:9.1f}")
        rss, pss = sum(p["Rss"] for p in rows), sum(p["Pss"] for p in rows)
        print(f"  {who} total, {len(rows)} process(es): RSS {rss:.1f}, PSS {pss:.1f}")
    bare = r.get("bare_interpreter")
    if bare:
        print(f"  {'python (bare interpreter, reference)':<34} {bare['Rss']:7.1f} {bare['Pss']:7.1f}"
              f" {bare['Pss_Anon']:9.1f} {bare['Pss_File']:9.1f}")
        print("  each agent process's RSS / the bare interpreter's: " + ", ".join(
            f"{p['what'].split()[1] if len(p['what'].split()) > 1 else p['what']} "
            f"{p['Rss'] / bare['Rss']:.2f}" for p in r["agent"]))
    if r.get("node_exporter"):
        a = sum(p["Pss"] for p in r["agent"])
        n = sum(p["Pss"] for p in r["node_exporter"])
        print(f"  agent PSS / node_exporter PSS: {a / n:.2f}")
    print("python heap added by run's imports (tracemalloc, MiB): " + ", ".join(
        f"{k} {v:.2f}" for k, v in r["heap_mib"].items() if v >= 0.05 or k == "total"))


if __name__ == "__main__":
    sys.exit(main())
