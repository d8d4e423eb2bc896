"""containerd-nvidia-runtime: the effective containerd config has the configured runtime
handler (default `nvidia`), of type io.containerd.runc.v2, whose BinaryName is an existing
executable (the NVIDIA Container Runtime that injects the GPUs).
"""

import posixpath
from typing import Any, Dict, List, Optional

from checks.base import RUNTIME_HANDLER_PATHS, Check, Interval, Outcome, Severity, failed, passed
from checks.containerd_config import (
    DEFAULT_CONFIG,
    DROPIN_GLOBS,
    defines_handler,
    discover,
    dropin_candidates,
    parse_toml,
    read_config,
    table,
)
from checks.containerd_effective import Context, View, decide, fatal, nodeadm_fix, resolve
from checks.containerd_installed import DPKG_STATUS, VERSION_ARGVS, dump_argv

RUNC_V2 = "io.containerd.runc.v2"
# The runc v2 shim looks a bare BinaryName up on its PATH (containerd's default service PATH).
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _missing(ctx: Context, view: View) -> Outcome:
    details: Dict[str, Any] = {**ctx.details(), "source": view.source, "loaded": view.loaded}
    own = view.own
    handler = ctx.handler
    if own is not None and view.major == 1:
        winner = own.plugin_owner.get(own.cri_key())
        definers = [p for p in own.loaded if defines_handler(own.files.get(p, {}), handler)]
        if winner and definers and winner not in definers:
            details.update(defined_in=definers, cri_table_from=winner)
            return failed(
                f"runtime handler '{handler}' is defined in {definers[-1]} but containerd "
                f"{view.major}.x replaces the whole CRI plugin table with the one in {winner} "
                "(imported after it), which does not define it",
                "containerd 1.x does not merge drop-ins: keep every CRI setting, including the "
                f"'{handler}' runtime, in the one file that is imported last ({winner}), or "
                "upgrade to containerd 2.x (deep merge)."
                + (" " + nodeadm_fix(handler) if ctx.nodeadm else ""),
                **details,
            )
    loaded = set(view.loaded) | set(own.loaded if own else [])
    for path in dropin_candidates(ctx.host, ctx.config_path):
        if path in loaded:
            continue
        data, _ = parse_toml(read_config(ctx.host, path) or "", path)
        if data is not None and defines_handler(data, handler):
            root = own.files.get(ctx.config_path, {}) if own else {}
            imports = root.get("imports") if isinstance(root.get("imports"), list) else []
            details.update(defined_in=[path], root_imports=imports)
            fix = (
                nodeadm_fix(handler)
                if ctx.nodeadm
                else (
                    f'Add "{posixpath.dirname(path)}/*.toml" to `imports` in {ctx.config_path} '
                    f"(or move {path} into an imported directory) and restart containerd; "
                    "nvidia-ctk 1.18.1+ writes conf.d/, 1.18.0 wrote config.d/."
                )
            )
            return failed(
                f"runtime handler '{handler}' is defined in {path}, which is not imported: "
                f"{ctx.config_path} "
                + (f"imports only {imports}" if imports else "has no imports"),
                fix,
                **details,
            )
    if own is not None and own.root_missing and view.source.startswith("own"):
        return failed(
            f"{ctx.config_path} absent: containerd runs on its built-in defaults, which have no "
            f"'{handler}' runtime handler",
            "Run `nvidia-ctk runtime configure --runtime=containerd` (NVIDIA Container Toolkit) "
            "and restart containerd." + (" " + nodeadm_fix(handler) if ctx.nodeadm else ""),
            **details,
        )
    return failed(
        f"no runtime handler '{handler}' in containerd's effective config ({view.source})",
        "Run `nvidia-ctk runtime configure --runtime=containerd` (NVIDIA Container Toolkit) and "
        "restart containerd." + (" " + nodeadm_fix(handler) if ctx.nodeadm else ""),
        **details,
    )


def _binary(host: Any, name: str) -> Optional[str]:
    candidates: List[str] = (
        [name] if name.startswith("/") else [posixpath.join(d, name) for d in SEARCH_PATH]
    )
    return next((c for c in candidates if host.is_executable(c)), None)


def _evaluate(ctx: Context, view: View) -> Outcome:
    bad = fatal(ctx, view)
    if bad is not None:
        return bad
    runtime = table(view.cri, "containerd", "runtimes").get(ctx.handler)
    if runtime is None:
        return _missing(ctx, view)
    details: Dict[str, Any] = {**ctx.details(), "source": view.source, "loaded": view.loaded}
    if not isinstance(runtime, dict):
        return failed(f"runtime handler '{ctx.handler}' is not a table", **details)
    rtype = runtime.get("runtime_type")
    name = table(runtime, "options").get("BinaryName")
    details.update(runtime_type=rtype, binary_name=name)
    if rtype != RUNC_V2:
        return failed(
            f"runtime handler '{ctx.handler}' has runtime_type {rtype!r}, not {RUNC_V2!r}",
            f"Set runtime_type = \"{RUNC_V2}\" for the '{ctx.handler}' runtime and restart "
            "containerd.",
            **details,
        )
    if not isinstance(name, str) or not name:
        return failed(
            f"runtime handler '{ctx.handler}' has no options.BinaryName: it runs plain runc, "
            "which does not inject GPUs",
            'Set options.BinaryName = "/usr/bin/nvidia-container-runtime" (or re-run '
            "`nvidia-ctk runtime configure --runtime=containerd`) and restart containerd.",
            **details,
        )
    found = _binary(ctx.host, name)
    if found is None:
        return failed(
            f"runtime handler '{ctx.handler}' names BinaryName {name}, which is not an "
            "executable on this host",
            "Install the NVIDIA Container Toolkit (it provides /usr/bin/nvidia-container-runtime) "
            "or correct BinaryName, then restart containerd.",
            **details,
        )
    details["binary_path"] = found
    return passed(
        f"runtime handler '{ctx.handler}' ({RUNC_V2}, {found}) in the effective config "
        f"({view.source})",
        **details,
    )


def _run(host: Any, policy: Any) -> Outcome:
    return decide(resolve(host, policy), _evaluate)


CONTAINERD_NVIDIA_RUNTIME = Check(
    id="containerd-nvidia-runtime",
    title="containerd's effective config has the NVIDIA runtime handler",
    severity=Severity.CRITICAL,
    gates=RUNTIME_HANDLER_PATHS,
    interval=Interval.SLOW,
    remediation=(
        "Configure the NVIDIA runtime in containerd (`nvidia-ctk runtime configure "
        "--runtime=containerd`), make sure the file it writes is imported by "
        "/etc/containerd/config.toml, and restart containerd; on nodeadm hosts put it in the "
        "NodeConfig's spec.containerd.config instead."
    ),
    run=_run,
    reads=(DEFAULT_CONFIG, DPKG_STATUS) + DROPIN_GLOBS + ("/etc/containerd/*.toml",),
    presence=("/usr/bin/nodeadm", "/usr/local/bin/nodeadm", "/usr/bin/nvidia-container-runtime"),
    runs=VERSION_ARGVS + tuple(dump_argv(a[0], DEFAULT_CONFIG) for a in VERSION_ARGVS),
    discover=discover,
    timeout_s=30.0,
)
