"""The XID policy: each code's class (the catalog's action) and thresholds, as data.

Defaults live in xid_policy_v1.yaml (every choice cited there); the config overrides any
field under ``policy: {xid: ...}``. checks.policy.Policy carries it as ``policy.xid``.
"""

import os
from typing import Any, Dict, Literal, Optional

from agent.safeio.schema import Field, Record
from agent.safeio.yamlio import safe_load

XidClass = Literal["ignore", "restart-app", "reset-gpu", "reboot"]
STICKY_CLASSES = ("reset-gpu", "reboot")
# What clears a sticky fault besides `gpu-node-agent clear` and a new boot id.
CLEARED_BY_RESET = ("reset-gpu",)


class _Strict(Record, frozen=True):
    """Unknown keys are refused."""


class Threshold(_Strict):
    count: int = Field(default=10, ge=1)
    window_s: int = Field(default=3600, ge=1)
    status: Literal["warn", "fail"] = "warn"


class XidCode(_Strict):
    klass: XidClass = Field(alias="class")
    catalog: str = ""
    why: str = ""
    threshold: Optional[Threshold] = None


class XidPolicy(_Strict):
    policy_version: int = 1
    source: str = ""
    default_class: XidClass = "restart-app"
    default_threshold: Threshold = Threshold()
    dedupe_window_s: float = Field(default=5.0, ge=0.0, le=3600.0)
    codes: Dict[int, XidCode] = {}

    def klass(self, code: int) -> str:
        entry = self.codes.get(code)
        return entry.klass if entry is not None else self.default_class

    def threshold(self, code: int) -> Threshold:
        entry = self.codes.get(code)
        if entry is not None and entry.threshold is not None:
            return entry.threshold
        return self.default_threshold

    def is_sticky(self, code: int) -> bool:
        return self.klass(code) in STICKY_CLASSES


def package_text(name: str) -> str:
    """The UTF-8 text of ``name``, a data file of the ``checks`` package, read through the
    package's loader the way pkgutil.get_data reads it (a directory or a zip, Python docs
    "pkgutil.get_data"). importlib.resources would read the same bytes, but importing it
    brings tempfile, zipfile and shutil into a one-shot `check` (docs/decisions.md)."""
    import checks

    loader = getattr(checks.__spec__, "loader", None)
    get_data = getattr(loader, "get_data", None)
    if get_data is None or not checks.__file__:
        raise FileNotFoundError(f"checks/{name}: the checks package has no loader to read it")
    data = get_data(os.path.join(os.path.dirname(checks.__file__), name))
    return bytes(data).decode("utf-8")


def default_xid_data(version: int = 1) -> Dict[str, Any]:
    text = package_text(f"xid_policy_v{version}.yaml")
    data = safe_load(text)
    assert isinstance(data, dict)
    return data


def merge_xid_data(overrides: Optional[Dict[str, Any]] = None, version: int = 1) -> Dict[str, Any]:
    """The defaults with ``overrides`` merged in (codes merge per code, fields per field)."""
    data = default_xid_data(version)
    for key, value in (overrides or {}).items():
        if key == "codes" and isinstance(value, dict):
            codes = dict(data.get("codes") or {})
            for code, entry in value.items():
                if isinstance(code, str) and code.isdigit():
                    code = int(code)  # "13" and 13 are one code; anything else: validation says
                base = codes.get(code, {})
                codes[code] = {**base, **entry} if isinstance(entry, dict) else entry
            data["codes"] = codes
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def load_xid_policy(overrides: Optional[Dict[str, Any]] = None, version: int = 1) -> XidPolicy:
    return XidPolicy.model_validate(merge_xid_data(overrides, version))
