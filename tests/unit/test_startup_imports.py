"""What a one-shot `check` leaves unimported, each module a cost the command does not need
(bench/bench_footprint.py measures them; docs/decisions.md): importlib.metadata and
importlib.resources (agent/version.py reads the metadata file itself; checks/xid/policy.py
package_text), dataclasses and inspect (agent/records.py), shutil and tempfile (argparse's
formatter and agent/safeio/atomic.py, deferred), ipaddress (a config's listen address only),
pydantic (no longer used). Each run is a fresh interpreter, as the command line is."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import checks
from checks.xid.policy import package_text

REPO = Path(__file__).resolve().parents[2]

UNNEEDED = ("importlib.metadata", "importlib.resources", "zipfile", "email", "dataclasses",
            "inspect", "shutil", "tempfile", "ipaddress", "pydantic", "pydantic_core")

PROBE = """
import contextlib, io, json, sys
import agent.cli, agent.config, checks.registry
from agent.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["check", "--bundle", "tests/fixtures/bundles/full-healthy-dra"])
from checks.policy import default_policy_data
default_policy_data(2)
loaded = sorted(m for m in sys.modules if m in UNNEEDED or m.split(".")[0] in UNNEEDED)
print(json.dumps({"code": code, "verdict": out.getvalue().splitlines()[-1], "loaded": loaded}))
"""


def probe(unneeded=UNNEEDED) -> dict:
    out = subprocess.run([sys.executable, "-c", f"UNNEEDED = {unneeded!r}\n" + PROBE], cwd=REPO,
                         capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


def test_a_one_shot_check_imports_none_of_what_it_does_not_need() -> None:
    got = probe()
    assert (got["code"], got["verdict"]) == (0, "gate dra: OPEN")  # the fixture's verdict
    assert got["loaded"] == []


def test_the_probe_sees_a_module_the_check_does_import() -> None:
    # The same probe, asked about modules a check needs (YAML, the containerd TOML parser):
    # an empty list above is then the probe's finding, not a probe that sees nothing.
    got = probe(("yaml", "tomllib", "tomli"))
    assert "yaml" in got["loaded"]
    assert {"tomllib", "tomli"} & set(got["loaded"])


def test_package_text_reads_the_checks_package_file() -> None:
    on_disk = (Path(checks.__file__).parent / "policy_v1.yaml").read_text(encoding="utf-8")
    assert package_text("policy_v1.yaml") == on_disk
    assert "version" in on_disk  # a policy file, not an empty one


def test_package_text_of_a_missing_file_raises() -> None:
    with pytest.raises(OSError):
        package_text("policy_v999.yaml")
