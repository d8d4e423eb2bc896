"""tests/fixtures/generate.py is the one entry point for the generated bundles: it names every
family module under tests/fixtures/families, each has a main(), and an unknown family is one
line, exit 2."""
import importlib
import runpy
import subprocess
import sys

from tests.conftest import REPO

GENERATE = REPO / "tests" / "fixtures" / "generate.py"


def _module():
    return runpy.run_path(str(GENERATE))  # not as __main__: defines, runs nothing


def test_every_generator_module_is_a_family_and_full_runs_last():
    families = _module()["FAMILIES"]
    folder = REPO / "tests" / "fixtures" / "families"
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    entry = {module for module, _ in families.values()}
    # A module that is no family is a part of one: a family imports it (gpu.py writes the
    # mig-* bundles through mig.py). Anything else would be a generator nobody runs.
    parts = {m for m in modules - entry
             if any(f"tests.fixtures.families.{m}" in (folder / f"{e}.py").read_text()
                    or f"from tests.fixtures.families import {m}" in (folder / f"{e}.py").read_text()
                    for e in entry)}
    assert entry <= modules and modules - entry == parts
    # No generator left outside the one entry point.
    assert list((REPO / "tests" / "fixtures").rglob("make_*.py")) == []
    assert list(families)[-1] == "full"  # it composes whole hosts from the others' bundles
    for module, _ in families.values():
        assert callable(importlib.import_module(f"tests.fixtures.families.{module}").main)


def test_list_and_an_unknown_family():
    listed = subprocess.run([sys.executable, str(GENERATE), "--list"], capture_output=True,
                            text=True, timeout=60, cwd=REPO)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(_module()["FAMILIES"])
    bad = subprocess.run([sys.executable, str(GENERATE), "gpus"], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("generate.py: unknown family gpus (known: foundation,")
