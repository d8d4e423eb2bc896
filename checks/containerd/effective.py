"""One evaluation of containerd's effective config, shared by containerd-nvidia-runtime and
containerd-cdi: containerd's own `config dump` when it can be asked (the authority), else
our merge with the installed major version's semantics (checks/containerd/config.py).

When the installed version is unknown and the root config is version 2, both 1.x and 2.x
semantics are evaluated; a check whose verdicts differ between them is `unknown`.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.records import field, record
from checks.base import Failure, HostView, Outcome, Status, unknown
from checks.containerd.config import (
    CRI_V1,
    CRI_V2,
    CRI_V3_RUNTIME,
    Effective,
    config_version,
    load_effective,
    parse_toml,
    read_config,
    table,
)
from checks.containerd.installed import Installed, config_dump, installed_containerd
from checks.containerd.snap import is_snap_host, looked_at, snap_config
from checks.policy import ResolvedPolicy

NODEADM_BINARIES = ("/usr/bin/nodeadm", "/usr/local/bin/nodeadm")
# A line of nodeadm's config template (aws/eks-hybrid internal/containerd/config.template.toml).
NODEADM_MARK = "The imports do not behave exactly like overrides"

MERGE_SOURCE = "containerd/containerd cmd/containerd/server/config/config.go (imports, merge)"
# The two failures both checks over the effective config share: declared by each of them.
CONFIG_UNLOADABLE = Failure(
    code="config-unloadable",
    status=Status.FAIL,
    means="containerd cannot load its config: invalid TOML, an explicit import that does not "
    "exist, or `config dump` refusing it",
    fix="Fix the file named in the summary (containerd refuses to start with it), then restart "
    "containerd.",
    source=MERGE_SOURCE,
)
CONFIG_NOT_FOUND = Failure(
    code="config-not-found",
    status=Status.UNKNOWN,
    means="containerd's config is not where the agent looked and the host says it is "
    "elsewhere (Canonical Kubernetes records its own path): not the built-in defaults",
    fix="Set containerd.config_path in the agent's config to the file containerd is started "
    "with (`--config` of its service), or collect the bundle on the host itself.",
    source="canonical/k8s-snap src/k8s/pkg/k8sd/setup/containerd.go (--config in "
    "$SNAP_COMMON/args/containerd), src/k8s/pkg/snap/snap.go (ContainerdConfigDir)",
)
VERSION_DECIDES = Failure(
    code="verdict-depends-on-version",
    status=Status.UNKNOWN,
    means="the installed containerd version is unknown and the 1.x (replace) and 2.x (deep "
    "merge) semantics give different verdicts",
    fix="Make `containerd --version` answer on this host (or record it in the bundle).",
    source=MERGE_SOURCE,
)


@record
class View:
    """The effective CRI runtime table under one set of merge semantics."""

    major: int  # the merge semantics evaluated: 1 or 2
    version: int
    cri: Dict[str, Any]
    source: str
    loaded: List[str]
    own: Optional[Effective]  # our merge (also present when the dump decided)
    errors: List[str] = field(default_factory=list)


@record
class Context:
    handler: str
    config_path: str
    installed: Installed
    views: List[View]
    nodeadm: bool
    host: HostView
    config_from: str = "containerd.config_path"
    snap: bool = False  # a Canonical Kubernetes host (the snap's records or binary)

    def details(self) -> Dict[str, Any]:
        v = self.installed.version
        return {
            "handler": self.handler,
            "config_path": self.config_path,
            "config_from": self.config_from,
            "containerd_version": ".".join(map(str, v)) if v else None,
            "containerd_version_source": self.installed.source or None,
            "nodeadm_host": self.nodeadm,
        }


def _cri_from(data: Dict[str, Any]) -> Tuple[int, Dict[str, Any]]:
    version = config_version(data)
    for key in (CRI_V3_RUNTIME,) if version >= 3 else (CRI_V2, CRI_V1):
        found = table(data, "plugins", key)
        if found:
            return version, found
    return version, {}


def _settings(policy: ResolvedPolicy) -> Tuple[str, str]:
    section = policy.settings.get("containerd") or {}
    return str(section.get("handler") or "nvidia"), str(
        section.get("config_path") or "/etc/containerd/config.toml"
    )


DEFAULT_PATH = "/etc/containerd/config.toml"


def config_location(host: HostView, policy: ResolvedPolicy) -> Tuple[str, str]:
    """(the root config, where that came from): containerd.config_path when set to another
    file than the default, else what Canonical Kubernetes recorded, else the default."""
    _, configured = _settings(policy)
    if configured == DEFAULT_PATH:
        recorded, record = snap_config(host)
        if recorded is not None:
            return recorded, f"k8s snap: {record}"
    return configured, "containerd.config_path"


def resolve(host: HostView, policy: ResolvedPolicy) -> Context:
    handler, _ = _settings(policy)
    config_path, config_from = config_location(host, policy)
    installed = installed_containerd(host)
    root_text = read_config(host, config_path) or ""
    nodeadm = any(host.exists(p) for p in NODEADM_BINARIES) or NODEADM_MARK in root_text
    if installed.version is not None:
        majors = [1 if installed.version[0] < 2 else 2]
    else:
        root, _ = parse_toml(root_text, config_path)
        majors = [2] if root is not None and config_version(root) >= 3 else [1, 2]
    views: List[View] = []
    dump = config_dump(host, installed.binary, config_path)
    if dump is not None:
        own = load_effective(host, config_path, majors[0])
        if dump.data is not None:
            version, cri = _cri_from(dump.data)
            loaded = [p for p in dump.data.get("imports", []) if isinstance(p, str)]
            if majors[0] >= 2:
                # 1.x dumps the files it loaded under `imports`; 2.x (2.1's `config dump`,
                # tests/integration) the root's import patterns as written: our walk names
                # the files.
                loaded = own.loaded
            views.append(
                View(majors[0], version, cri, "containerd config dump", loaded or own.loaded, own)
            )
            return Context(handler, config_path, installed, views, nodeadm, host, config_from,
                           is_snap_host(host))
        errors = own.errors or [f"containerd rejects its config: {dump.problem}"]
        views.append(View(majors[0], own.version, {}, "containerd config dump", [], own, errors))
        return Context(handler, config_path, installed, views, nodeadm, host, config_from,
                       is_snap_host(host))
    for major in majors:
        own = load_effective(host, config_path, major)
        source = f"own merge with containerd {major}.x semantics"
        views.append(View(major, own.version, own.cri(), source, own.loaded, own, own.errors))
    return Context(handler, config_path, installed, views, nodeadm, host, config_from,
                   is_snap_host(host))


def decide(ctx: Context, evaluate: Callable[[Context, View], Outcome]) -> Outcome:
    """Evaluate every view; when the installed major version is unknown and the views
    disagree, the answer is unknown (naming both)."""
    outcomes = [evaluate(ctx, view) for view in ctx.views]
    first = outcomes[0]
    if len(outcomes) == 1 or all(o.status == first.status for o in outcomes):
        details = dict(first.details)
        if len(outcomes) > 1:
            details["note"] = "containerd version unknown; 1.x and 2.x merging agree"
        return Outcome(first.status, first.summary, details, first.remediation, code=first.code)
    parts = "; ".join(
        f"as {v.major}.x: {o.status}: {o.summary}" for v, o in zip(ctx.views, outcomes)
    )
    return unknown(
        f"containerd version unknown and the verdict depends on it ({parts})",
        code=VERSION_DECIDES.code,
        **{
            **ctx.details(),
            "verdicts": {str(v.major): str(o.status) for v, o in zip(ctx.views, outcomes)},
        },
    )


def fatal(ctx: Context, view: View) -> Optional[Outcome]:
    """A config containerd itself cannot load: the check fails naming the file and line. A
    root config that is absent where the host says containerd's config is elsewhere (a k8s
    snap host) is unknown naming where we looked, never "built-in defaults"."""
    own = view.own
    if own is not None and own.root_missing and view.source.startswith("own") and ctx.snap:
        record = ctx.config_from[len("k8s snap: "):] if ctx.config_from.startswith("k8s") else ""
        looked = looked_at(ctx.config_path, record)
        return Outcome(
            Status.UNKNOWN,
            f"containerd's config not found at {ctx.config_path}: this is a Canonical Kubernetes "
            f"host, whose containerd runs on the config the snap records, not on built-in "
            f"defaults (looked at: {', '.join(looked)})",
            {**ctx.details(), "looked_at": looked, "source": view.source},
            CONFIG_NOT_FOUND.fix,
            code=CONFIG_NOT_FOUND.code,
        )
    if not view.errors:
        return None
    return Outcome(
        Status.FAIL,
        f"containerd cannot load its config: {view.errors[0]}",
        {**ctx.details(), "errors": view.errors, "source": view.source},
        f"Fix {view.errors[0].split(':')[0]} (containerd refuses to start with it), then "
        "restart containerd.",
        code=CONFIG_UNLOADABLE.code,
    )


def nodeadm_fix(handler: str) -> str:
    # nodeadm writes NodeConfig spec.containerd.config to /etc/containerd/config.d/00-nodeadm.toml
    # (eks-hybrid internal/containerd); containerd 1.x then replaces the CRI table of
    # config.toml with that file's, so the snippet must be a complete CRI section.
    return (
        "This is a nodeadm host: `nodeadm init` rewrites /etc/containerd/config.toml to import "
        "only /etc/containerd/config.d/*.toml, while nvidia-ctk 1.18.1+ writes "
        "/etc/containerd/conf.d/99-nvidia.toml (1.18.0 wrote config.d/). Have nodeadm write the "
        "runtime itself: in the NodeConfig set spec.containerd.config to a complete CRI section "
        "(nodeadm writes it to /etc/containerd/config.d/00-nodeadm.toml on every init; containerd "
        "1.x replaces the whole CRI table with it), e.g. "
        f'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{handler}] runtime_type = '
        '"io.containerd.runc.v2" with options BinaryName = "/usr/bin/nvidia-container-runtime", '
        "plus the "
        "runc runtime (SystemdCgroup = true), sandbox_image and registry config_path nodeadm "
        "sets; then re-run `nodeadm init` and this check."
    )
