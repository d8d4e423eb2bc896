"""The README keeps its two set-up commands (its check table is generated: see
tests/unit/test_check_docs_drift.py)."""
from tests.conftest import REPO


def test_readme_keeps_exactly_two_setup_commands():
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in block.splitlines() if line.startswith("    ") or line.startswith("$ ")]
    assert len([c for c in commands if c.strip()]) == 2, commands
    assert "$ python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/gpu-node-agent check" in commands
    assert "$ bash scripts/test-all" in commands
