"""The Node verdict as a node-feature-discovery local feature file (docs/kubernetes.md, NFD
"features.d"): the same labels as the Node, with an `# +expiry-time=` so a dead agent's labels
lapse; written atomically by agent/outputs/nfd.py."""

from typing import Any, Optional

from agent.kube.credentials import parse_rfc3339
from agent.outputs import nfd
from agent.outputs.node import reconcile


def publish_nfd(config: Any, report: Any, opens: int, now: float, dry_run: bool) -> str:
    """Write (or remove) the NFD feature file for this Report; one line saying what was done.
    Its labels are the Node's (the same plan), its expiry renewed at half-life."""
    path = config.nfd.path
    current = nfd.read_labels(path)
    if not config.nfd.enabled:
        if dry_run:
            return f"would remove {path} (nfd output turned off)"
        nfd.remove(path)
        return f"removed {path} (nfd output turned off)"
    fake = {"metadata": {"labels": current or {}}}
    plan = reconcile.plan(report, fake, config.kube, opens, now)
    wanted = {k: v for k, v in plan.labels.items() if v is not None}
    expires = expiry(path)
    fresh = expires is not None and expires - now > config.nfd.expiry / 2
    if current == wanted and fresh:
        return f"{path} up to date"
    if dry_run:
        return f"would write {path}"
    try:
        nfd.write(path, wanted, now + config.nfd.expiry)
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return f"wrote {path}"


def expiry(path: str) -> Optional[float]:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("# +expiry-time="):
                    return parse_rfc3339(line.split("=", 1)[1])
    except OSError:
        return None
    return None
