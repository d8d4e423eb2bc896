"""pytest-testinfra verification of a converged host (the prometheus-community roles' verify
step): files, modes, owners, the unit file, and the config as the installed agent reads it.

`verify(host, prefix, ...)` takes a testinfra Host (the local backend in the integration test)
and the root prefix the role wrote into.
"""
from typing import Any

VENV = "/opt/gpu-node-agent/venv"
BIN = f"{VENV}/bin/gpu-node-agent"
CONFIG = "/etc/gpu-node-agent/config.yaml"
UNIT = "/etc/systemd/system/gpu-node-agent.service"


def verify(host: Any, prefix: str, allocation_path: str, repo_unit: str) -> None:
    p = prefix.rstrip("/")

    agent = host.file(p + BIN)
    assert agent.is_file and agent.mode & 0o111, f"{p + BIN} is not an executable file"
    link = host.file(p + "/usr/local/bin/gpu-node-agent")
    # A host path, valid once the prefix is the root (testinfra's linked_to resolves it here).
    assert link.is_symlink and host.check_output("readlink %s", link.path) == BIN

    for directory, mode in ((p + "/etc/gpu-node-agent", 0o755), (p + "/var/lib/gpu-node-agent", 0o700)):
        d = host.file(directory)
        assert d.is_directory and d.user == "root" and d.group == "root", directory
        assert d.mode == mode, f"{directory}: mode {d.mode:o}, expected {mode:o}"

    config = host.file(p + CONFIG)
    assert config.is_file and config.user == "root" and config.group == "root"
    assert config.mode == 0o640, f"config mode {config.mode:o}"
    assert f"allocation_path: {allocation_path}\n" in config.content_string
    # The installed agent itself accepts the file, and reads the path the role wrote.
    valid = host.run(f"{p + BIN} config validate {p + CONFIG}")
    assert valid.rc == 0, valid.stderr
    shown = host.run(f"{p + BIN} config show --config {p + CONFIG}")
    assert shown.rc == 0 and f"allocation_path: {allocation_path}" in shown.stdout

    unit = host.file(p + UNIT)
    assert unit.is_file and unit.user == "root" and unit.mode == 0o644
    # systemd reads the last line only when the file ends with a newline (a real one).
    assert unit.content_string.endswith("\n") and not unit.content_string.endswith("\\n\n")
    written = unit.content_string.splitlines()
    source = host.file(repo_unit).content_string.splitlines()
    assert len(written) == len(source)
    for got, want in zip(written, source):
        if want.startswith("ExecStart="):
            # Only the command's path changes: the venv's, with the same arguments.
            assert got.startswith("ExecStart=") and BIN in got, got
            assert got.split(BIN, 1)[1] == want.split("gpu-node-agent", 1)[1], (got, want)
        else:
            assert got == want
