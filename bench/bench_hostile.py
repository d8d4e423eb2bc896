"""Hostile bundles (tests/hostile_bundles.py) against a normal fixture bundle, in the same run:
peak RSS of the `gpu-node-agent check --bundle` child (ru_maxrss from wait4(2)) and its wall
time, each as a ratio to the normal bundle's, and each peak against the unit's memory cap
(systemd/gpu-node-agent.service MemoryMax=128M). Then the PAX refusal alone, in process:
load_bundle() on the 1 MiB PAX header against load_bundle() on the normal bundle packed as
.tar.gz.

    python bench/bench_hostile.py [--runs 5]

Prints figures and ratios; never asserts a time.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.hostile_bundles import ARCHIVES, DIRECTORIES, make_canary  # noqa: E402

UNIT_CAP_KIB = 128 * 1024  # MemoryMax=128M
NORMAL = REPO / "tests" / "fixtures" / "bundles" / "full-healthy-dra"  # every check runs


def child(bundle: Path, tmpdir: Path):
    """(peak RSS KiB, wall s, exit code) of one `check --bundle` child."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmpdir)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "check", "--bundle", str(bundle),
                             "--format", "json"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") \
        else status >> 8
    return usage.ru_maxrss, wall, proc.returncode


def measure(bundle: Path, tmpdir: Path, runs: int):
    rss, walls, codes = [], [], set()
    for _ in range(runs):
        r, w, c = child(bundle, tmpdir)
        rss.append(r)
        walls.append(w)
        codes.add(c)
    return max(rss), statistics.median(walls), sorted(codes)


def load_time(path: Path, runs: int):
    from agent.errors import BundleError
    from agent.host.bundle import load_bundle

    samples = []
    outcome = ""
    for _ in range(runs):
        t0 = time.perf_counter()
        try:
            load_bundle(path).close()
            outcome = "loaded"
        except BundleError as exc:
            outcome = f"refused: {str(exc).split(': ', 1)[-1][:60]}"
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), outcome


def tarfile_alone(value: str) -> float:
    """Seconds this interpreter's own tarfile takes to list a one-member archive whose PAX
    header holds ``value`` (no pre-scan): the reference for what the pre-scan keeps out."""
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("f")
        info.pax_headers = {"comment": value}
        tar.addfile(info, io.BytesIO(b""))
    buf.seek(0)
    t0 = time.perf_counter()
    with tarfile.open(fileobj=buf, mode="r") as tar:
        tar.getmembers()
    return time.perf_counter() - t0


def at_the_caps(dest: Path) -> dict:
    """Bundles just inside each limit (accepted, so the checks run on them): the worst memory
    an accepted bundle can cost."""
    import json

    out = {}
    line = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
    kmsg = dest / "cap-kmsg"
    (kmsg / "root").mkdir(parents=True)
    (kmsg / "bundle.yaml").write_text("format_version: 1\n")
    (kmsg / "kmsg.log").write_text(line * ((4 * 1024 * 1024 - 1) // len(line)))
    out["at cap: kmsg.log 4 MiB"] = kmsg
    short = dest / "cap-kmsg-lines"
    (short / "root").mkdir(parents=True)
    (short / "bundle.yaml").write_text("format_version: 1\n")
    (short / "kmsg.log").write_text("NVRM: Xid 79 a bb ccc\n" * 100_000)
    out["at cap: kmsg.log 100k lines"] = short
    cmds = dest / "cap-commands"
    (cmds / "root").mkdir(parents=True)
    (cmds / "bundle.yaml").write_text("format_version: 1\n")
    # 8 nodes a record (the mapping, three keys, the argv list and its item, rc, stdout)
    records = "".join(f"- {{argv: [c{i}], rc: 0, stdout: o}}\n" for i in range(6_200))
    (cmds / "commands.yaml").write_text(records)
    out["at cap: commands.yaml 50k nodes"] = cmds
    gpus = dest / "cap-gpus"
    (gpus / "root").mkdir(parents=True)
    (gpus / "bundle.yaml").write_text("format_version: 1\n")
    (gpus / "gpus.json").write_text(json.dumps({"gpus": [{"i": i} for i in range(49_000)]}))
    out["at cap: gpus.json 100k values"] = gpus
    for name, tables in (("at cap: config.toml 10k items", 9_990),
                         ("over: config.toml 3.9 MB", 400_000)):
        toml = dest / f"toml-{tables}"
        (toml / "root" / "etc" / "containerd").mkdir(parents=True)
        (toml / "bundle.yaml").write_text("format_version: 1\n")
        text = "".join(f"[t{i}]\n" for i in range(tables))[: 4 * 1024 * 1024 - 100]
        (toml / "root" / "etc" / "containerd" / "config.toml").write_text(text)
        out[name] = toml
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        base = Path(tmp)
        work = base / "work"
        work.mkdir()
        tmpdir = base / "tmp"
        tmpdir.mkdir()
        canary = make_canary(base)
        packed = work / "normal.tar.gz"
        with tarfile.open(packed, "w:gz") as tar:
            tar.add(NORMAL, arcname=NORMAL.name)
        cases = {name: build(work, canary) for name, build in {**ARCHIVES, **DIRECTORIES}.items()}
        cases.update(at_the_caps(work))

        n_rss, n_wall, n_codes = measure(NORMAL, tmpdir, args.runs)
        p_rss, p_wall, p_codes = measure(packed, tmpdir, args.runs)
        print(f"python {sys.version.split()[0]}, {args.runs} runs each: peak RSS = max, "
              f"wall = median; unit cap MemoryMax=128M = {UNIT_CAP_KIB} KiB")
        print(f"{'bundle':34} {'exit':>5} {'peak RSS KiB':>13} {'x normal':>9} {'% of cap':>9}"
              f" {'wall ms':>9} {'x normal':>9}")

        def row(name, rss, wall, codes):
            print(f"{name:34} {','.join(map(str, codes)):>5} {rss:13d} {rss / n_rss:9.2f} "
                  f"{100 * rss / UNIT_CAP_KIB:8.1f}% {wall * 1000:9.1f} {wall / n_wall:9.2f}")

        row("normal (directory)", n_rss, n_wall, n_codes)
        row("normal (.tar.gz)", p_rss, p_wall, p_codes)
        for name, path in cases.items():
            row(name, *measure(path, tmpdir, args.runs))
        left = [p for p in os.listdir(tmpdir) if p.startswith("gna-bundle-")]
        print(f"gna-bundle-* directories left behind: {len(left)}")

        print("\nPAX refusal, in process (load_bundle only, median of "
              f"{max(args.runs, 20)}):")
        normal_t, normal_out = load_time(packed, max(args.runs, 20))
        pax_t, pax_out = load_time(cases["pax-1mib"], max(args.runs, 20))
        print(f"  normal bundle .tar.gz: {normal_t * 1000:8.2f} ms  ({normal_out})")
        print(f"  1 MiB PAX header:      {pax_t * 1000:8.2f} ms  ({pax_out})")
        print(f"  ratio PAX / normal:    {pax_t / normal_t:8.2f}")
        digits = tarfile_alone("1" * 16 * 1024)
        admitted = tarfile_alone(("1" * 64 + "a") * 1000)
        print("  reference, this interpreter's tarfile with no pre-scan:")
        print(f"    16 KiB run of digits (refused by the pre-scan): {digits * 1000:9.1f} ms "
              f"({digits / normal_t:.1f}x a normal load; quadratic where unpatched)")
        print(f"    64 KiB of 64-digit runs (the worst it admits):  {admitted * 1000:9.1f} ms "
              f"({admitted / normal_t:.2f}x a normal load)")


if __name__ == "__main__":
    main()
