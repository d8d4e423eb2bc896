"""time-sync against a real chronyd (Debian's chrony, unpacked by .ci/setup.d/40-chrony.sh).

A `local stratum 3` server on a loopback port and `-x` clients (chronyd never touches this
machine's clock with -x: chronyd(8)), each with its own config, pid file, drift file and
command socket in a private temp dir. The check reads them through the Host seam: a command
source that sends `chronyc ...` to the client's socket (`chronyc -h SOCKET ...`) and answers
"not installed" for everything else, so this machine's own daemons never leak in. Polling
is fast (minpoll = maxpoll = -4, 62.5 ms) so the reach register empties in half a second.
Every wait is bounded; every chronyd is stopped by its PID.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import pytest

from agent.config import Config
from agent.host.live import adjtimex
from agent.host.seam import Host, StaticFacts
from agent.hostview import CommandResult
from agent.safeio.commands import SubprocessCommands
from checks.policy import ResolvedPolicy, load_policy
from checks.time.time_sync import TIME_SYNC
from tests.components import component

pytestmark = pytest.mark.integration

# Debian's chronyd and chronyc unpacked by .ci/setup.d/40-chrony.sh (never this machine's own):
# looked up per test, so a missing chrony skips (or, under GNA_REQUIRE_COMPONENTS=1, fails)
# each test that needs it.

POLL = -4  # log2 seconds: 62.5 ms
POLL_S = 2.0 ** POLL
REACH_POLLS = 4  # the check's default window
# pass -> fail after the server stops: the window (4 polls) plus scheduling slack.
STOP_BOUND_S = REACH_POLLS * POLL_S + 1.0


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Chronyd:
    """One chronyd -x in the foreground (-d), so the Popen PID is chronyd itself."""

    def __init__(self, workdir: Path, name: str, lines: List[str]) -> None:
        self.dir = workdir / name
        sockdir = self.dir / "sock"
        sockdir.mkdir(parents=True)
        os.chmod(sockdir, 0o700)  # chronyd refuses a socket dir others can write to
        self.socket = str(sockdir / "chronyd.sock")
        conf = self.dir / "chrony.conf"
        conf.write_text("\n".join(lines + [
            "cmdport 0",
            f"bindcmdaddress {self.socket}",
            f"pidfile {self.dir / 'chronyd.pid'}",
            f"driftfile {self.dir / 'drift'}",
        ]) + "\n")
        # As root, -u root keeps chronyd from dropping to _chrony (which cannot reach a
        # private temp dir); otherwise -U skips the root check (chronyd(8)).
        user = ["-u", "root"] if os.geteuid() == 0 else ["-U"]
        self.log = open(self.dir / "chronyd.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc: Optional[subprocess.Popen] = subprocess.Popen(
            [component("chronyd"), "-x", "-d", *user, "-f", str(conf)],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_for_socket(5.0)

    def _wait_for_socket(self, bound: float) -> None:
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            if os.path.exists(self.socket) and self.chronyc("-c", "tracking").returncode == 0:
                return
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"chronyd did not come up: {(self.dir / 'chronyd.log').read_text()}")

    def chronyc(self, *args: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run([component("chronyc"), "-h", self.socket, *args], capture_output=True,
                              text=True, timeout=5, check=False)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()  # by PID: Popen signals exactly the process it started
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None
        self.log.close()


class ChronycToSocket:
    """A command source: `chronyc ARGS` goes to one chronyd's socket, nothing else runs."""

    def __init__(self, sock: str) -> None:
        self.sock = sock
        self.real = SubprocessCommands()
        self.seen: List[tuple] = []

    def run(self, argv, timeout):
        asked = tuple(argv)
        self.seen.append(asked)
        if argv and argv[0] == "chronyc":
            args = list(argv[1:]) if "-h" in argv else ["-h", self.sock, *argv[1:]]
            res = self.real.run([component("chronyc"), *args], timeout)
            # Answer as the argv asked (collect records the result under res.argv).
            return CommandResult(asked, res.rc, res.stdout, res.stderr, res.timed_out)
        return CommandResult(asked, 127, "", f"{argv[0]}: not run in this test")


def evaluate(sock: str, configured: bool = False):
    """time-sync through the Host seam; this machine's real kernel state as the fact."""
    commands = ChronycToSocket(sock)
    settings = Config.model_validate(
        {"time_sync": {"chrony_socket": sock} if configured else {}}).model_dump()
    host = Host("/", commands=commands, facts=StaticFacts({"adjtimex": adjtimex()}))
    out = TIME_SYNC.run(host, ResolvedPolicy(load_policy(), "dra", settings=settings))
    return out, commands.seen


def wait_for(sock: str, status: str, bound: float):
    deadline = time.monotonic() + bound
    while True:
        out, _ = evaluate(sock)
        if str(out.status) == status or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


@pytest.fixture
def workdir():
    path = Path(tempfile.mkdtemp(prefix="gna-chrony-"))  # short: socket paths max 108 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(workdir):
    port = free_udp_port()
    d = Chronyd(workdir, "server", [f"port {port}", "bindaddress 127.0.0.1",
                                    "local stratum 3", "allow 127.0.0.1"])
    d.port = port  # type: ignore[attr-defined]
    yield d
    d.stop()


def client(workdir: Path, name: str, port: int) -> Chronyd:
    return Chronyd(workdir, name, [
        f"server 127.0.0.1 port {port} minpoll {POLL} maxpoll {POLL} iburst", "port 0"])


def test_synced_client_passes_and_the_local_server_warns(workdir, server):
    c = client(workdir, "client", server.port)
    try:
        out = wait_for(c.socket, "pass", 10.0)
        assert str(out.status) == "pass", out.summary
        assert out.details["daemon"] == "chrony" and out.details["source"] == "127.0.0.1"
        assert out.details["stratum"] == 4  # one above the server's `local stratum 3`
        # The configured-socket feature: the check itself runs `chronyc -h SOCKET ...`.
        out2, seen = evaluate(c.socket, configured=True)
        assert str(out2.status) == "pass", out2.summary
        assert ("chronyc", "-h", c.socket, "-c", "tracking") in seen
        # The server is only synchronised to its own clock.
        local, _ = evaluate(server.socket)
        assert str(local.status) == "warn" and "local stratum 3" in local.summary
    finally:
        c.stop()


def test_client_pointed_at_a_dead_port_fails(workdir, server):
    dead_port = free_udp_port()
    assert dead_port != server.port
    c = client(workdir, "dead", dead_port)
    try:
        time.sleep(8 * POLL_S + 0.5)  # a full reach register's worth of polls, all unanswered
        out, _ = evaluate(c.socket)
        assert str(out.status) == "fail", out.summary
        assert "not synchronised" in out.summary and "reach 000" in out.summary
    finally:
        c.stop()


def test_pass_turns_to_fail_within_the_bound_after_the_server_stops(workdir, server):
    c = client(workdir, "client", server.port)
    try:
        assert str(wait_for(c.socket, "pass", 10.0).status) == "pass"
        stopped = time.monotonic()  # from the signal: chronyd stops answering before it exits
        server.stop()
        out = wait_for(c.socket, "fail", STOP_BOUND_S + 2.0)
        elapsed = time.monotonic() - stopped
        print(f"{out.summary}: time-sync pass -> fail {elapsed:.2f} s after the server stopped "
              f"(poll {POLL_S * 1000:.1f} ms, window {REACH_POLLS} polls, bound {STOP_BOUND_S} s)")
        assert str(out.status) == "fail", out.summary
        assert elapsed <= STOP_BOUND_S, f"{elapsed:.2f} s > {STOP_BOUND_S} s: {out.summary}"
        # chronyd's own tracking report still says Normal: the verdict came from the sources.
        tracking = c.chronyc("-c", "tracking").stdout
        assert tracking.strip().endswith(",Normal"), tracking
    finally:
        c.stop()


def test_collected_bundle_replays_the_live_verdict(workdir, server):
    """collect records exactly what the check declares, so the bundle judges the same."""
    from agent.host.bundle import load_bundle
    from agent.host.collect import collect

    c = client(workdir, "client", server.port)
    try:
        assert str(wait_for(c.socket, "pass", 10.0).status) == "pass"
        host = Host("/", commands=ChronycToSocket(c.socket),
                    facts=StaticFacts({"adjtimex": adjtimex()}))
        out_dir = collect(host, [TIME_SYNC], str(workdir / "bundle"))
    finally:
        c.stop()
    loaded = load_bundle(out_dir)
    try:
        policy = ResolvedPolicy(load_policy(), "dra", settings=Config().model_dump())
        replay = TIME_SYNC.run(loaded.host, policy)
    finally:
        loaded.close()
    assert str(replay.status) == "pass", replay.summary
    assert replay.details["source"] == "127.0.0.1"
