"""The Node publisher's series: whether this agent has the Node cordoned, and whether its
last publish wrote the verdict (agent/outputs/node/publish.py, ``Report.run.node``).

The publisher takes a Report after the metrics rendered it, so these describe the attempt
made before the Report's cycle: at most one cycle late. Absent without a Node output
(`kube.enabled` false, a fixture host) and before the first attempt, so a panel or alert
never reads "not cordoned" from an agent that never looked.
"""
from agent.outputs.exposition import Writer
from agent.report import Report


def node_families(out: Writer, report: Report) -> None:
    facts = report.run.node
    if facts is None:
        return
    if facts.cordoned is not None:  # the Node has been read at least once
        out.family("node_cordoned", "gauge",
                   "1 when the Node is cordoned by this agent (spec.unschedulable and its "
                   "cordoned annotation), as last read or written.",
                   [((), 1.0 if facts.cordoned else 0.0)])
    out.family("node_publish_success", "gauge",
               "1 when the last publish read the Node and every write it needed was accepted.",
               [((), 1.0 if facts.publish_ok else 0.0)])
    out.family("node_publish_last_success_timestamp_seconds", "gauge",
               "Unix time of the last fully successful publish (0 before the first).",
               [((), facts.last_success or 0.0)])
