"""Bundle mode cannot leak: on an empty and on a garbage bundle, under an audit hook, nothing
is opened, listed, executed or loaded outside the bundle, and no check passes."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO, TESTS

RUNNER = TESTS / "checks" / "leak" / "run_audited.py"


def _registry():
    from checks.registry import ALL_CHECKS

    return ALL_CHECKS


def _run(bundle_dir: Path, path: str = "dra"):
    proc = subprocess.run([sys.executable, str(RUNNER), str(bundle_dir), path],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _meta(dest: Path) -> None:
    (dest / "bundle.yaml").write_text(yaml.safe_dump({"format_version": 1, "hostname": "t"}))


def _garbage(rng: random.Random, n: int = 300) -> str:
    return bytes(rng.randrange(256) for _ in range(n)).decode("latin-1")


def make_garbage_bundle(dest: Path, seed: int) -> None:
    rng = random.Random(seed)
    _meta(dest)
    root = dest / "root"
    for check in _registry():
        for pattern in tuple(check.reads) + tuple(check.presence):
            path = pattern.replace("*", "garbage")
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.write_text(_garbage(rng), encoding="latin-1")
    records = [{"argv": list(argv), "rc": rng.choice([0, 1, 2, 127]), "stdout": _garbage(rng),
                "stderr": _garbage(rng, 40)} for c in _registry() for argv in c.runs]
    (dest / "commands.yaml").write_text(yaml.safe_dump(records))
    (dest / "host.json").write_text(json.dumps({
        "pci_devices": [{"slot": 3, "class": None}], "dev_nodes": "garbage",
        "adjtimex": {"status": "x"}, "node": [1, 2], "sticky": 7}))
    (dest / "gpus.json").write_text(json.dumps({"schema_version": "garbage", "gpus": [None, 1, "x"]}))
    (dest / "kmsg.log").write_text(_garbage(rng, 2000), encoding="latin-1")


def _assert_no_leak_and_no_pass(result):
    assert result["violations"] == [], result["violations"][:10]
    report = json.loads(result["report"])
    passing = [c["id"] for c in report["checks"] if c["status"] == "pass"]
    assert passing == [], [(c["id"], c["summary"]) for c in report["checks"] if c["status"] == "pass"]
    assert result["rc"] == 1 and not report["gate"]["open"]


def test_empty_bundle_leaks_nothing_and_nothing_passes(tmp_path):
    _meta(tmp_path)
    for path in ("dra", "device-plugin"):
        _assert_no_leak_and_no_pass(_run(tmp_path, path))


def test_garbage_bundles_leak_nothing_and_nothing_passes(tmp_path):
    for seed in (1, 2):
        dest = tmp_path / f"g{seed}"
        dest.mkdir()
        make_garbage_bundle(dest, seed)
        result = _run(dest)
        _assert_no_leak_and_no_pass(result)
        # The checks' reads went through the descriptor walk (agent/host/resolve.py), the
        # only place the runner lets a relative name through.
        assert result["walked"] > 0


def test_the_hook_does_catch_a_leak(tmp_path, monkeypatch):
    # The guard itself must be able to fail: a bundle whose root links out of the bundle
    # (an absolute link resolved by the *OS*, not the Host) is caught when a check reads it
    # through plain open(). We simulate that by pointing the runner at a check-free read.
    _meta(tmp_path)
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import runpy, sys\n"
        "sys.argv = [sys.argv[1], sys.argv[2]]\n"
        "import checks.os_supported as m\n"
        "orig = m._os_supported\n"
        "def leaky(host, policy):\n"
        "    open('/etc/hostname').read()\n"
        "    return orig(host, policy)\n"
        "m.OS_SUPPORTED.__dict__['run'] if False else None\n"
        "object.__setattr__(m.OS_SUPPORTED, 'run', leaky)\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    proc = subprocess.run([sys.executable, str(probe), str(RUNNER), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ["open", "/etc/hostname"] in result["violations"]
