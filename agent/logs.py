"""Structured one-line logs to stderr (logfmt: ts=... level=... msg="..." key=value).

One record per line so journald keeps it whole and `journalctl -o cat | grep level=error`
works; the key=value form is the one Prometheus' own components write (go-kit log).
"""
import logging
import sys
import time
from typing import Any, Mapping, Optional

LOGGER_NAME = "gpu-node-agent"


def _quote(value: Any) -> str:
    text = str(value)
    if text and not any(ch in text for ch in ' ="\\\n\t') and text.isprintable():
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"msg={_quote(record.getMessage())}",
        ]
        fields: Optional[Mapping[str, Any]] = getattr(record, "fields", None)
        for key, value in (fields or {}).items():
            parts.append(f"{key}={_quote(value)}")
        if record.exc_info and record.levelno >= logging.ERROR:
            exc = record.exc_info[1]
            parts.append(f"error={_quote(f'{type(exc).__name__}: {exc}')}")
        return " ".join(parts)


def setup(debug: bool = False) -> logging.Logger:
    """One logfmt handler on the root logger, so every module's records (agent.kube.*, the
    XID monitor, libraries) come out in the same one-line format."""
    root = logging.getLogger()
    if not any(getattr(h, "_gna", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(LogfmtFormatter())
        handler._gna = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    return logger


def log(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    logger.log(level, msg, extra={"fields": fields})
