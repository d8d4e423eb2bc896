"""containerd-nvidia-runtime: the effective containerd config has the configured runtime
handler (default `nvidia`), of type io.containerd.runc.v2, whose BinaryName is an existing
executable (the NVIDIA Container Runtime that injects the GPUs).
"""

import posixpath
from typing import Any, Dict, List, Optional

from checks.base import (
    RUNTIME_HANDLER_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    passed,
    warned,
)
from checks.containerd.config import (
    DEFAULT_CONFIG,
    DROPIN_GLOBS,
    defines_handler,
    discover,
    dropin_candidates,
    parse_toml,
    read_config,
    table,
)
from checks.containerd.effective import (
    CONFIG_NOT_FOUND,
    CONFIG_UNLOADABLE,
    MERGE_SOURCE,
    VERSION_DECIDES,
    Context,
    View,
    decide,
    fatal,
    nodeadm_fix,
    resolve,
)
from checks.containerd.installed import DPKG_STATUS, VERSION_ARGVS, dump_argv
from checks.containerd.nodeadm_table import FIX as PARTIAL_FIX
from checks.containerd.nodeadm_table import describe, partial_cri_table
from checks.containerd.snap import RECORDS
from checks.policy import ResolvedPolicy

RUNC_V2 = "io.containerd.runc.v2"
# The runc v2 shim looks a bare BinaryName up on its PATH (containerd's default service PATH).
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
CONFIGURE = (
    "Run `nvidia-ctk runtime configure --runtime=containerd` (NVIDIA Container Toolkit) and "
    "restart containerd."
)
# containerd's CRI runtime options (docs/cri/config.md) and the NVIDIA Container Toolkit's
# `nvidia-ctk runtime configure`, which writes the handler these rules describe.
RUNTIME_SOURCE = (
    "containerd docs/cri/config.md (runtimes, runtime_type, options.BinaryName); "
    "NVIDIA/nvidia-container-toolkit `nvidia-ctk runtime configure`"
)
NODEADM_SOURCE = "aws/eks-hybrid internal/containerd/config.template.toml (nodeadm's imports)"

HANDLER_REPLACED = Failure(
    "handler-replaced-by-later-dropin", Status.FAIL,
    "containerd 1.x: a file defines the handler, but a file imported after it replaces the "
    "whole CRI plugin table without it",
    "Keep every CRI setting, including the handler, in the one file imported last (containerd "
    "1.x does not merge drop-ins), or upgrade to containerd 2.x (deep merge).",
    MERGE_SOURCE,
)
HANDLER_NOT_IMPORTED = Failure(
    "handler-file-not-imported", Status.FAIL,
    "a drop-in defines the handler but the root config does not import it",
    "Add the drop-in's directory to `imports` in the root config (or move the file into an "
    "imported directory) and restart containerd; nvidia-ctk 1.18.1+ writes conf.d/, 1.18.0 "
    "wrote config.d/.",
    MERGE_SOURCE + "; " + NODEADM_SOURCE,
)
CONFIG_ABSENT = Failure(
    "config-absent", Status.FAIL,
    "the root config is absent: containerd runs on its built-in defaults, which have no "
    "NVIDIA runtime handler",
    CONFIGURE,
    MERGE_SOURCE,
)
HANDLER_MISSING = Failure(
    "handler-missing", Status.FAIL,
    "no runtime handler of the configured name in containerd's effective config",
    CONFIGURE,
    RUNTIME_SOURCE,
)
RUNTIME_TYPE = Failure(
    "runtime-type-not-runc-v2", Status.FAIL,
    f"the handler's runtime_type is not {RUNC_V2}",
    f'Set runtime_type = "{RUNC_V2}" for the handler and restart containerd.',
    RUNTIME_SOURCE,
)
BINARY_NAME_MISSING = Failure(
    "binary-name-missing", Status.FAIL,
    "the handler has no options.BinaryName: it runs plain runc, which does not inject GPUs",
    'Set options.BinaryName = "/usr/bin/nvidia-container-runtime" (or re-run '
    "`nvidia-ctk runtime configure --runtime=containerd`) and restart containerd.",
    RUNTIME_SOURCE,
)
PARTIAL_TABLE = Failure(
    "nodeadm-partial-cri-table", Status.WARN,
    "containerd 1.x: nodeadm's config.d/00-nodeadm.toml (NodeConfig spec.containerd.config) "
    "holds a partial CRI table, which replaces the whole table: the sandbox_image, runc's "
    "SystemdCgroup and CNI settings nodeadm's config.toml made are gone (policy version 2)",
    "Make spec.containerd.config a complete CRI table (nodeadm's sandbox_image, runc with "
    "SystemdCgroup = true, registry config_path, cni dirs) and re-run `nodeadm init`, or run "
    "containerd 2.x (merges imported tables key by key).",
    "containerd docs/man/containerd-config.toml.5.md (imports); " + NODEADM_SOURCE,
)
BINARY_NOT_EXECUTABLE = Failure(
    "binary-not-executable", Status.FAIL,
    "the handler's BinaryName is not an executable on this host (absolute, or on the runc "
    "v2 shim's PATH)",
    "Install the NVIDIA Container Toolkit (it provides /usr/bin/nvidia-container-runtime) "
    "or correct BinaryName, then restart containerd.",
    RUNTIME_SOURCE,
)


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
                code=HANDLER_REPLACED.code,
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
                code=HANDLER_NOT_IMPORTED.code,
                **details,
            )
    if own is not None and own.root_missing and view.source.startswith("own"):
        return failed(
            f"{ctx.config_path} absent: containerd runs on its built-in defaults, which have no "
            f"'{handler}' runtime handler",
            CONFIGURE + " " + nodeadm_fix(handler) if ctx.nodeadm else None,
            code=CONFIG_ABSENT.code,
            **details,
        )
    return failed(
        f"no runtime handler '{handler}' in containerd's effective config ({view.source})",
        CONFIGURE + " " + nodeadm_fix(handler) if ctx.nodeadm else None,
        code=HANDLER_MISSING.code,
        **details,
    )


def _binary(host: HostView, name: str) -> Optional[str]:
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
        # containerd cannot decode it: 1.6 and 1.7 `config dump` exit 1 with "Can't convert
        # <value>(string) to config.Runtime" (the tests/integration oracle's binaries), so
        # the CRI plugin never loads; it is a config containerd rejects, not a missing handler.
        return failed(
            f"containerd cannot load its config: runtime handler '{ctx.handler}' is not a table",
            f"Write the '{ctx.handler}' runtime as a table with runtime_type and "
            "options.BinaryName (or re-run `nvidia-ctk runtime configure --runtime=containerd`), "
            "then restart containerd.",
            code=CONFIG_UNLOADABLE.code,
            **details,
        )
    rtype = runtime.get("runtime_type")
    name = table(runtime, "options").get("BinaryName")
    details.update(runtime_type=rtype, binary_name=name)
    if rtype != RUNC_V2:
        return failed(
            f"runtime handler '{ctx.handler}' has runtime_type {rtype!r}, not {RUNC_V2!r}",
            f"Set runtime_type = \"{RUNC_V2}\" for the '{ctx.handler}' runtime and restart "
            "containerd.",
            code=RUNTIME_TYPE.code,
            **details,
        )
    if not isinstance(name, str) or not name:
        return failed(
            f"runtime handler '{ctx.handler}' has no options.BinaryName: it runs plain runc, "
            "which does not inject GPUs",
            code=BINARY_NAME_MISSING.code,
            **details,
        )
    found = _binary(ctx.host, name)
    if found is None:
        return failed(
            f"runtime handler '{ctx.handler}' names BinaryName {name}, which is not an "
            "executable on this host",
            code=BINARY_NOT_EXECUTABLE.code,
            **details,
        )
    details["binary_path"] = found
    return passed(
        f"runtime handler '{ctx.handler}' ({RUNC_V2}, {found}) in the effective config "
        f"({view.source})",
        **details,
    )


def _run(host: HostView, policy: ResolvedPolicy) -> Outcome:
    ctx = resolve(host, policy)
    out = decide(ctx, _evaluate)
    view = next((v for v in ctx.views if v.major == 1), None)
    found = partial_cri_table(ctx, view) if view is not None else None
    if found is None:
        return out
    details = {**out.details, "nodeadm_partial_cri_table": found}
    known_1x = ctx.installed.version is not None and ctx.installed.version[0] < 2
    gate = getattr(getattr(policy, "policy", None), "containerd", None)
    if out.status == Status.PASS and known_1x and gate and gate.partial_cri_table_warns:
        return warned(f"{out.summary}; but {describe(found)}", PARTIAL_FIX,
                      code=PARTIAL_TABLE.code, **details)
    return Outcome(out.status, out.summary, details, out.remediation, code=out.code)


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
    reads=(DEFAULT_CONFIG, DPKG_STATUS) + DROPIN_GLOBS + ("/etc/containerd/*.toml",) + RECORDS,
    presence=("/usr/bin/nodeadm", "/usr/local/bin/nodeadm", "/usr/bin/nvidia-container-runtime"),
    runs=VERSION_ARGVS + tuple(dump_argv(a[0], DEFAULT_CONFIG) for a in VERSION_ARGVS),
    discover=discover,
    timeout_s=30.0,
    failures=(
        CONFIG_UNLOADABLE,
        CONFIG_NOT_FOUND,
        VERSION_DECIDES,
        HANDLER_REPLACED,
        HANDLER_NOT_IMPORTED,
        CONFIG_ABSENT,
        HANDLER_MISSING,
        RUNTIME_TYPE,
        BINARY_NAME_MISSING,
        BINARY_NOT_EXECUTABLE,
        PARTIAL_TABLE,
    ),
)
