"""toolkit-runtime-config: the NVIDIA Container Runtime's own config agrees with how the
allocation path hands GPUs to containers (policy version 2).

/etc/nvidia-container-runtime/config.toml (NVIDIA/nvidia-container-toolkit
internal/config/config.go; `nvidia-ctk config default` prints it with the defaults commented):
- top level ``accept-nvidia-visible-devices-envvar-when-unprivileged`` (default true): when
  false the runtime ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers;
- top level ``accept-nvidia-visible-devices-as-volume-mounts`` (default false): when true the
  runtime reads the device list from mounts under /var/run/nvidia-container-devices;
- ``[nvidia-container-runtime] mode`` (default "auto"; "legacy", "cdi", "csv"): in "cdi" mode
  the runtime resolves NVIDIA_VISIBLE_DEVICES values as CDI device names of the default kind
  nvidia.com/gpu (internal/modifier/cdi.go) instead of running the legacy hook.

The device plugin passes its allocation by ``deviceListStrategy`` (NVIDIA/k8s-device-plugin
README, "deviceListStrategy": envvar, the default; volume-mounts; cdi-annotations; cdi-cri),
set here as ``toolkit.device_list_strategy`` in the agent config. The rules
(docs/decisions.md, "toolkit-runtime-config"):
- DRA paths: containerd injects the DRA driver's CDI devices itself (CRI CDIDevices), so the
  runtime's mode and envvar settings do not decide whether the GPU arrives: reported, passed;
- device-plugin paths: envvar needs ``...envvar-when-unprivileged`` true and a mode other
  than "cdi" (the device plugin's envvar values are GPU UUIDs by default, deviceIDStrategy
  uuid, not the CDI names `nvidia-ctk cdi generate` writes by index); volume-mounts needs
  ``...as-volume-mounts`` true; cdi-annotations and cdi-cri name CDI devices themselves.
"""
from typing import Any, Dict, Optional

from checks.base import (
    DRA_PATHS,
    RUNTIME_HANDLER_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    input_missing,
    passed,
    skipped,
    unknown,
)
from checks.containerd.cdi_specs import HOST_WIDE_KIND, SPEC_GLOBS, device_names, load_specs
from checks.containerd.config import parse_toml, read_config
from checks.operator.state import toolkit_owned
from checks.policy import ResolvedPolicy

CONFIG = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
ENVVAR_REFUSED = "toolkit-runtime-envvar-refused"
CDI_MODE_ENVVAR = "toolkit-runtime-cdi-mode-envvar"
MOUNTS_REFUSED = "toolkit-runtime-volume-mounts-refused"
INVALID = "toolkit-runtime-config-invalid"
SRC_CONFIG = ("NVIDIA/nvidia-container-toolkit internal/config/config.go (`nvidia-ctk config "
              "default`: accept-nvidia-visible-devices-envvar-when-unprivileged = true, "
              "accept-nvidia-visible-devices-as-volume-mounts = false, "
              "[nvidia-container-runtime] mode = \"auto\")")
SRC_PLUGIN = "NVIDIA/k8s-device-plugin README, \"deviceListStrategy\""
MAX_MODE_SHOWN = 64


def _settings(data: Dict[str, Any]) -> Dict[str, Any]:
    runtime = data.get("nvidia-container-runtime")
    mode = runtime.get("mode", "auto") if isinstance(runtime, dict) else "auto"
    return {"mode": mode,
            ENVVAR_KEY: data.get(ENVVAR_KEY, True),
            MOUNTS_KEY: data.get(MOUNTS_KEY, False)}


def _toml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _strategy(policy: ResolvedPolicy) -> str:
    section = policy.setting("toolkit")
    value = section.get("device_list_strategy") if isinstance(section, dict) else None
    return value if value in STRATEGIES else "envvar"


def uuid_named_gpus(host: HostView) -> bool:
    """Whether the host's nvidia.com/gpu CDI specs name GPUs by UUID ("GPU-..."): what the
    device plugin puts in NVIDIA_VISIBLE_DEVICES (deviceIDStrategy uuid, its default), and what
    cdi mode then looks up as nvidia.com/gpu=<value>. `nvidia-ctk cdi generate
    --device-name-strategy` decides the names (index unless told, uuid too when given)."""
    return any(name.startswith("GPU-")
               for spec in load_specs(host)
               if spec.data is not None and spec.kind == HOST_WIDE_KIND
               for name in device_names(spec.data))


def _judge(found: Dict[str, Any], strategy: str, where: str,
           uuid_named: bool = False) -> Optional[Outcome]:
    details = dict(found, device_list_strategy=strategy, config=where)
    if strategy == "envvar" and found[ENVVAR_KEY] is not True:
        return failed(f"{where}: {ENVVAR_KEY} = {_toml(found[ENVVAR_KEY])}, so the runtime ignores "
                      f"NVIDIA_VISIBLE_DEVICES in unprivileged pods, and the device plugin "
                      f"passes GPUs that way (deviceListStrategy envvar): pods start without "
                      f"their GPUs", code=ENVVAR_REFUSED, **details)
    if strategy == "envvar" and found["mode"] == "cdi" and not uuid_named:
        return failed(f"{where}: mode = \"cdi\" resolves NVIDIA_VISIBLE_DEVICES as CDI names "
                      f"(nvidia.com/gpu=<value>), and the device plugin passes GPU ids there "
                      f"(deviceListStrategy envvar) and no NVIDIA CDI spec names GPUs by "
                      f"UUID: use a CDI strategy, mode \"auto\", or a spec generated with "
                      f"--device-name-strategy=uuid",
                      code=CDI_MODE_ENVVAR, **details)
    if strategy == "volume-mounts" and found[MOUNTS_KEY] is not True:
        return failed(f"{where}: {MOUNTS_KEY} = {_toml(found[MOUNTS_KEY])}, so the runtime ignores "
                      f"the device plugin's /var/run/nvidia-container-devices mounts "
                      f"(deviceListStrategy volume-mounts)", code=MOUNTS_REFUSED, **details)
    return None


def _runtime_config(host: HostView, policy: ResolvedPolicy) -> Outcome:
    if toolkit_owned(policy):
        return skipped(f"the GPU Operator installs and configures the toolkit on the "
                       f"{policy.path} path (its toolkit and device-plugin settings)")
    text = read_config(host, CONFIG)
    if text is None:
        found, where = _settings({}), f"{CONFIG} absent (the toolkit's defaults)"
    else:
        data, problem = parse_toml(text, CONFIG)
        if data is None:
            return unknown(f"cannot judge the NVIDIA Container Runtime's config: {problem}",
                           code=INVALID, config=CONFIG)
        found, where = _settings(data), CONFIG
    if not isinstance(found["mode"], str) or not all(
            isinstance(found[k], bool) for k in (ENVVAR_KEY, MOUNTS_KEY)):
        return unknown(f"{CONFIG}: mode must be a string and the accept-* keys booleans",
                       code=INVALID, config=CONFIG)
    # The toolkit's modes are short words; a hostile file's mode is shown cut (its verdict is
    # the same: only "cdi" is judged, and a longer string is not "cdi").
    found["mode"] = found["mode"][:MAX_MODE_SHOWN]
    if policy.path in DRA_PATHS and text is None:
        return input_missing(f"no {CONFIG}: on the {policy.path} path containerd injects the "
                             f"DRA driver's CDI devices itself", config=CONFIG)
    if policy.path in DRA_PATHS:
        return passed(f"runtime mode {found['mode']!r} ({where}): on the {policy.path} path "
                      f"containerd injects the DRA driver's CDI devices itself, so the mode "
                      f"does not decide whether GPUs arrive", **found, config=where)
    strategy = _strategy(policy)
    verdict = _judge(found, strategy, where, uuid_named_gpus(host))
    if verdict is not None:
        return verdict
    if text is None:
        # The toolkit's packages write the file at install (`nvidia-ctk config default`):
        # its absence is no evidence the runtime is set up, only that the defaults would do.
        return input_missing(f"{where} serve the device plugin's deviceListStrategy "
                             f"{strategy}; nothing on the host to judge", config=CONFIG)
    return passed(f"runtime mode {found['mode']!r}, {ENVVAR_KEY} = "
                  f"{str(found[ENVVAR_KEY]).lower()}, {MOUNTS_KEY} = "
                  f"{str(found[MOUNTS_KEY]).lower()} ({where}) serve the device plugin's "
                  f"deviceListStrategy {strategy}", **found, device_list_strategy=strategy,
                  config=where)


TOOLKIT_RUNTIME_CONFIG = Check(
    id="toolkit-runtime-config",
    title="NVIDIA Container Runtime config matches the device plugin's device-list strategy",
    severity=Severity.CRITICAL,
    # It runs on every path and gates the device-plugin ones: on DRA paths it only reports.
    gates=RUNTIME_HANDLER_PATHS,
    interval=Interval.BOOTSTRAP,
    remediation=(
        "Make /etc/nvidia-container-runtime/config.toml serve the device plugin's "
        "deviceListStrategy (`nvidia-ctk config --set KEY=VALUE --in-place`), or set "
        "toolkit.device_list_strategy in the agent config to the strategy the plugin runs with."
    ),
    run=_runtime_config,
    reads=(CONFIG,) + SPEC_GLOBS,
    timeout_s=5.0,
    since_policy=2,
    failures=(
        Failure(ENVVAR_REFUSED, Status.FAIL,
                "the device plugin passes GPUs in NVIDIA_VISIBLE_DEVICES and the runtime "
                "ignores it in unprivileged containers",
                "`nvidia-ctk config --set accept-nvidia-visible-devices-envvar-when-"
                "unprivileged=true --in-place`, or run the device plugin with "
                "deviceListStrategy volume-mounts (and accept-nvidia-visible-devices-as-"
                "volume-mounts = true) and set toolkit.device_list_strategy to match.",
                f"{SRC_CONFIG}; {SRC_PLUGIN}"),
        Failure(CDI_MODE_ENVVAR, Status.FAIL,
                "the runtime is in cdi mode and the device plugin passes GPU ids in "
                "NVIDIA_VISIBLE_DEVICES, which cdi mode reads as CDI device names",
                "Set `[nvidia-container-runtime] mode = \"auto\"`, or run the device plugin "
                "with deviceListStrategy cdi-cri (or cdi-annotations) and set "
                "toolkit.device_list_strategy to match.",
                f"{SRC_CONFIG}; NVIDIA/nvidia-container-toolkit internal/modifier/cdi.go; "
                f"{SRC_PLUGIN}"),
        Failure(MOUNTS_REFUSED, Status.FAIL,
                "the device plugin passes GPUs as volume mounts and the runtime does not "
                "accept them (accept-nvidia-visible-devices-as-volume-mounts false)",
                "`nvidia-ctk config --set accept-nvidia-visible-devices-as-volume-mounts=true "
                "--in-place`, or set toolkit.device_list_strategy to what the plugin runs with.",
                f"{SRC_CONFIG}; {SRC_PLUGIN}"),
        Failure(INVALID, Status.UNKNOWN,
                "the NVIDIA Container Runtime's config.toml is not valid TOML or holds values "
                "of the wrong type",
                "Repair /etc/nvidia-container-runtime/config.toml (`nvidia-ctk config default` "
                "prints a valid one).",
                SRC_CONFIG),
    ),
)
