"""Build and drive the simulated libnvidia-ml.so.1 (tests and bench only).

``build(dest)`` compiles nvml_sim.c with gcc against nvml.h from the nvidia-nvml-dev wheel
(a test dependency, never committed) plus the dlsym-logging preload shim.
``resolve(name)`` turns a scenario file (which may name a ``base`` and carry
``default_overrides``/``gpu_overrides``/``gpu_count``) into the flat document the C library
reads.
``worker_env(...)`` is the environment a real worker process needs to load it.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"


class SimUnavailable(Exception):
    """gcc or nvml.h missing: the caller skips with this reason (CI installs both)."""


def find_nvml_header() -> Path:
    """nvml.h from the installed nvidia-nvml-dev wheel (nvidia/cu13/include/ in 13.x,
    nvidia/nvml_dev/include/ in the cu12 wheels)."""
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    roots.update(p for p in sys.path if p.endswith("site-packages"))
    for root in sorted(roots):
        hits = sorted(glob.glob(os.path.join(root, "nvidia", "*", "include", "nvml.h")))
        if hits:
            return Path(hits[-1])
    raise SimUnavailable("nvml.h not found: pip install nvidia-nvml-dev (the test extras)")


def build(dest: Path) -> Dict[str, Path]:
    """Compile the library and the shim into ``dest``; returns their paths."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise SimUnavailable("gcc not installed (.ci/setup.d/20-nvml.sh installs it)")
    header = find_nvml_header()
    dest.mkdir(parents=True, exist_ok=True)
    lib = dest / "libnvidia-ml.so.1"
    shim = dest / "libnvsim-dlsym-log.so"
    common = [gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-deprecated-declarations",
              "-shared", "-fPIC"]
    subprocess.run(common + ["-I", str(header.parent), "-I", str(HERE), "-o", str(lib),
                             str(HERE / "nvml_sim.c"), "-lpthread"], check=True)
    subprocess.run(common + ["-o", str(shim), str(HERE / "dlsym_log.c"), "-ldl"], check=True)
    return {"lib": lib, "shim": shim, "header": header}


def load(name: str) -> Dict[str, Any]:
    return json.loads((SCENARIOS / name).read_text())


def resolve(name_or_doc: Any) -> Dict[str, Any]:
    """The flat scenario: base merged in, default_overrides merged into its defaults,
    gpu_overrides applied, gpu_count trimmed."""
    doc = load(name_or_doc) if isinstance(name_or_doc, str) else dict(name_or_doc)
    if "base" in doc:
        base = resolve(doc.pop("base"))
        base.update({k: v for k, v in doc.items()
                     if k not in ("gpu_overrides", "gpu_count", "default_overrides")})
        base["gpu_overrides"] = doc.get("gpu_overrides", {})
        base["default_overrides"] = doc.get("default_overrides", {})
        if "gpu_count" in doc:
            base["gpu_count"] = doc["gpu_count"]
        doc = base
    doc["defaults"] = {**doc.get("defaults", {}), **doc.pop("default_overrides", {})}
    gpus: List[Dict[str, Any]] = [dict(g) for g in doc.get("gpus", [])]
    for index, fields in doc.pop("gpu_overrides", {}).items():
        gpus[int(index)].update(fields)
    if "gpu_count" in doc:
        gpus = gpus[: int(doc.pop("gpu_count"))]
    doc["gpus"] = gpus
    return doc


def write_scenario(doc: Dict[str, Any], path: Path) -> Path:
    """Write atomically (rename), so a running library never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)
    return path


def field(doc: Dict[str, Any], gpu: int, key: str) -> Any:
    """What the library will report for one GPU field (the GPU's value, else defaults)."""
    own = doc["gpus"][gpu]
    return own[key] if key in own else doc["defaults"][key]


def worker_env(
    built: Optional[Dict[str, Path]],
    scenario: Optional[Path],
    symbol_log: Optional[Path] = None,
    call_log: Optional[Path] = None,
) -> Dict[str, str]:
    """The worker's environment: the simulated library first on LD_LIBRARY_PATH (or no
    library at all when ``built`` is None), the dlsym shim preloaded to log misses."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD") and not k.startswith("NVML_SIM_")}
    if built is not None:
        env["LD_LIBRARY_PATH"] = str(built["lib"].parent)
        env["LD_PRELOAD"] = str(built["shim"])
    if scenario is not None:
        env["NVML_SIM_SCENARIO"] = str(scenario)
    if symbol_log is not None:
        env["NVML_SIM_SYMBOL_LOG"] = str(symbol_log)
    if call_log is not None:
        env["NVML_SIM_CALL_LOG"] = str(call_log)
    return env
