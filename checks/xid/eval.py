"""Helpers for gpu-xid: the state of this boot, GPU names, count/window thresholds."""

from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.xid.events import GpuMap, XidEvent
from agent.xid.kmsg import parse_line
from agent.xid.state import cleared
from checks.base import HostView
from checks.xid.policy import STICKY_CLASSES, Threshold, XidPolicy


def uptime_us(host: HostView) -> Optional[int]:
    text = host.read_text_or_none("/proc/uptime")
    try:
        return int(float(text.split()[0]) * 1_000_000) if text else None
    except (ValueError, IndexError):
        return None


def gpu_name(gpu: Mapping[str, Any]) -> str:
    if gpu.get("index") is not None:
        return f"GPU {gpu['index']} ({gpu.get('pci') or gpu.get('uuid') or '?'})"
    return f"GPU {gpu.get('pci') or gpu.get('uuid') or '?'}"


def state_for_boot(sticky: Any, boot_id: Optional[str]) -> Dict[str, Any]:
    if not isinstance(sticky, Mapping):
        return {"faults": [], "clears": []}
    if sticky.get("boot_id") is not None and boot_id is not None and sticky["boot_id"] != boot_id:
        return {"faults": [], "clears": []}  # written in an earlier boot: a reboot clears all
    return {"faults": list(sticky.get("faults") or []), "clears": list(sticky.get("clears") or [])}


def over_threshold(
    events: List[XidEvent], xid: XidPolicy, now_us: Optional[int], now_wall: Optional[float]
) -> List[Tuple[str, int, int, Threshold]]:
    groups: Dict[Tuple[str, int], List[XidEvent]] = {}
    for ev in events:
        groups.setdefault((gpu_name(ev.gpu()), ev.code), []).append(ev)
    over = []
    for (gpu, code), evs in sorted(groups.items()):
        th = xid.threshold(code)
        recent = [
            e
            for e in evs
            if (
                (
                    e.mono_us is not None
                    and now_us is not None
                    and now_us - e.mono_us <= th.window_s * 1_000_000
                )
                or (
                    e.mono_us is None
                    and e.wall is not None
                    and now_wall is not None
                    and now_wall - e.wall <= th.window_s
                )
                or (e.mono_us is None and e.wall is None)
            )
        ]
        if len(recent) >= th.count:
            over.append((gpu, code, len(recent), th))
    return over


def recognised(lines: List[str]) -> bool:
    """Whether any line looks like a kernel log line (a timestamp prefix, a /dev/kmsg record,
    or the driver's NVRM tag): a file of garbage is not "no XID since boot"."""
    for text in lines:
        line = parse_line(text)
        if line.mono_us is not None or line.wall is not None or "NVRM" in line.message:
            return True
    return not any(text.strip() for text in lines)


Fatal = Dict[Tuple[str, int], Dict[str, Any]]


def add_state_faults(fatal: Fatal, state: Mapping[str, Any], gpus: GpuMap,
                     refs: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
    """The daemon's recorded sticky XID faults that nothing cleared, merged into ``fatal``
    (keyed by GPU name and code, like the kernel-log ones); ``refs`` learns each name's GPU."""
    for fault in state["faults"]:
        klass = str(fault.get("class"))
        if fault.get("kind") != "xid" or klass not in STICKY_CLASSES:
            continue
        gpu = fault.get("gpu") or {}
        if cleared(state, gpu, klass, fault.get("last_mono_us"), fault.get("last_at")):
            continue
        code = int(fault.get("code") or 0)
        ev = gpus.resolve(
            XidEvent(code=code, pci=gpu.get("pci"), index=gpu.get("index"), uuid=gpu.get("uuid"))
        )
        if refs is not None:
            refs.setdefault(gpu_name(ev.gpu()), ev.gpu())
        entry = fatal.setdefault(
            (gpu_name(ev.gpu()), code),
            {"class": klass, "count": 0, "message": fault.get("message")},
        )
        entry["count"] = max(entry["count"], int(fault.get("count") or 1))
        entry["sticky"] = True


def fatal_summary(fatal: Fatal) -> str:
    """'GPU 5 (0000:bb:00): XID 48, 95 x2 (needs a GPU reset); ...'"""
    per_gpu: Dict[str, List[str]] = {}
    for (g, c), v in sorted(fatal.items()):
        per_gpu.setdefault(g, []).append(f"{c}" + (f" x{v['count']}" if v["count"] > 1 else ""))
    parts = []
    for g, codes in per_gpu.items():
        klasses = {v["class"] for (gg, _), v in fatal.items() if gg == g}
        need = "needs a reboot" if "reboot" in klasses else "needs a GPU reset"
        parts.append(f"{g}: XID {', '.join(codes)} ({need})")
    return "; ".join(parts)[:300]
