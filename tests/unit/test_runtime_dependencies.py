"""The runtime dependencies are exactly what the product imports.

A dependency no module of agent/ or checks/ imports still ships in every offline wheelhouse and
every .deb/.rpm; one a module imports but the metadata lacks breaks a clean install. Both
directions are read from the code (ast) and from pyproject.toml, never from the installed
environment (which also holds the test extra).
"""
import ast
import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.9/3.10
    import tomli as tomllib

# distribution name -> the top-level module it provides (written from each project's docs)
PROVIDES = {
    "nvidia-ml-py": "pynvml",
    "pyudev": "pyudev",
    "requests": "requests",
    "bcrypt": "bcrypt",
    "pyyaml": "yaml",
    "tomli": "tomli",
}

# Imported only inside try/except ImportError, with a documented fallback: not a dependency.
OPTIONAL = {
    "cryptography",  # a client certificate's CN when installed (agent/kube/ falls back)
    # gpu-workload's CRI route, the `[workload]` extra (agent/host/workload_cri.py): without
    # it the record says `tool` and the check is unknown (docs/decisions.md).
    "grpc",
    "cri_api",
}


def _is_stdlib(top: str) -> bool:
    names = getattr(sys, "stdlib_module_names", None)  # 3.10+
    if names is not None:
        return top in names or top == "tomllib"
    spec = importlib.util.find_spec(top)
    if spec is None:  # not installed here: tomllib on 3.9/3.10, or an undeclared package
        return top == "tomllib"
    origin = spec.origin or ""
    return origin in ("built-in", "frozen") or "-packages" not in origin


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~; \[]", requirement, maxsplit=1)[0].strip().lower()


def _declared() -> set:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    return {_distribution(r) for r in meta["project"]["dependencies"]}


def _imported_third_party() -> set:
    found = set()
    for folder in ("agent", "checks"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top not in ("agent", "checks") and not _is_stdlib(top):
                        found.add(top)
    return found


def test_every_declared_dependency_is_imported_by_the_product():
    modules = _imported_third_party()
    unused = sorted(d for d in _declared() if PROVIDES.get(d) not in modules)
    assert unused == [], f"runtime dependencies no product module imports: {unused}"


def test_every_imported_module_is_declared():
    provided = {PROVIDES[d] for d in _declared() if d in PROVIDES}
    undeclared = sorted(_imported_third_party() - provided - OPTIONAL)
    assert undeclared == [], f"imported by agent/ or checks/ but not a dependency: {undeclared}"


def test_the_three_unused_packages_are_gone():
    # psutil, distro and prometheus-client once shipped although no product module imports
    # them; the exposition is written by hand (agent/outputs/metrics.py) and os-release is
    # parsed through the Host seam (docs/decisions.md).
    assert not {"psutil", "distro", "prometheus-client"} & _declared()


def test_pydantic_is_no_dependency():
    # The config, policy and web-config records are validated by agent/safeio/schema.py
    # (docs/decisions.md, "Config and policy validation without pydantic").
    assert not {"pydantic", "pydantic-core"} & _declared()
    assert "pydantic" not in _imported_third_party()
