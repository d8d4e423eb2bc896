"""The README's check table is generated from the registry and must not drift."""
import importlib.util

from tests.conftest import REPO


def _module():
    spec = importlib.util.spec_from_file_location("check_table", REPO / "scripts/check_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_check_table_matches_the_registry():
    from checks.registry import ALL_CHECKS

    mod = _module()
    readme = (REPO / "README.md").read_text()
    assert mod.render(readme) == readme, "run: python scripts/check_table.py"
    for check in ALL_CHECKS:
        assert f"| `{check.id}` |" in readme


def test_readme_keeps_exactly_two_setup_commands():
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in block.splitlines() if line.startswith("    ") or line.startswith("$ ")]
    assert len([c for c in commands if c.strip()]) == 2, commands
