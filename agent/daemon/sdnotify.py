"""sd_notify(3) without libsystemd: one datagram per message to $NOTIFY_SOCKET.

The protocol is newline-separated KEY=VALUE assignments in one AF_UNIX datagram; a socket
name starting with "@" is in the abstract namespace (sd_notify(3), "NOTES"). The watchdog
period comes from $WATCHDOG_USEC, meant for us only if $WATCHDOG_PID is unset or our PID
(sd_watchdog_enabled(3)); systemd recommends pinging at half the period.
"""
import os
import socket
from typing import Mapping, Optional


class Notifier:
    def __init__(self, env: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if env is None else env
        path = env.get("NOTIFY_SOCKET") or ""
        self.address: Optional[str] = None
        if path.startswith("@"):
            self.address = "\0" + path[1:]
        elif path.startswith("/"):
            self.address = path
        self.watchdog_s: Optional[float] = None
        usec, pid = env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID")
        if usec and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_s = int(usec) / 1e6
        self._sock: Optional[socket.socket] = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str) -> bool:
        """Send KEY=VALUE lines (keys upper-cased); False when not under systemd or it failed."""
        if self.address is None:
            return False
        text = "\n".join(f"{k.upper()}={' '.join(str(v).split())}" for k, v in fields.items())
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(text.encode("utf-8"), self.address)
            return True
        except OSError:
            return False  # systemd went away or the socket is gone: nothing useful to do

    def ready(self, status: str) -> bool:
        return self.send(READY="1", STATUS=status)

    def status(self, status: str) -> bool:
        return self.send(STATUS=status)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG="1")

    def stopping(self) -> bool:
        return self.send(STOPPING="1", STATUS="stopping")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
