"""The sticky-fault store: faults that must outlive an agent restart, keyed by boot id.

One JSON file, ``<state_dir>/sticky.json`` (config ``state_dir``, default
/var/lib/gpu-node-agent). Only ``run`` (the daemon) and ``clear`` write it, each under an
exclusive ``flock`` on ``<state_dir>/sticky.lock`` and always as read-modify-write of the file
as it is on disk, so a ``clear`` that lands between two daemon cycles is never written back
over. Writes are atomic: a temp file in the same directory, fsync, rename, fsync of the
directory (the sequence rename(2) and fsync(2) need for a crash to leave old or new, never
half). A missing, unreadable or corrupt file is logged and replaced by a fresh state; the
agent never crashes on it. A state written under another boot id is dropped (a reboot clears
every sticky fault).

Besides faults the file keeps ``clears``: who cleared which GPU when, and up to which kernel
timestamp. A one-shot ``check`` scans the kernel log since boot; the clear watermark is what
stops it from finding the cleared XID again.
"""

import contextlib
import fcntl
import json
import os
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

from agent.safeio.atomic import write_atomic
from agent.safeio.bounded import CONFIG_CAP, read_bytes_capped
from agent.xid.state_schema import SCHEMA_VERSION, valid_state

DEFAULT_STATE_DIR = "/var/lib/gpu-node-agent"
STATE_FILE = "sticky.json"
LOCK_FILE = "sticky.lock"
MAX_CLEARS = 100  # the audit trail in the file; the log keeps everything
MAX_FAULTS = 1024  # per boot; one per (GPU, kind, code), so this is never reached honestly



def _log() -> Any:
    # logging (with string's Template) is imported on the first message: a one-shot `check`
    # imports this module for sticky_path and the state's shape and never logs from it.
    import logging

    return logging.getLogger("gpu-node-agent").getChild("state")


def sticky_path(config: Any = None) -> str:
    """The state file for a config (None = the default state_dir)."""
    return os.path.join(getattr(config, "state_dir", None) or DEFAULT_STATE_DIR, STATE_FILE)


def empty_state(boot_id: Optional[str]) -> Dict[str, Any]:
    return {"version": SCHEMA_VERSION, "boot_id": boot_id, "faults": [], "clears": []}


def monotonic_us() -> int:
    """Now, on the clock the kernel log's timestamps use (printk's local_clock tracks
    CLOCK_MONOTONIC on servers that do not suspend)."""
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1_000_000)


def read_state_file(path: str) -> Optional[Dict[str, Any]]:
    """The state as a host fact (no lock: writes are atomic renames). A missing file is an
    empty state (nothing was ever recorded); a corrupt one is None (unknown)."""
    try:
        data = json.loads(read_bytes_capped(path, CONFIG_CAP).decode("utf-8"))
    except FileNotFoundError:
        return empty_state(None)
    except (OSError, ValueError):
        return None
    return data if valid_state(data) else None


class StateStore:
    def __init__(self, state_dir: str, boot_id: Optional[str]) -> None:
        self.dir = state_dir
        self.path = os.path.join(state_dir, STATE_FILE)
        self.lock_path = os.path.join(state_dir, LOCK_FILE)
        self.boot_id = boot_id
        self.corrupt = False  # the last load() found a file it could not use

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def load(self) -> Dict[str, Any]:
        """The state for this boot; never raises. Call with the lock held to then save."""
        self.corrupt = False
        try:
            raw = read_bytes_capped(self.path, CONFIG_CAP)
            data: Dict[str, Any] = json.loads(raw.decode("utf-8"))
        except FileNotFoundError:
            return empty_state(self.boot_id)
        except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSON errors too
            self.corrupt = not isinstance(exc, PermissionError)
            _log().warning(
                "sticky state unreadable, starting fresh",
                extra={"fields": {"path": self.path, "error": f"{type(exc).__name__}: {exc}"}},
            )
            return empty_state(self.boot_id)
        if not valid_state(data):
            self.corrupt = True
            _log().warning(
                "sticky state corrupt (unexpected shape or field type), starting fresh",
                extra={"fields": {"path": self.path}},
            )
            return empty_state(self.boot_id)
        if self.boot_id is None or data.get("boot_id") is None:
            # Without both boot ids nobody can tell whether the host rebooted since the file
            # was written: keep every fault (a reboot clears them; an unreadable id must not).
            if self.boot_id is None and data.get("faults"):
                _log().warning(
                    "boot id unreadable: sticky faults kept, a reboot cannot be detected",
                    extra={"fields": {"path": self.path, "faults": len(data["faults"])}},
                )
            if data.get("boot_id") is None:
                data["boot_id"] = self.boot_id
            return data
        if data.get("boot_id") != self.boot_id:
            if data.get("faults"):
                _log().info(
                    "new boot: sticky faults of the previous boot dropped",
                    extra={
                        "fields": {
                            "previous_boot_id": data.get("boot_id"),
                            "boot_id": self.boot_id,
                            "faults": len(data["faults"]),
                        }
                    },
                )
            return empty_state(self.boot_id)
        return data

    def save(self, state: Mapping[str, Any]) -> None:
        """Atomic replace; raises OSError (the caller logs it and keeps its memory copy)."""
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        payload = dict(state)
        payload["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = json.dumps(payload, indent=1, sort_keys=True) + "\n"
        write_atomic(self.path, text.encode("utf-8"), prefix=".sticky.")

    def update(self, change: Callable[[Dict[str, Any]], Any]) -> Dict[str, Any]:
        """Lock, load what is on disk, apply ``change``, save. Returns the new state."""
        with self.locked():
            state = self.load()
            if self.corrupt:  # kept aside for a post-mortem, then replaced by a fresh file
                with contextlib.suppress(OSError):
                    os.replace(self.path, self.path + ".corrupt")
            change(state)
            del state["faults"][MAX_FAULTS:]
            del state["clears"][:-MAX_CLEARS]
            self.save(state)
            return state


# -- what the file holds ------------------------------------------------------------------
def gpu_matches(selector: str, gpu: Mapping[str, Any], pcis: List[str]) -> bool:
    """Whether a clear's selector ("all", an index, a UUID, a PCI key) names this GPU."""
    if selector == "all":
        return True
    if gpu.get("pci") and (gpu["pci"] in pcis or gpu["pci"] == selector.lower()):
        return True
    if gpu.get("uuid") and str(gpu["uuid"]).lower() == selector.lower():
        return True
    return gpu.get("index") is not None and str(gpu["index"]) == selector


def cleared(
    state: Mapping[str, Any],
    gpu: Mapping[str, Any],
    klass: str,
    mono_us: Optional[int],
    wall: Optional[float],
) -> bool:
    """Whether a fault on ``gpu`` at that time is covered by a clear or an observed reset."""
    for clear in state.get("clears", ()):
        classes = clear.get("classes")
        if classes is not None and klass not in classes:
            continue  # an observed reset does not clear a fault that needs a reboot
        if not gpu_matches(str(clear.get("selector", "")), gpu, list(clear.get("pci") or [])):
            continue
        if mono_us is not None and clear.get("mono_us") is not None:
            if mono_us <= int(clear["mono_us"]):
                return True
        elif wall is not None and clear.get("at") is not None:
            if wall <= float(clear["at"]):
                return True
        elif mono_us is None and wall is None:
            return True  # an undated line cannot be newer than the clear
    return False


def fault_key(fault: Mapping[str, Any]) -> str:
    gpu = fault.get("gpu") or {}
    ident = gpu.get("pci") or gpu.get("uuid") or gpu.get("index")
    return f"{ident}|{fault.get('kind')}|{fault.get('code')}"


def add_fault(state: Dict[str, Any], fault: Dict[str, Any]) -> bool:
    """Merge a fault in (count, last seen); False when a clear already covers it."""
    if cleared(
        state,
        fault.get("gpu") or {},
        str(fault.get("class")),
        fault.get("last_mono_us"),
        fault.get("last_at"),
    ):
        return False
    key = fault_key(fault)
    for old in state["faults"]:
        if fault_key(old) == key:
            old["count"] = int(old.get("count", 1)) + int(fault.get("count", 1))
            for field in ("last_mono_us", "last_at", "message"):
                if fault.get(field) is not None:
                    old[field] = fault[field]
            for field in ("index", "uuid"):
                if (fault.get("gpu") or {}).get(field) is not None:
                    old.setdefault("gpu", {})[field] = fault["gpu"][field]
            return True
    state["faults"].append(dict(fault))
    return True


def add_clear(
    state: Dict[str, Any],
    selector: str,
    by: str,
    reason: str,
    classes: Optional[List[str]] = None,
    mono_us: Optional[int] = None,
    at: Optional[float] = None,
) -> List[Dict[str, Any]]:
    """Record a clear (operator) or an observed reset; drop the faults it covers. Returns them."""
    pcis = sorted(
        {
            str((f.get("gpu") or {}).get("pci"))
            for f in state["faults"]
            if (f.get("gpu") or {}).get("pci") and gpu_matches(selector, f.get("gpu") or {}, [])
        }
    )
    record = {
        "selector": selector,
        "pci": pcis,
        "by": by,
        "reason": reason,
        "mono_us": monotonic_us() if mono_us is None else mono_us,
        "at": time.time() if at is None else at,
        "classes": classes,
    }
    state["clears"].append(record)
    removed = [
        f
        for f in state["faults"]
        if (classes is None or f.get("class") in classes)
        and gpu_matches(selector, f.get("gpu") or {}, pcis)
    ]
    state["faults"] = [f for f in state["faults"] if f not in removed]
    return removed
