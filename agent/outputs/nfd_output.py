"""The NFD feature file as an Output of its own, for an agent that writes no Node
(``kube.enabled: false``, ``nfd.enabled: true``: clusters that give the host no API
credentials, docs/kubernetes.md). Where the Node is written too, the Publisher
(agent/outputs/node/publish.py) writes this file in the same cycle, from the same plan, and
reports it beside the Node's writes; both go through agent/outputs/node/nfdfile.py.
"""
import time
from typing import Any, Callable

from agent.outputs.node.nfdfile import publish_nfd
from agent.report import Report, count_opens


class NfdOutput:
    def __init__(self, config: Any, dry_run: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.dry_run = dry_run
        self.clock = clock  # wall: the expiry written into the file
        # Consecutive open Reports: the label plan waits for a streak before calling a
        # host ready, exactly as on the Node (agent/outputs/node/reconcile.py).
        self.opens = 0

    def publish(self, report: Report) -> str:
        self.opens = count_opens(self.opens, report)  # scheduled runs only
        return publish_nfd(self.config, report, self.opens, self.clock(), self.dry_run)

    def close(self) -> None:
        pass  # the file stays until it expires (its `# +expiry-time=`), as after any exit
