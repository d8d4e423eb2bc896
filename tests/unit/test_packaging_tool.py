"""packaging/pkgtool.py offline: the target-marker pip shim, manylinux tags, the nfpm
config's file list and the optional unit (the packages themselves: tests/integration/
test_packages.py)."""
import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "packaging"))
try:
    import pkgtool
finally:
    sys.path.pop(0)


def _wheel(dest: Path, name: str, requires: "list[str]") -> Path:
    """A minimal valid py3-none-any wheel (PEP 427) with these Requires-Dist lines."""
    path = dest / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                             + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arc},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


@pytest.mark.parametrize("python,wants_tomli", [("3.9", True), ("3.10", True), ("3.12", False)])
def test_dependencies_resolve_with_the_targets_markers(tmp_path, python, wants_tomli):
    """pip alone would evaluate `python_version < "3.11"` for the interpreter running this test
    (pypa/pip#11198); through pkgtool's shim it is evaluated for the target."""
    index = tmp_path / "index"
    index.mkdir()
    demo = _wheel(index, "demo", ['tomli; python_version < "3.11"', 'armonly; platform_machine == "aarch64"'])
    _wheel(index, "tomli", [])
    _wheel(index, "armonly", [])
    out = tmp_path / "out"
    proc = pkgtool.run_pip(python, "x86_64", ["download", "--no-index", "--find-links", str(index),
                                              "--dest", str(out)]
                           + pkgtool.target_args(python, "x86_64") + [str(demo)])
    assert proc.returncode == 0, proc.stdout
    got = sorted(p.name.split("-")[0] for p in out.iterdir())
    assert got == (["demo", "tomli"] if wants_tomli else ["demo"])
    # platform_machine is the target's too.
    out = tmp_path / "arm"
    proc = pkgtool.run_pip(python, "aarch64", ["download", "--no-index", "--find-links", str(index),
                                               "--dest", str(out)]
                           + pkgtool.target_args(python, "aarch64") + [str(demo)])
    assert proc.returncode == 0, proc.stdout
    assert "armonly" in {p.name.split("-")[0] for p in out.iterdir()}


def test_manylinux_tags_stop_at_rhel8_glibc():
    x86 = pkgtool.platforms("x86_64")
    arm = pkgtool.platforms("aarch64")
    assert "manylinux_2_28_x86_64" in x86 and "manylinux1_x86_64" in x86
    assert "manylinux2014_aarch64" in arm and not any("2010" in t or "manylinux1" in t for t in arm)
    newer = [t for t in x86 + arm if t.startswith("manylinux_2_")
             and int(t.split("_")[2]) > 28]
    assert not newer
    assert all(t.endswith("_aarch64") for t in arm) and all(t.endswith("_x86_64") for t in x86)


def _config(tmp_path: Path, unit: bool, require: bool) -> "subprocess.CompletedProcess[str]":
    root = tmp_path / "stage"
    (root / "systemd").mkdir(parents=True, exist_ok=True)
    if unit:
        (root / "systemd" / "gpu-node-agent.service").write_text("[Unit]\n")
    argv = [sys.executable, str(REPO / "packaging" / "pkgtool.py"), "nfpm-config",
            "--src", str(REPO / "packaging" / "nfpm.yaml"), "--root", str(root),
            "--out", str(tmp_path / "out.yaml")] + (["--require-unit"] if require else [])
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)


def _units(tmp_path: Path) -> "list[str]":
    config = yaml.safe_load((tmp_path / "out.yaml").read_text())
    return [e["dst"] for e in config["contents"] if e.get("src", "").endswith(".service")]


def test_unit_is_packaged_when_present(tmp_path):
    assert _config(tmp_path, unit=True, require=True).returncode == 0
    assert sorted(_units(tmp_path)) == ["/lib/systemd/system/gpu-node-agent.service",
                                        "/usr/lib/systemd/system/gpu-node-agent.service"]


def test_missing_unit_warns_or_fails_with_require_unit(tmp_path):
    proc = _config(tmp_path, unit=False, require=False)
    assert proc.returncode == 0 and "WARNING" in proc.stdout
    assert _units(tmp_path) == []
    proc = _config(tmp_path, unit=False, require=True)
    assert proc.returncode == 1 and "--require-unit" in proc.stdout


def test_every_source_in_nfpm_yaml_exists_or_is_generated():
    """The one file list names real files: from the repo, or made by build.sh."""
    config = yaml.safe_load((REPO / "packaging" / "nfpm.yaml").read_text())
    generated = ("./wheelhouse/", "./generated/")
    for entry in config["contents"]:
        src = entry.get("src")
        if src is None or src.startswith(generated):
            continue
        assert (REPO / src).exists(), src
    scripts = [v for o in config["overrides"].values() for v in o["scripts"].values()]
    assert scripts and all((REPO / s).is_file() for s in scripts)
