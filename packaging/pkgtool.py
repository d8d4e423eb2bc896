"""Build helper for packaging/build.sh: the offline wheelhouse, versions, the nfpm config.

Standard library only (plus PyYAML for `nfpm-config`); runs on the build machine's Python 3.9+.

Why the wheelhouse is not a plain `pip download --python-version`: pip picks wheels by the
target's tags but evaluates environment markers against the interpreter that runs pip
(pypa/pip#11198, #10050; still so in pip 26), so `tomli; python_version < "3.11"` is silently
left out when a 3.11+ pip downloads for 3.9 and the 3.9 install then fails offline. Each target
is therefore resolved by pip with its marker environment set to the target's (python_version,
platform_machine, ...), which is what pip would see running on that host.
"""
import argparse
import email.message
import email.parser
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

PYTHONS = ["3.9", "3.10", "3.11", "3.12", "3.13"]
ARCHES = ["x86_64", "aarch64"]
# RHEL 8 has glibc 2.28, the oldest of the targets (Ubuntu 22.04: 2.35, RHEL 9: 2.34,
# AL2023: 2.34), so no wheel may need a newer manylinux than 2_28 (PEP 600).
GLIBC_MAX_MINOR = 28
# Optional package contents: left out with a warning when absent unless --require-unit.
OPTIONAL_SOURCES = {"systemd/gpu-node-agent.service"}

# Runs pip in-process with the target's marker environment (see the module docstring).
_PIP_SHIM = r"""
import json, sys
from pip._vendor.packaging import markers
_target = json.loads(sys.argv[1])
_default = markers.default_environment
def _environment():
    env = _default()
    env.update(_target)
    return env
markers.default_environment = _environment
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def platforms(arch: str) -> List[str]:
    """Every manylinux tag a glibc-2.28 host of `arch` accepts, newest first (PEP 600/599)."""
    lowest = 5 if arch == "x86_64" else 17  # aarch64 starts at manylinux2014 (glibc 2.17)
    tags = [f"manylinux_2_{m}_{arch}" for m in range(GLIBC_MAX_MINOR, lowest - 1, -1)]
    legacy = {"x86_64": ["manylinux2014", "manylinux2010", "manylinux1"],
              "aarch64": ["manylinux2014"]}
    return tags + [f"{name}_{arch}" for name in legacy[arch]]


def marker_env(python: str, arch: str) -> Dict[str, str]:
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "platform_python_implementation": "CPython",
        "platform_machine": arch,
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
    }


def target_args(python: str, arch: str) -> List[str]:
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python,
            "--abi", "cp" + python.replace(".", "")]
    for tag in platforms(arch):
        args += ["--platform", tag]
    return args


def run_pip(python: str, arch: str, pip_args: List[str]) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", _PIP_SHIM, json.dumps(marker_env(python, arch))]
    argv += pip_args + ["--disable-pip-version-check", "--no-input"]
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def cmd_wheelhouse(args: argparse.Namespace) -> int:
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    pythons, arches = args.pythons.split(","), args.arches.split(",")
    combos = [(py, arch) for arch in arches for py in pythons]
    scratch = Path(tempfile.mkdtemp(prefix="wheelhouse-", dir=dest))

    def fetch(combo: "tuple[str, str]") -> "tuple[str, str, subprocess.CompletedProcess]":
        py, arch = combo
        out = scratch / f"{arch}-{py}"
        pip_args = ["download", "--dest", str(out)] + target_args(py, arch) + args.requirement
        return py, arch, run_pip(py, arch, pip_args)

    started = time.monotonic()
    failed = False
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for py, arch, proc in pool.map(fetch, combos):
            if proc.returncode != 0:
                failed = True
                sys.stderr.write(f"wheelhouse: CPython {py} {arch} failed:\n{proc.stdout}\n")
    if failed:
        return 1
    for py, arch in combos:  # merge: one directory per architecture, pure wheels shared
        target = dest / arch
        target.mkdir(exist_ok=True)
        for wheel in (scratch / f"{arch}-{py}").glob("*.whl"):
            if not (target / wheel.name).exists():
                shutil.copy2(wheel, target / wheel.name)
    # The bootstrap pip: one py3-none-any wheel that runs on the oldest target (3.9), so the
    # package's install script can run `python3 pip.whl/pip install` with no pip on the host.
    for arch in arches:
        proc = run_pip(pythons[0], arch, ["download", "--no-deps", "--dest", str(dest / arch)]
                       + target_args(pythons[0], arch) + [args.pip])
        if proc.returncode != 0:
            sys.stderr.write(f"wheelhouse: bootstrap pip failed:\n{proc.stdout}\n")
            return 1
    shutil.rmtree(scratch)
    print(f"wheelhouse: {len(combos)} targets in {time.monotonic() - started:.1f} s")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """The wheelhouse alone satisfies the agent for every target (no index, binaries only)."""
    def dry_run(combo: "tuple[str, str]") -> "tuple[bool, str]":
        py, arch = combo
        wheelhouse = Path(args.wheelhouse) / arch
        agent = sorted(wheelhouse.glob("gpu_node_agent-*.whl"))
        with tempfile.TemporaryDirectory() as target:
            proc = run_pip(py, arch, ["install", "--dry-run", "--no-index", "--target", target,
                                      "--find-links", str(wheelhouse)]
                           + target_args(py, arch) + [str(w) for w in agent])
        return proc.returncode == 0 and len(agent) == 1, proc.stdout

    combos = [(py, arch) for arch in args.arches.split(",") for py in args.pythons.split(",")]
    failed = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for (py, arch), (ok, output) in zip(combos, pool.map(dry_run, combos)):
            failed += not ok
            print(f"verify: CPython {py} {arch}: {'ok' if ok else 'FAILED'}")
            if not ok:
                sys.stderr.write(output)
    return 1 if failed else 0


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if re.match(r"[^/]+\.dist-info/METADATA$", n))
        return email.parser.Parser().parsestr(zf.read(name).decode("utf-8"))


def package_version(pep440: str) -> str:
    """PEP 440 -> a version that sorts the same way in dpkg and rpm (both treat ~ as 'before').

    1.2.0.dev3 -> 1.2.0~~dev3 (before 1.2.0~a1: "~~" sorts before "~a"), 1.2.0rc1 -> 1.2.0~rc1,
    1.2.0rc1.dev3 -> 1.2.0~rc1~dev3, 1.2.0.post1 -> 1.2.0+post1.
    """
    m = re.fullmatch(r"(\d+(?:\.\d+)*)(?:\.?(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?"
                     r"(?:\+([a-z0-9.]+))?", pep440)
    if m is None:
        raise SystemExit(f"version {pep440!r} is not a PEP 440 version this build supports")
    release, pre, pre_n, post, dev, local = m.groups()
    out = release
    if pre:
        out += f"~{pre}{pre_n}"
    if dev:
        out += f"~dev{dev}" if pre else f"~~dev{dev}"
    if post:
        out += f"+post{post}"
    if local:
        out += f"+{local}"
    return out


def cmd_version(args: argparse.Namespace) -> int:
    meta = wheel_metadata(Path(args.wheel))
    print(meta["Version"] if args.pep440 else package_version(meta["Version"]))
    return 0


def cmd_copyright(args: argparse.Namespace) -> int:
    """copyright: the agent's licence, then every bundled wheel's, read from its metadata."""
    wheels = sorted(Path(args.wheelhouse).glob("*.whl"))
    out = io.StringIO()
    out.write(Path(args.header).read_text(encoding="utf-8"))
    out.write("\nBundled Python distributions (installed from the package's wheelhouse into\n"
              "/opt/gpu-node-agent at install time; each wheel carries its full licence text):\n\n")
    seen = set()
    for wheel in wheels:
        meta = wheel_metadata(wheel)
        key = (meta["Name"], meta["Version"])
        if key in seen or meta["Name"].lower().replace("_", "-") == "gpu-node-agent":
            continue
        seen.add(key)
        licence = meta.get("License-Expression") or ""
        if not licence:
            classifiers = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or []
                           if c.startswith("License ::")]
            short = (meta.get("License") or "").strip().splitlines()
            licence = ", ".join(classifiers) or (short[0] if short else "see the wheel")
        out.write(f" {meta['Name']} {meta['Version']}: {licence}\n")
    Path(args.out).write_text(out.getvalue(), encoding="utf-8")
    return 0


def cmd_changelog(args: argparse.Namespace) -> int:
    """A one-entry Debian changelog (gzip -9n: no name or mtime, reproducible)."""
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(args.epoch))
    text = (f"gpu-node-agent ({args.version}) unstable; urgency=medium\n\n"
            f"  * Release {args.version}; see the project's README for changes.\n\n"
            f" -- {args.maintainer}  {date}\n")
    with open(args.out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                    compresslevel=9, mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    return 0


def cmd_nfpm_config(args: argparse.Namespace) -> int:
    """packaging/nfpm.yaml with optional contents that are absent left out (loudly)."""
    import yaml

    config = yaml.safe_load(Path(args.src).read_text(encoding="utf-8"))
    kept, missing = [], set()
    for entry in config["contents"]:
        src = entry.get("src")
        relative = src[2:] if src and src.startswith("./") else src
        if relative in OPTIONAL_SOURCES and not (Path(args.root) / relative).exists():
            missing.add(relative)
            continue
        kept.append(entry)
    for relative in sorted(missing):
        if args.require_unit:
            sys.stderr.write(f"nfpm-config: {relative} is missing (--require-unit)\n")
            return 1
        sys.stderr.write(f"nfpm-config: WARNING: {relative} is missing; built without it\n")
    config["contents"] = kept
    Path(args.out).write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return 0


def main(argv: "List[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("wheelhouse")
    p.add_argument("--dest", required=True)
    p.add_argument("--pythons", default=",".join(PYTHONS))
    p.add_argument("--arches", default=",".join(ARCHES))
    p.add_argument("--jobs", type=int, default=int(os.environ.get("WHEELHOUSE_JOBS", "5")))
    p.add_argument("--pip", default="pip", help="requirement for the bootstrap pip wheel")
    p.add_argument("requirement", nargs="+")
    p.set_defaults(func=cmd_wheelhouse)
    p = sub.add_parser("verify")
    p.add_argument("--wheelhouse", required=True)
    p.add_argument("--pythons", default=",".join(PYTHONS))
    p.add_argument("--arches", default=",".join(ARCHES))
    p.add_argument("--jobs", type=int, default=2)
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("version")
    p.add_argument("wheel")
    p.add_argument("--pep440", action="store_true")
    p.set_defaults(func=cmd_version)
    p = sub.add_parser("copyright")
    p.add_argument("--wheelhouse", required=True)
    p.add_argument("--header", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_copyright)
    p = sub.add_parser("changelog")
    p.add_argument("--version", required=True)
    p.add_argument("--maintainer", required=True)
    p.add_argument("--epoch", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_changelog)
    p = sub.add_parser("nfpm-config")
    p.add_argument("--src", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--require-unit", action="store_true")
    p.set_defaults(func=cmd_nfpm_config)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
