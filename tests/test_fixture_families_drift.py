"""Every committed fixture bundle is what its family generator writes today.

tests/fixtures/generate.py writes the bundles from the family modules (and, for the GPU
families, from the real NVML worker over the simulated libnvidia-ml). A bundle renamed, or a
family changed, without running the generator again leaves a committed bundle that no code
describes: three bundles renamed once kept the boot ids of their old names, and three copies of
gpu-h100-snapshot-only kept a snapshot without the fields it gained. This test runs every
family in a copy of the tracked tree and compares the whole bundles folder with the committed
one, byte for byte (symlinks by target), naming the first differences. Needs the simulated
library (gcc): a missing compiler is a failure in CI, like the other nvml-sim tests.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

BUNDLES = Path("tests") / "fixtures" / "bundles"


def _tree(root: Path) -> Dict[str, Tuple[str, bytes]]:
    out: Dict[str, Tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path).encode())
            else:
                out[rel] = ("file", path.read_bytes())
    return out


def _copy_tracked(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True,
                           timeout=60).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def test_every_family_regenerates_the_committed_bundles(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("component missing: nvml-sim (gcc, to build the simulated libnvidia-ml)")
    copy = tmp_path / "tree"
    _copy_tracked(copy)
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run([sys.executable, "tests/fixtures/generate.py"], cwd=copy, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]

    committed, regenerated = _tree(REPO / BUNDLES), _tree(copy / BUNDLES)
    only_committed = sorted(set(committed) - set(regenerated))
    only_generated = sorted(set(regenerated) - set(committed))
    differ: List[str] = sorted(p for p in set(committed) & set(regenerated)
                               if committed[p] != regenerated[p])
    assert (only_committed, only_generated, differ) == ([], [], []), (
        f"bundles drifted from their generators (run `python tests/fixtures/generate.py`): "
        f"{len(only_committed)} committed but not generated {only_committed[:5]}, "
        f"{len(only_generated)} generated but not committed {only_generated[:5]}, "
        f"{len(differ)} differ {differ[:5]}")
