"""containerd 2.1 (Debian forky's, unpacked by .ci/setup.d/30-containerd.sh, not installed)
beside 1.6 and 1.7: the binary is the 2.1 series and its `config dump` reads a minimal
version-3 config and migrates a version-2 one, so later 2.x oracle tests stand on a real
daemon's reading.

Expectations from containerd's documentation (docs/cri/config.md and RELEASES.md of
containerd 2.x): config version 3 is the 2.x format; the CRI runtime settings live under
`plugins."io.containerd.cri.v1.runtime"` (in version 2 under `plugins."io.containerd.grpc.v1.cri"`);
`enable_cdi` defaults to true from 2.0; the default runtime is `runc`.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.containerd.support import binary_version, containerd_21

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.integration
RUNTIME = "io.containerd.cri.v1.runtime"


def dump(binary: str, config: Path) -> dict:
    proc = subprocess.run([binary, "--config", str(config), "config", "dump"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


def test_it_is_containerd_21():
    words = (binary_version(containerd_21()) or "").split()
    # "containerd github.com/containerd/containerd/v2 2.1.9+unknown": 2.x's Go module path ends in /v2
    assert words[:2] == ["containerd", "github.com/containerd/containerd/v2"], words
    assert words[2].startswith("2.1."), words


def test_config_dump_reads_a_minimal_version_3_config(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'version = 3\nroot = "{tmp_path}/root"\nstate = "{tmp_path}/state"\n')
    real = dump(containerd_21(), config)
    assert real["version"] == 3
    assert real["root"] == f"{tmp_path}/root" and real["state"] == f"{tmp_path}/state"
    runtime = real["plugins"][RUNTIME]
    assert runtime["enable_cdi"] is True  # the 2.x default
    assert runtime["containerd"]["default_runtime_name"] == "runc"
    # `config dump` only reads: it creates neither the root nor the state directory.
    assert not (tmp_path / "root").exists() and not (tmp_path / "state").exists()


def test_config_dump_migrates_version_2(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'version = 2\nroot = "{tmp_path}/root"\nstate = "{tmp_path}/state"\n'
                      '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n')
    real = dump(containerd_21(), config)
    assert real["version"] == 3
    assert real["plugins"][RUNTIME]["enable_cdi"] is False  # our value, moved to its v3 table
    assert "io.containerd.grpc.v1.cri" not in real["plugins"] or \
        "enable_cdi" not in real["plugins"]["io.containerd.grpc.v1.cri"]
