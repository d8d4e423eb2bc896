"""The agent's configuration file (YAML, records of agent/safeio/schema.py).

A missing *default* file means built-in defaults; a file named explicitly must exist. A
malformed file is one line naming the file, the field and the problem (ConfigError), and
the command line exits 2. Unknown keys are errors: a typo must not silently do nothing.
"""
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from agent.config_sections import (
    AllocationPath,
    CdiConfig,
    ContainerdConfig,
    GpuConfig,
    KubeConfig,
    NfdConfig,
    RunConfig,
    SiteChecksConfig,
    TimeSyncConfig,
    ToolkitConfig,
    WorkloadConfig,
    _Section,
    listen_address_problem,
)
from agent.errors import ConfigError
from agent.model import LATEST_POLICY_VERSION
from agent.safeio.bounded import CONFIG_CAP, read_bytes_capped
from agent.safeio.schema import Field, ValidationError
from agent.safeio.yamlio import safe_load
from checks.fabric.policy import ImexConfig

__all__ = ["Config", "ConfigError", "KubeConfig", "listen_address_problem", "load_config",
           "parse_config"]

DEFAULT_CONFIG_PATH = "/etc/gpu-node-agent/config.yaml"


class Config(_Section):
    # DRA is what AWS recommends for new EKS 1.34+ GPU deployments (EKS user guide,
    # "Manage NVIDIA GPU devices with DRA"), so it is the default path.
    allocation_path: AllocationPath = "dra"
    # Unset: the newest policy this agent knows; pin it to keep a version's gates.
    policy_version: int = Field(default=LATEST_POLICY_VERSION, ge=1)
    policy: Dict[str, Any] = {}
    expected_gpus: Optional[int] = Field(default=None, ge=0, le=64)
    skip: List[str] = []
    state_dir: str = "/var/lib/gpu-node-agent"
    containerd: ContainerdConfig = ContainerdConfig()
    cdi: CdiConfig = CdiConfig()
    time_sync: TimeSyncConfig = TimeSyncConfig()
    run: RunConfig = RunConfig()
    gpu: GpuConfig = GpuConfig()
    kube: KubeConfig = KubeConfig()
    nfd: NfdConfig = NfdConfig()
    imex: ImexConfig = ImexConfig()  # checks/fabric/policy.py, docs/config.md
    toolkit: ToolkitConfig = ToolkitConfig()  # toolkit-runtime-config, docs/config.md
    site_checks: SiteChecksConfig = SiteChecksConfig()  # docs/site-checks.md
    workload: WorkloadConfig = WorkloadConfig()  # docs/workload.md


def _describe(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
    extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"field '{loc}': {err.get('msg', 'invalid')}{extra}"


def parse_config(text: str, origin: str) -> Config:
    try:
        data = safe_load(text)
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
        # A regular file only (a FIFO never blocks the open, /dev/zero is refused), capped.
        text = read_bytes_capped(target, CONFIG_CAP).decode("utf-8")
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{target}: no such file") from None
        return Config(), None
    except OSError as exc:
        raise ConfigError(f"{target}: unreadable ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{target}: unreadable (not UTF-8 at byte {exc.start})") from None
    return parse_config(text, str(target)), str(target)


def run_file_problems(config: Config, origin: Optional[str]) -> List[str]:
    """What `run` would refuse at start or fail on every cycle, one line each: a web config
    file that is missing or invalid, a textfile directory that does not exist."""
    where = origin or "built-in config"
    problems: List[str] = []
    web = config.run.web_config_file
    if web:
        from agent.outputs.webconfig import WebConfigError, load_web_config

        if not os.path.isfile(web):
            problems.append(f"{where}: field 'run.web_config_file': {web}: no such file")
        else:
            try:
                load_web_config(web)
            except WebConfigError as exc:
                problems.append(f"{where}: field 'run.web_config_file': {exc}")
    textfile = config.run.textfile_dir
    if textfile and not os.path.isdir(textfile):
        problems.append(f"{where}: field 'run.textfile_dir': {textfile}: no such directory")
    return problems


def policy_error(exc: Exception, origin: str) -> ConfigError:
    if isinstance(exc, ValidationError):
        return ConfigError(f"{origin}: policy {_describe(exc)}")
    return ConfigError(f"{origin}: {exc}")
