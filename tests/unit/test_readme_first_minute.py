"""The README's first screen: a newcomer sees a pass and a fail without a GPU, with commands
that work as typed after the first set-up command; nothing links outside the repository."""
import re
import shlex
import subprocess
import sys

from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _try_block():
    section = README.split("## Try it in a minute, without a GPU", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def test_the_try_it_section_is_on_the_first_screen():
    line = README[: README.index("## Try it in a minute, without a GPU")].count("\n")
    assert line < 50, line


def test_every_try_it_command_works_as_typed_and_exits_as_the_readme_says():
    commands = [ln[2:] for ln in _try_block().splitlines() if ln.startswith("$ ")]
    assert len(commands) == 3
    seen = set()
    for command in commands:
        words = shlex.split(command, comments=True)
        # Typed after `python3 -m venv .venv && .venv/bin/pip install -q .`: the venv's script.
        assert words[0] == ".venv/bin/gpu-node-agent", command
        want = re.search(r"# exit (\d)", command)
        proc = subprocess.run([sys.executable, "-m", "agent.cli", *words[1:]], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert proc.stderr == ""
        assert proc.returncode == (int(want.group(1)) if want else 0), command
        seen.add(proc.returncode)
        if "demo-kubelet-too-old" in command:
            assert proc.stdout.splitlines()[-1] == "gate dra: CLOSED (blocking: kubelet-version)"
            assert "kubelet 1.33.5 is below 1.34.2 required for DRA" in proc.stdout
            assert "fix: Install kubelet 1.34.2 or newer" in proc.stdout
        if "demo-ready" in command:
            assert proc.stdout.splitlines()[-1] == "gate dra: OPEN"
    assert seen == {0, 1}


def test_the_readme_links_only_inside_the_repository():
    assert "DESIGN.md" not in README
    for target in re.findall(r"\]\(([^)]+)\)", README):
        assert not re.match(r"[a-z]+:", target), target  # no URL
        path = (REPO / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(REPO) if hasattr(path, "is_relative_to") else \
            str(path).startswith(str(REPO)), target
        assert path.exists(), target


def test_the_exit_code_contract_lists_every_code():
    table = README.split("### Exit codes", 1)[1].split("\n### ", 1)[0]
    codes = re.findall(r"^\| (\d) \|", table, re.M)
    assert codes == ["0", "1", "2", "3", "4"]
    assert "wins over 4" in table
