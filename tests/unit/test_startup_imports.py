"""What a one-shot `check` leaves unimported (agent/cli_common.py defer_importlib_metadata,
checks/xid/policy.py package_text; pydantic, which the agent no longer uses), and that the
stand-ins still answer as the modules they stand for. Each run is a fresh interpreter, as the command line is."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import checks
from checks.xid.policy import package_text

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import contextlib, io, json, sys
import agent.cli, agent.config, checks.registry
from agent.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["check", "--bundle", "tests/fixtures/bundles/full-healthy-dra"])
from checks.policy import default_policy_data
default_policy_data(2)
left = sorted(m for m in ("importlib.resources", "zipfile", "email") if m in sys.modules)
if getattr(sys.modules.get("importlib.metadata"), "__file__", None):  # the real one
    left.append("importlib.metadata")
pydantic = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core"))
from importlib import metadata
deferred = metadata.version("PyYAML")
from importlib.metadata import version
print(json.dumps({"code": code, "verdict": out.getvalue().splitlines()[-1], "pydantic": pydantic,
                  "left": left, "deferred": deferred, "after": version("PyYAML"),
                  "real": sys.modules["importlib.metadata"].__name__,
                  "real_file": getattr(sys.modules["importlib.metadata"], "__file__", None)}))
"""


def test_check_path_imports_neither_importlib_metadata_nor_resources() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=120)
    got = json.loads(out.stdout)
    assert (got["code"], got["verdict"]) == (0, "gate dra: OPEN")  # the fixture's verdict
    assert got["left"] == []
    # The config and policy records are agent/safeio/schema.py's: pydantic is never imported.
    assert got["pydantic"] == []
    # The stand-in's version() loaded the real module and answered from it.
    import yaml

    assert got["deferred"] == got["after"] == yaml.__version__
    assert got["real_file"] and "importlib" in got["real_file"]


def test_an_already_imported_importlib_metadata_is_left_alone() -> None:
    import importlib.metadata

    from agent.cli_common import defer_importlib_metadata

    before = sys.modules["importlib.metadata"]
    defer_importlib_metadata()
    assert sys.modules["importlib.metadata"] is before is importlib.metadata


def test_package_text_reads_the_checks_package_file() -> None:
    on_disk = (Path(checks.__file__).parent / "policy_v1.yaml").read_text(encoding="utf-8")
    assert package_text("policy_v1.yaml") == on_disk
    assert "version" in on_disk  # a policy file, not an empty one


def test_package_text_of_a_missing_file_raises() -> None:
    with pytest.raises(OSError):
        package_text("policy_v999.yaml")
