"""Redacted containerd configs held against containerd's own parser (1.6, 1.7, 2.1: Debian's
packages, unpacked by .ci/setup.d/30-containerd.sh). For each planted config and for each form
collect can write (line-redacted, re-emitted): containerd accepts it, and its `config dump`
of the redacted file is its dump of the original with the secrets replaced, so a bundle's
config says to containerd what the host's said."""
import subprocess
import sys
from pathlib import Path

import pytest

from agent.host.redact import redact_data, redact_file
from agent.host.redact_secrets import REDACTED
from agent.host.redact_toml import emit_toml
from tests.collect_hostile import dump_output, plan
from tests.integration.containerd.support import containerd

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.integration


def _configs():
    planted = plan()
    root = planted.files["/etc/containerd/config.toml"]
    # containerd stops on an import that does not exist: the file is judged on its own.
    root = "\n".join("imports = []" if ln.startswith("imports") else ln for ln in root.splitlines())
    return planted, {
        "config.toml": root + "\n",
        "50-registry.toml": planted.files["/etc/containerd/conf.d/50-registry.toml"],
        # A config dump fed back as a config: the output collect records in commands.yaml.
        "dump.toml": dump_output(),
    }


def _dump(binary: str, text: str, tmp: Path) -> dict:
    cfg = tmp / "c.toml"
    cfg.write_text(text)
    res = subprocess.run([binary, "--config", str(cfg), "config", "dump"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, f"containerd refused:\n{text}\n{res.stderr}"
    return tomllib.loads(res.stdout)


@pytest.mark.parametrize("series", ["1.6", "1.7", "2.1"])
def test_redacted_configs_parse_in_containerd_as_the_originals_did(series, tmp_path):
    binary = containerd(series)
    planted, configs = _configs()
    canaries = list(planted.forms.values())
    for name, original in configs.items():
        expected = redact_data(_dump(binary, original, tmp_path))
        line_redacted = redact_file(f"/etc/containerd/{name}", original)
        re_emitted = emit_toml(redact_data(tomllib.loads(original)))
        for form, text in (("as collect writes it", line_redacted), ("re-emitted", re_emitted)):
            assert not [c for c in canaries if c in text], (name, form)
            assert REDACTED in text, (name, form)
            got = _dump(binary, text, tmp_path)
            assert got == expected, (name, form)
