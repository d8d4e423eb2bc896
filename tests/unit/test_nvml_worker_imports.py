"""What the NVML worker process imports (agent/nvml/process.py ``import_pynvml``): pynvml
without ctypes.util's shutil and subprocess, and a ``find_library`` that still answers as the
real one. Each run is a fresh interpreter, as ``python -m agent.nvml.worker`` is."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.nvml import process

REPO = Path(__file__).resolve().parents[2]
# What ctypes/util.py imports at its top (shutil, subprocess) and in its functions (tempfile):
# none of it is used by a worker (pynvml.py imports find_library and never calls it).
LEFT_OUT = ("ctypes.util", "shutil", "subprocess", "tempfile", "bz2", "lzma")

PROBE = """
import json, sys
before = set(sys.modules)
import agent.nvml.worker as w
after = set(sys.modules)
found = w.pynvml.find_library("c")
from ctypes import util
print(json.dumps({"before": sorted(before), "new": sorted(after - before),
                  "found": found, "real": util.find_library("c"),
                  "real_file": util.__file__, "pynvml": w.pynvml is sys.modules["pynvml"]}))
"""


def probe() -> dict:
    pytest.importorskip("pynvml")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=60)
    return dict(json.loads(out.stdout))


def test_the_worker_imports_pynvml_without_ctypes_util_and_its_imports() -> None:
    got = probe()
    assert "pynvml" in got["new"] and got["pynvml"] is True
    # Only what the interpreter had not loaded already can be left out by the worker.
    assert [m for m in LEFT_OUT if m in got["new"]] == []
    assert "agent.nvml.readers" in got["new"]


def test_pynvml_find_library_still_answers_as_ctypes_util_does() -> None:
    got = probe()
    assert got["real_file"].endswith("ctypes/util.py")  # the real module, not the stand-in
    assert got["found"] == got["real"]
    assert got["found"]  # libc is on every host that runs the agent


def test_an_already_loaded_pynvml_is_returned_as_is() -> None:
    pynvml = pytest.importorskip("pynvml")
    assert process.import_pynvml() is pynvml
    assert sys.modules["pynvml"] is pynvml
