"""tests/fixtures/generate.py is the one entry point for the generated bundles: it names every
family generator there is, each script exists, and an unknown family is one line, exit 2."""
import runpy
import subprocess
import sys

from tests.conftest import REPO

GENERATE = REPO / "tests" / "fixtures" / "generate.py"


def _module():
    return runpy.run_path(str(GENERATE))  # not as __main__: defines, runs nothing


def test_every_generator_script_is_a_family_and_full_runs_last():
    families = _module()["FAMILIES"]
    scripts = {str(p.relative_to(REPO / "tests" / "fixtures"))
               for p in (REPO / "tests" / "fixtures").rglob("make_*bundles.py")}
    assert {script for script, _ in families.values()} == scripts
    assert list(families)[-1] == "full"  # it composes whole hosts from the others' bundles


def test_list_and_an_unknown_family():
    listed = subprocess.run([sys.executable, str(GENERATE), "--list"], capture_output=True,
                            text=True, timeout=60, cwd=REPO)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(_module()["FAMILIES"])
    bad = subprocess.run([sys.executable, str(GENERATE), "gpus"], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("generate.py: unknown family gpus (known: foundation,")
