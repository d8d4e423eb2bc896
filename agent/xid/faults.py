"""The sticky faults the XID monitor records: one from XIDs of one GPU and code, one from a
rise in a GPU's volatile uncorrectable ECC count.

The record's fields are the state file's (agent/xid/state_schema.py holds their types);
how a new record merges into the file, and which clear covers it, is agent/xid/state.py's
``add_fault`` and ``cleared``.
"""

import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.snapshot import pci_key
from agent.xid.events import XidEvent
from agent.xid.state import monotonic_us


def fault_record(first: XidEvent, last: XidEvent, count: int, klass: str) -> Dict[str, Any]:
    now = time.time()
    return {
        "gpu": first.gpu(),
        "kind": "xid",
        "code": first.code,
        "class": klass,
        "source": last.source,
        "first_mono_us": first.mono_us,
        "last_mono_us": last.mono_us,
        "first_at": first.wall if first.wall is not None else now,
        "last_at": last.wall if last.wall is not None else now,
        "count": count,
        "message": last.message,
    }


def ecc_readings(snapshot: Optional[Mapping[str, Any]]) -> List[Tuple[Dict[str, Any], int]]:
    """(gpu, volatile uncorrectable ECC count) for every GPU that reports one."""
    out = []
    for gpu in (snapshot or {}).get("gpus") or ():
        ecc = (gpu.get("ecc") or {}) if isinstance(gpu, Mapping) else {}
        unc = (ecc.get("volatile") or {}).get("uncorrected")
        key = pci_key(gpu.get("pci_bus_id")) if isinstance(gpu, Mapping) else None
        if isinstance(unc, int) and key:
            out.append(({"pci": key, "index": gpu.get("index"), "uuid": gpu.get("uuid")}, unc))
    return out


def ecc_fault(gpu: Dict[str, Any], unc: int) -> Dict[str, Any]:
    """A sticky ECC fault: volatile uncorrectable errors went up (gpu-ecc's fail condition).
    It stays until a reset is observed, a reboot or `clear`, because the volatile counters
    can read 0 again after the driver re-initialises the GPU without persistence mode."""
    now = monotonic_us()
    return {
        "gpu": gpu,
        "kind": "ecc",
        "code": None,
        "class": "reset-gpu",
        "source": "nvml",
        "first_mono_us": now,
        "last_mono_us": now,
        "first_at": time.time(),
        "last_at": time.time(),
        "count": 1,
        "volatile_uncorrected": unc,
        "message": f"{unc} volatile uncorrectable ECC error(s)",
    }
