"""The agent's configuration file (YAML, pydantic models).

A missing *default* file means built-in defaults; a file named explicitly must exist. A
malformed file is one line naming the file, the field and the problem (ConfigError), and
the command line exits 2. Unknown keys are errors: a typo must not silently do nothing.
"""
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.model import PATHS

DEFAULT_CONFIG_PATH = "/etc/gpu-node-agent/config.yaml"

AllocationPath = Literal["device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"]
assert set(AllocationPath.__args__) == set(PATHS)  # type: ignore[attr-defined]


class ConfigError(Exception):
    """One line: file, field, problem."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContainerdConfig(_Section):
    # The runtime handler pods ask for (RuntimeClass.handler); nvidia-ctk writes "nvidia".
    handler: str = Field(default="nvidia", min_length=1)
    config_path: str = "/etc/containerd/config.toml"


class CdiConfig(_Section):
    # A host with no NVIDIA CDI spec passes cdi-spec-current unless this is true.
    require_spec: bool = False


class Config(_Section):
    # DRA is what AWS recommends for new EKS 1.34+ GPU deployments (EKS user guide,
    # "Manage NVIDIA GPU devices with DRA"), so it is the default path.
    allocation_path: AllocationPath = "dra"
    policy_version: int = Field(default=1, ge=1)
    policy: Dict[str, Any] = {}
    expected_gpus: Optional[int] = Field(default=None, ge=0, le=64)
    skip: List[str] = []
    state_dir: str = "/var/lib/gpu-node-agent"
    containerd: ContainerdConfig = ContainerdConfig()
    cdi: CdiConfig = CdiConfig()


def _describe(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
    extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"field '{loc}': {err.get('msg', 'invalid')}{extra}"


def parse_config(text: str, origin: str) -> Config:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{origin}:{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping at the top level")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_describe(exc)}") from None


def load_config(path: Optional[str]) -> "tuple[Config, Optional[str]]":
    """The config and the file it came from (None = built-in defaults)."""
    explicit = path is not None
    target = Path(path or DEFAULT_CONFIG_PATH)
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{target}: no such file") from None
        return Config(), None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{target}: unreadable ({exc})") from None
    return parse_config(text, str(target)), str(target)


def policy_error(exc: Exception, origin: str) -> ConfigError:
    if isinstance(exc, ValidationError):
        return ConfigError(f"{origin}: policy {_describe(exc)}")
    return ConfigError(f"{origin}: {exc}")
