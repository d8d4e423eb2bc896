"""sd_notify over a real AF_UNIX datagram socket (the protocol systemd reads)."""
import os
import socket

from agent.daemon.sdnotify import Notifier


def _listener(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    return sock


def test_ready_status_watchdog_datagrams(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = _listener(path)
    try:
        n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000"})
        assert n.enabled and n.watchdog_s == 3.0
        assert n.ready("gate dra open;\n6 pass")
        assert sock.recv(4096) == b"READY=1\nSTATUS=gate dra open; 6 pass"
        assert n.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"
        assert n.stopping()
        assert sock.recv(4096) == b"STOPPING=1\nSTATUS=stopping"
        n.close()
    finally:
        sock.close()


def test_abstract_socket():
    name = f"gna-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).status("x")
        assert sock.recv(100) == b"STATUS=x"
    finally:
        sock.close()


def test_not_under_systemd_and_foreign_watchdog():
    n = Notifier({})
    assert not n.enabled and not n.ready("x") and n.watchdog_s is None
    other = Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"})
    assert other.watchdog_s is None  # the watchdog is for PID 1's service, not us
    assert not Notifier({"NOTIFY_SOCKET": "/nonexistent/sock"}).ready("x")  # no crash
