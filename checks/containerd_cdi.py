"""containerd-cdi: CDI is enabled in containerd's effective config and its spec directories
include where NVIDIA specs are (and /var/run/cdi, where the DRA driver writes per-claim specs).

Defaults (containerd docs/cri/config.md and `config dump`): CDI arrived in 1.7 with
enable_cdi = false; 2.x has enable_cdi = true; cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"].
"""

import posixpath
from typing import Any, Dict, List, Optional

from checks.base import DRA_PATHS, Check, Interval, Outcome, Severity, failed, passed, unknown
from checks.cdi_specs import CDI_DIRS, SPEC_GLOBS, load_specs
from checks.containerd_config import (
    DEFAULT_CONFIG,
    DROPIN_GLOBS,
    discover,
)
from checks.containerd_effective import Context, View, decide, fatal, resolve
from checks.containerd_installed import DPKG_STATUS, VERSION_ARGVS, dump_argv

DRA_SPEC_DIR = "/var/run/cdi"  # k8s-dra-driver-gpu writes claim specs here


def _canon(path: str) -> str:
    # /var/run is a symlink to /run on every supported distribution.
    path = posixpath.normpath(path)
    return (
        "/run" + path[len("/var/run") :]
        if path == "/var/run" or path.startswith("/var/run/")
        else path
    )


def _default_enabled(ctx: Context, view: View) -> Optional[bool]:
    version = ctx.installed.version
    if version is not None:
        return version[0] >= 2
    if view.major is not None and view.major >= 2:
        return True
    if view.major == 1:
        return False
    return None


def _evaluate(ctx: Context, view: View) -> Outcome:
    bad = fatal(ctx, view)
    if bad is not None:
        return bad
    details: Dict[str, Any] = {**ctx.details(), "source": view.source}
    version = ctx.installed.version
    if version is not None and version < (1, 7, 0):
        return failed(
            f"containerd {'.'.join(map(str, version))} has no CDI support (enable_cdi arrived "
            "in 1.7)",
            "Upgrade containerd to 1.7 (with enable_cdi = true) or 2.x; the DRA paths inject "
            "GPUs through CDI.",
            **details,
        )
    enabled = view.cri.get("enable_cdi")
    # `config dump` prints defaults too: whether a file set it comes from the files themselves.
    written = view.own.cri() if view.own is not None and not view.own.errors else view.cri
    explicit = isinstance(written.get("enable_cdi"), bool)
    if not isinstance(enabled, bool):
        enabled = _default_enabled(ctx, view)
    dirs = view.cri.get("cdi_spec_dirs")
    dirs = [d for d in dirs if isinstance(d, str)] if isinstance(dirs, list) else list(CDI_DIRS)
    details.update(enable_cdi=enabled, enable_cdi_explicit=explicit, cdi_spec_dirs=dirs)
    if enabled is None:
        return unknown(
            "enable_cdi not set and the containerd version (hence its default) is unknown",
            "Make `containerd --version` answer on this host, or set enable_cdi explicitly.",
            **details,
        )
    if not enabled:
        where = "set to false" if explicit else "not set (containerd 1.7 defaults it to false)"
        table_name = (
            "io.containerd.cri.v1.runtime" if view.version >= 3 else "io.containerd.grpc.v1.cri"
        )
        return failed(
            f"CDI is disabled in containerd's effective config: enable_cdi {where}",
            f'Set enable_cdi = true (and cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]) in '
            f'[plugins."{table_name}"] of the file containerd loads last for that table '
            "(containerd 1.x replaces the whole table per imported file), or run "
            "`nvidia-ctk runtime configure --runtime=containerd --cdi.enabled`; restart "
            "containerd.",
            **details,
        )
    spec_dirs = sorted({posixpath.dirname(s.path) for s in load_specs(ctx.host) if s.is_nvidia})
    required = list(dict.fromkeys([DRA_SPEC_DIR] + spec_dirs))
    configured = {_canon(d) for d in dirs}
    missing: List[str] = [d for d in required if _canon(d) not in configured]
    details.update(nvidia_spec_dirs=spec_dirs, required_dirs=required)
    if missing:
        return failed(
            f"cdi_spec_dirs {dirs} do not include {', '.join(missing)} "
            "(NVIDIA specs / DRA claim specs live there)",
            f"Add {', '.join(missing)} to cdi_spec_dirs in containerd's CRI config and restart "
            "containerd.",
            **details,
        )
    return passed(
        f"CDI enabled ({'explicitly' if explicit else 'by default'}); spec dirs {dirs} cover "
        f"{', '.join(required)}",
        **details,
    )


def _run(host: Any, policy: Any) -> Outcome:
    return decide(resolve(host, policy), _evaluate)


CONTAINERD_CDI = Check(
    id="containerd-cdi",
    title="CDI enabled in containerd with the NVIDIA spec directories",
    severity=Severity.CRITICAL,
    gates=DRA_PATHS,
    interval=Interval.SLOW,
    remediation=(
        "Enable CDI in containerd (enable_cdi = true, cdi_spec_dirs including /etc/cdi and "
        "/var/run/cdi; on by default in containerd 2.x) and restart containerd."
    ),
    run=_run,
    reads=(DEFAULT_CONFIG, DPKG_STATUS) + DROPIN_GLOBS + SPEC_GLOBS,
    runs=VERSION_ARGVS + tuple(dump_argv(a[0], DEFAULT_CONFIG) for a in VERSION_ARGVS),
    discover=discover,
    timeout_s=30.0,
)
