"""The CI switch that keeps real-component tests from vanishing (tests/component_hooks.py,
tests/components.py): under GNA_REQUIRE_COMPONENTS=1 a missing component, or any other skip of
an integration test, fails the run; outside it they skip; the per-component count names what
ran. Each case runs a small pytest session in a child process over files written here."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

MISSING_21 = '''
import pytest
from tests.components import component
pytestmark = pytest.mark.integration
def test_needs_21():
    component("containerd-2.1")
'''


def session(tmp_path: Path, files, **env):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    integration: real component\n")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("GNA_REQUIRE", "GNA_EXPECT", "GNA_COMPONENT_", "PYTEST_"))}
    child_env.update(PYTHONPATH=str(REPO), **env)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "tests.component_hooks", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=child_env, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def test_missing_component_skips_outside_ci(tmp_path):
    rc, out = session(tmp_path, {"tests/integration/test_a.py": MISSING_21},
                      GNA_COMPONENT_CONTAINERD_2_1="")
    assert rc == 0, out
    assert "component containerd-2.1: 0 run (0 passed, 0 failed), 1 skipped" in out


def test_missing_component_fails_under_the_switch(tmp_path):
    rc, out = session(tmp_path, {"tests/integration/test_a.py": MISSING_21},
                      GNA_COMPONENT_CONTAINERD_2_1="", GNA_REQUIRE_COMPONENTS="1")
    assert rc == 1, out
    assert "required component containerd-2.1 missing" in out
    assert "component containerd-2.1: 1 run (0 passed, 1 failed), 0 skipped" in out


def test_present_component_is_counted(tmp_path):
    fake = tmp_path / "bin" / "containerd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    rc, out = session(tmp_path, {"tests/integration/test_a.py": MISSING_21},
                      GNA_COMPONENT_CONTAINERD_2_1=str(fake), GNA_REQUIRE_COMPONENTS="1",
                      GNA_EXPECT_COMPONENTS="containerd-2.1")
    assert rc == 0, out
    assert "component containerd-2.1: 1 run (1 passed, 0 failed), 0 skipped" in out


def test_any_integration_skip_fails_under_the_switch_but_environment_skips_stay(tmp_path):
    files = {"tests/integration/test_b.py": '''
import pytest
pytestmark = pytest.mark.integration
def test_plain_skip():
    pytest.skip("grpcio missing")
def test_kernel_too_old():
    pytest.skip("PR_SET_MDWE needs Linux 6.3+")
''', "tests/unit/test_c.py": '''
import pytest
def test_unit_skip_is_not_ours():
    pytest.skip("not an integration test")
'''}
    rc, out = session(tmp_path, files, GNA_REQUIRE_COMPONENTS="1")
    assert rc == 1, out
    assert "1 failed, 2 skipped" in out
    assert "skipped under GNA_REQUIRE_COMPONENTS=1" in out and "grpcio missing" in out


def test_module_skipped_at_import_fails_the_run_under_the_switch(tmp_path):
    files = {"tests/integration/test_d.py": '''
import pytest
pytest.importorskip("gna_no_such_module", reason="client library missing")
'''}
    rc, out = session(tmp_path, files, GNA_REQUIRE_COMPONENTS="1")
    assert rc == 1, out
    assert "tests/integration/test_d.py" in out and "skipped at import" in out
    rc, out = session(tmp_path, {}, GNA_REQUIRE_COMPONENTS="")
    assert rc == 5 and "skipped at import" not in out, out  # pytest's own "no tests ran"


@pytest.mark.parametrize("ran", [False, True])
def test_an_expected_component_with_no_test_run_fails(tmp_path, ran):
    files = {"tests/integration/test_e.py": '''
import pytest
from tests.components import record
pytestmark = pytest.mark.integration
def test_other():
    record("prometheus")
'''}
    rc, out = session(tmp_path, files, GNA_REQUIRE_COMPONENTS="1",
                      GNA_EXPECT_COMPONENTS="prometheus" + ("" if ran else " chrony"))
    if ran:
        assert rc == 0, out
    else:
        assert rc == 1, out
        assert "component chrony: expected (GNA_EXPECT_COMPONENTS) but no test ran: failing" in out
    assert "component prometheus: 1 run (1 passed, 0 failed), 0 skipped" in out
