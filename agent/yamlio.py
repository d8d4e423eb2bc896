"""YAML loading through libyaml's C loader when PyYAML was built with it (the pure-Python
loader costs ~30 ms per small file, most of a one-shot `check` on a bundle)."""
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader, C or Python)
