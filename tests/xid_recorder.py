"""A real recorder process for the restart tests: ``python -m tests.xid_recorder``.

It records XIDs into the sticky state the way `run` does (agent.xid.monitor.XidMonitor fed
by a kernel-log source), and nothing else, so tests/integration/test_xid_restart.py can
SIGKILL and restart the writer of sticky.json without a whole daemon. It is a test harness,
not a product entry: it composes a policy, a store and a source itself, which only the
command line may do in the agent (docs/architecture.md; docs/decisions.md "The standalone
XID recorder"). On a host, `gpu-node-agent run` is the recorder.
"""

import argparse
import logging
import sys
import time
from typing import List, Optional

from agent.logs import setup
from agent.xid.kernel_source import DeviceSource
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore
from checks.xid.policy import load_xid_policy

log = logging.getLogger("gpu-node-agent").getChild("xid")


def main(argv: Optional[List[str]] = None) -> int:
    """Record XIDs into the sticky state the way `run` does, until killed or --max-s."""
    parser = argparse.ArgumentParser(prog="python -m tests.xid_recorder")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--kmsg", default="/dev/kmsg", help="device, FIFO or file (record format)")
    parser.add_argument("--boot-id-file", default="/proc/sys/kernel/random/boot_id")
    parser.add_argument("--interval", type=float, default=1.0)
    # A bound, so a recorder whose test died without killing it does not run on forever.
    parser.add_argument("--max-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    setup()
    with open(args.boot_id_file, encoding="ascii") as fh:
        boot_id = fh.read().strip()
    monitor = XidMonitor(
        StateStore(args.state_dir, boot_id), load_xid_policy(), source=DeviceSource(args.kmsg)
    )
    monitor.start()
    log.info("recording XIDs", extra={"fields": {"state_dir": args.state_dir, "boot_id": boot_id}})
    deadline = time.monotonic() + args.max_s
    while time.monotonic() < deadline:
        monitor.cycle(None)
        time.sleep(args.interval)
    monitor.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
