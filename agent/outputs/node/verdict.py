"""What `gpu-node-agent check` shows (and, with --apply, writes) about this host's Node."""

import time
from typing import TYPE_CHECKING, Any, Optional

from agent.outputs.node import reconcile
from agent.outputs.node.result import PublishResult

if TYPE_CHECKING:  # the live path only: `check --bundle` does not import the API client
    from agent.kube.session import KubeSession


def check_verdict(
    config: Any, report: Any, session: Optional["KubeSession"] = None,
    node: Any = None, apply: bool = False,
) -> PublishResult:
    """What `gpu-node-agent check` shows (and, with --apply, writes) for this Report.

    On the live host (``session`` given) this is one Publisher cycle (dry-run unless `apply`)
    on the session the checks' host facts used, so the Node the checks read is the one planned
    against. On a bundle or a --host-root tree (no session) nothing is ever written: the plan
    is made against ``node``, the Node captured in host.json (or an empty Node when none was
    captured); the command line reads it from its Host.
    """
    if session is not None:
        from agent.outputs.node.publish import Publisher

        pub = Publisher(config, dry_run=not apply, session=session)
        pub.log_errors = False
        try:
            result = pub.publish(report)
        finally:
            pub.close()
        if session.kubeconfig_used is not None:  # which kubeconfig: configured or found
            result.kubeconfig, result.kubeconfig_source = session.kubeconfig_used
        if result.plan is None:  # the Node could not be read: still show the desired state
            result.plan = reconcile.plan(report, {}, config.kube, pub.opens, time.time())
        return result
    captured = isinstance(node, dict) and isinstance(node.get("metadata"), dict)
    result = PublishResult(dry_run=True)
    if captured:
        result.node = str(node["metadata"].get("name") or "") or None
        result.node_source = "the Node captured in the bundle"
    else:
        result.node_source = "no Node captured: compared with an empty Node"
    opens = 1 if report.gate.open else 0
    result.plan = reconcile.plan(report, node if captured else {}, config.kube, opens, time.time())
    return result
