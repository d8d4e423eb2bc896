"""The Prometheus text format 0.0.4, written by hand: families, escaping, numbers.

https://prometheus.io/docs/instrumenting/exposition_formats/ : HELP text escapes backslash
and newline; label values escape backslash, double quote and newline; NaN and +Inf/-Inf are
spelled that way. agent/outputs/metrics.py and metrics_gpu.py say which series exist.
"""
import math
from typing import Any, Iterable, List, Mapping, Optional, Tuple

P = "gpu_node_agent_"
Labels = Tuple[Tuple[str, str], ...]


class Writer:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def family(self, name: str, mtype: str, help_text: str,
               samples: Iterable[Tuple[Labels, Optional[float]]]) -> None:
        rows = [(labels, v) for labels, v in samples if v is not None]
        if not rows:
            return  # an info series with nothing known is left out, not emitted empty
        full = P + name
        self.lines.append(f"# HELP {full} {escape_help(help_text)}")
        self.lines.append(f"# TYPE {full} {mtype}")
        for labels, value in rows:
            label_text = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels)
            series = f"{full}{{{label_text}}}" if labels else full
            self.lines.append(f"{series} {number(value)}")

    def body(self) -> bytes:
        # "replace": a lone surrogate (JSON "\ud800" in a snapshot string) has no UTF-8 form.
        return ("\n".join(self.lines) + "\n").encode("utf-8", "replace")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: Optional[float]) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"  # the text format's spelling
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def as_float(value: Any) -> Optional[float]:
    """A number from the snapshot, or None (not reported by NVML for this GPU, or not a
    number a float can hold: the snapshot is input and JSON integers have no bound)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data
