"""`--help` is laid out as wide as argparse's own formatter would lay it out: agent/cli_parser.py
finds the width without importing shutil, and shutil.get_terminal_size (what argparse's
HelpFormatter asks) is the oracle, asked in the same environment."""
import argparse
import shutil

import pytest

from agent.cli_parser import _columns, _Help


@pytest.mark.parametrize("columns", ["50", "120", "0", "-3", "abc", "", None])
def test_the_width_is_shutils(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _columns() == shutil.get_terminal_size().columns


def test_help_text_is_the_stock_formatters(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")

    def parser(formatter):
        p = argparse.ArgumentParser(prog="gpu-node-agent", formatter_class=formatter,
                                    description="Validate a GPU host against a policy before "
                                                "it takes Kubernetes GPU work.")
        p.add_argument("--path", metavar="P", help="allocation path: device-plugin, dra, "
                       "operator-clusterpolicy or operator-gpucluster (default from config)")
        return p.format_help()

    ours = parser(_Help)
    assert ours == parser(argparse.HelpFormatter)
    lines = ours.splitlines()
    assert max(len(line) for line in lines) <= 58 < len(" ".join(lines))  # COLUMNS - 2, wrapped
