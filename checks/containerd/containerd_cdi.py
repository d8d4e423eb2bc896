"""containerd-cdi: CDI is enabled in containerd's effective config and its spec directories
include where NVIDIA specs are (and /var/run/cdi, where the DRA driver writes per-claim specs).

Defaults (containerd docs/cri/config.md and `config dump`): CDI arrived in 1.7 with
enable_cdi = false; 2.x has enable_cdi = true; cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"].
"""

import posixpath
from typing import Any, Dict, List

from checks.base import (
    DRA_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    passed,
)
from checks.containerd.cdi_specs import CDI_DIRS, SPEC_GLOBS, load_specs
from checks.containerd.config import (
    DEFAULT_CONFIG,
    DROPIN_GLOBS,
    discover,
)
from checks.containerd.effective import (
    CONFIG_NOT_FOUND,
    CONFIG_UNLOADABLE,
    VERSION_DECIDES,
    Context,
    View,
    decide,
    fatal,
    resolve,
)
from checks.containerd.installed import DPKG_STATUS, VERSION_ARGVS, dump_argv
from checks.containerd.snap import RECORDS
from checks.policy import ResolvedPolicy

DRA_SPEC_DIR = "/var/run/cdi"  # k8s-dra-driver-gpu writes claim specs here
CRI_CONFIG_DOC = "containerd docs/cri/config.md (enable_cdi, cdi_spec_dirs and their defaults)"

CDI_UNSUPPORTED = Failure(
    "cdi-unsupported-version", Status.FAIL,
    "the installed containerd is older than 1.7, which has no CDI support",
    "Upgrade containerd to 1.7 (with enable_cdi = true) or 2.x; the DRA paths inject GPUs "
    "through CDI.",
    CRI_CONFIG_DOC,
)
CDI_DISABLED = Failure(
    "cdi-disabled", Status.FAIL,
    "enable_cdi is false in the effective config, or unset on containerd 1.7 (default false)",
    'Set enable_cdi = true (and cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]) in the CRI '
    "plugin table of the file containerd loads last for it, or run `nvidia-ctk runtime "
    "configure --runtime=containerd --cdi.enabled`; restart containerd.",
    CRI_CONFIG_DOC,
)
SPEC_DIRS_INCOMPLETE = Failure(
    "cdi-spec-dirs-incomplete", Status.FAIL,
    "cdi_spec_dirs leaves out /var/run/cdi (DRA claim specs) or a directory holding an NVIDIA "
    "CDI spec",
    "Add the missing directories to cdi_spec_dirs in containerd's CRI config and restart "
    "containerd.",
    CRI_CONFIG_DOC + "; NVIDIA/k8s-dra-driver-gpu cdi.go (claim specs in /var/run/cdi)",
)


def _canon(path: str) -> str:
    # /var/run is a symlink to /run on every supported distribution.
    path = posixpath.normpath(path)
    return (
        "/run" + path[len("/var/run") :]
        if path == "/var/run" or path.startswith("/var/run/")
        else path
    )


def _default_enabled(ctx: Context, view: View) -> bool:
    # An unknown version is evaluated under both semantics (effective.decide): each view's
    # major decides the default, and views that disagree make the check unknown.
    version = ctx.installed.version
    return version[0] >= 2 if version is not None else view.major >= 2


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
            code=CDI_UNSUPPORTED.code,
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
            code=CDI_DISABLED.code,
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
            code=SPEC_DIRS_INCOMPLETE.code,
            **details,
        )
    return passed(
        f"CDI enabled ({'explicitly' if explicit else 'by default'}); spec dirs {dirs} cover "
        f"{', '.join(required)}",
        **details,
    )


def _run(host: HostView, policy: ResolvedPolicy) -> Outcome:
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
    reads=(DEFAULT_CONFIG, DPKG_STATUS) + DROPIN_GLOBS + SPEC_GLOBS + RECORDS,
    runs=VERSION_ARGVS + tuple(dump_argv(a[0], DEFAULT_CONFIG) for a in VERSION_ARGVS),
    discover=discover,
    timeout_s=30.0,
    failures=(CONFIG_UNLOADABLE, CONFIG_NOT_FOUND, VERSION_DECIDES, CDI_UNSUPPORTED, CDI_DISABLED,
              SPEC_DIRS_INCOMPLETE),
)
