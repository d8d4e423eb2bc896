"""`gpu-node-agent clear <index|uuid|pci|all>`: the operator's way to clear a sticky GPU fault.

Besides a reboot (new boot id) and a GPU reset the agent observes, this is the only thing
that clears one. It takes the state file's lock, so a running daemon (which writes under the
same lock, on top of what is on disk) never writes the cleared fault back. It records who and
when in the state file's ``clears`` and in the log; the clear's kernel timestamp is what keeps
a later `check` from failing again on the same kernel-log lines.
"""

import logging
import os
import pwd
import re
from typing import Any, List, Optional

from agent.errors import UsageError
from agent.xid.state import StateStore, add_clear

log = logging.getLogger("gpu-node-agent").getChild("clear")
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Fa-f-]{8,}$")


class ClearUsageError(UsageError, ValueError):
    """A `clear` target that names no GPU: one line, exit 2 (a ValueError, as it always was)."""


def who() -> str:
    """The operator: the sudo caller when there is one, and the effective uid."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    sudo = os.environ.get("SUDO_USER")
    return f"{sudo} (via sudo as {name})" if sudo and sudo != name else f"{name} (uid {uid})"


def validate(target: str) -> str:
    """all, an index, a UUID, or a PCI bus id (normalised to the kernel log's "0000:9b:00"),
    which names a GPU even when NVML cannot (one that fell off the bus)."""
    from agent.snapshot import pci_key

    if target == "all" or target.isdigit() or _UUID.match(target):
        return target
    if ":" in target and pci_key(target):
        return str(pci_key(target))
    raise ClearUsageError(f"clear: expected a GPU index, UUID, PCI bus id or 'all', not {target!r}")


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> Optional[str]:
    """This boot's id; None when unreadable (then the state keeps every sticky fault)."""
    from agent.safeio.bounded import read_text_capped

    try:
        return read_text_capped(path, 4096).strip() or None
    except OSError:
        return None


def clear(target: str, state_dir: str, by: Optional[str] = None, boot: Optional[str] = None) -> Any:
    """Returns the faults removed."""
    selector = validate(target)
    store = StateStore(state_dir, boot if boot is not None else boot_id())
    removed: List[Any] = []
    operator = by or who()

    def change(state: Any) -> None:
        removed.extend(add_clear(state, selector, operator, "operator clear"))

    store.update(change)
    log.warning(
        "sticky GPU faults cleared by an operator",
        extra={
            "fields": {
                "selector": selector,
                "by": operator,
                "removed": len(removed),
                "faults": ",".join(
                    f"{(f.get('gpu') or {}).get('pci')}:{f.get('kind')}:{f.get('code')}"
                    for f in removed
                ),
            }
        },
    )
    return removed
