"""agent/version.py reads the Version header of the distribution's own metadata file, found
in sys.path order as importlib.metadata finds it, without importing importlib.metadata."""
import sys
from importlib import metadata

from agent import version as v


def _dist(root, dirname, filename, text):
    d = root / dirname
    d.mkdir()
    (d / filename).write_text(text)


def test_the_installed_version_is_what_importlib_metadata_says():
    v.version.cache_clear()
    try:
        assert v.version() == metadata.version("gpu-node-agent")
    finally:
        v.version.cache_clear()


def test_first_path_entry_wins_and_only_the_headers_count(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    # another distribution whose name merely starts the same is not ours
    _dist(first, "gpu_node_agent_tools-5.0.dist-info", "METADATA", "Name: x\nVersion: 5.0\n")
    _dist(first, "gpu_node_agent-9.8.7.dist-info", "METADATA",
          "Metadata-Version: 2.4\nName: gpu-node-agent\nVersion: 9.8.7\n\nVersion: 1.0\n")
    _dist(second, "gpu_node_agent.egg-info", "PKG-INFO", "Name: gpu-node-agent\nVersion: 2.0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(first), str(second)])
    assert v._from_metadata_file() == "9.8.7"
    monkeypatch.setattr(sys, "path", [str(second), str(first)])
    assert v._from_metadata_file() == "2.0"  # an egg-info (setup.py develop) in PKG-INFO


def test_a_header_block_without_version_is_not_a_version(tmp_path, monkeypatch):
    _dist(tmp_path, "gpu_node_agent-1.dist-info", "METADATA", "Name: gpu-node-agent\n\nVersion: 3\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert v._from_metadata_file() is None


def test_a_fifo_named_metadata_is_skipped_not_waited_on(tmp_path, monkeypatch):
    import os

    d = tmp_path / "gpu_node_agent-1.dist-info"
    d.mkdir()
    os.mkfifo(d / "METADATA")
    _dist(tmp_path, "gpu_node_agent.egg-info", "PKG-INFO", "Name: gpu-node-agent\nVersion: 4.2\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert v._from_metadata_file() == "4.2"
