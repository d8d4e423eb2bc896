"""NvmlClient failure paths that need no NVML at all: a worker that dies, and maintenance."""
import sys
from pathlib import Path

from agent.nvml.client import NvmlClient
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy

DRA = ResolvedPolicy(load_policy(2), "dra")


class _Host:
    def __init__(self, snap):
        self.snap = snap

    def gpus(self):
        return self.snap


def shell_worker_snapshot(tmp_path, script):
    """One snapshot through an "interpreter" that is the shell ``script`` (a worker that
    crashes on start, or says maintenance), and the client that took it, closed."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    client = NvmlClient(python=str(fake), first_deadline_s=10)
    try:
        return client.snapshot(), client
    finally:
        client.close()


def test_a_worker_that_dies_is_worker_failed_and_nvml_responsive_unknown(tmp_path):
    # An "interpreter" that exits 3 at once stands in for a worker that crashes on start.
    snap, client = shell_worker_snapshot(tmp_path, "echo 'boom: worker could not start' >&2\nexit 3\n")
    assert snap["error"]["kind"] == "worker_failed"
    assert "rc 3" in snap["error"]["message"] and "boom" in snap["error"]["message"]
    assert client.stats["worker_crashes"] == 1 and client.stats["timeouts"] == 0
    outcome = NVML_RESPONSIVE.run(_Host(snap), DRA)
    assert outcome.status.value == "unknown"  # the agent's failure is not a host verdict


def test_maintenance_before_any_worker_starts_none():
    client = NvmlClient(python=sys.executable)
    client.maintenance(True)
    snap = client.snapshot()
    assert snap["error"]["kind"] == "maintenance"
    assert client.stats["spawns"] == 0 and client.worker_pid is None
    assert NVML_RESPONSIVE.run(_Host(snap), DRA).status.value == "unknown"


def test_the_flag_file_and_the_api_are_independent(tmp_path):
    flag = tmp_path / "flag"
    client = NvmlClient(python=sys.executable, maintenance_flag=str(flag))
    client.maintenance(True)
    assert client.check_maintenance_flag() is True  # no flag file, but the API said so
    flag.write_text("")
    client.maintenance(False)
    assert client.check_maintenance_flag() is True  # the flag file still holds it
    flag.unlink()
    assert client.check_maintenance_flag() is False
    assert client.stats["spawns"] == 0


def test_the_worker_is_started_from_the_directory_that_holds_this_agent_package():
    # `python -m agent.nvml.worker` resolves against the child's working directory first
    # (sys.path[0] is the cwd under -m: docs.python.org/3/using/cmdline.html#cmdoption-m),
    # so that directory must hold this very `agent` package, not be the package itself.
    import agent
    from agent.nvml.process import WORKER_MODULE, package_parent

    parent = Path(package_parent()).resolve()
    assert parent / "agent" == Path(agent.__file__).resolve().parent
    assert (parent / (WORKER_MODULE.replace(".", "/") + ".py")).is_file()
