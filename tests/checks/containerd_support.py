"""What the containerd check tests share: small host trees, the policy, fixture bundles."""
from pathlib import Path
from typing import Dict, Optional

from agent.config import Config
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.bundle_support import run_on_bundle
from tests.conftest import REPO, bundle, run_cli

UPSTREAM = REPO / "tests" / "fixtures" / "containerd" / "upstream"
V16 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n"
V17 = "containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1\n"
V2X = "containerd github.com/containerd/containerd/v2 v2.1.4 0000000\n"
IDS = "containerd-nvidia-runtime,containerd-cdi"


def up(name: str) -> str:
    return (UPSTREAM / name).read_text()


def policy(path: str = "dra", **settings) -> ResolvedPolicy:
    return ResolvedPolicy(load_policy(1), path, settings=Config(**settings).model_dump())


def write_files(root: Path, files: Dict[str, str]) -> None:
    """Writes each absolute host path under `root`, making its directories."""
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def tree(tmp: Path, files: Dict[str, str], version: Optional[str] = None, execs=()) -> Host:
    write_files(tmp, files)
    for path in execs:
        target = tmp / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")
        target.chmod(0o755)
    records = [{"argv": ["containerd", "--version"], "rc": 0, "stdout": version}] if version else []
    return Host(tmp, commands=RecordedCommands(records, "test"))


def on_bundle(name: str, check, path: str = "dra", **settings):
    return run_on_bundle(check, name, policy(path, **settings))


def cli_results(name: str, path: str = "dra"):
    res = run_cli(["check", "--bundle", bundle(name), "--path", path, "--only", IDS, "--format", "json"])
    assert res.rc in (0, 1), res.err
    return {c["id"]: c for c in res.json()["checks"]}
