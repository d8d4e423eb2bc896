"""node_exporter's textfile collector: the metrics exposition as a .prom file.

The collector reads every *.prom file in its directory on each scrape; a file written in place
could be read half-written, so it is written to a temporary file in the same directory and
renamed (node_exporter's textfile collector README says exactly this). The exposition carries
no timestamps (the collector rejects them).
"""
import logging
import os
from typing import Callable, Optional

from agent.logs import LOGGER_NAME, log
from agent.report import Report
from agent.safeio.atomic import write_atomic

NAME = "gpu_node_agent.prom"


def write_textfile(directory: str, body: bytes, name: str = NAME) -> str:
    return write_atomic(os.path.join(directory, name), body, prefix=".gpu_node_agent.")


class TextfileOutput:
    """Writes each Report's exposition into ``directory`` (run.textfile_dir). A failure is
    logged and the next Report tries again: the endpoint still serves the same bytes."""

    def __init__(self, directory: str, render: Callable[[Report], bytes],
                 logger: Optional[logging.Logger] = None) -> None:
        self.directory = directory
        self._render = render
        self._log = logger or logging.getLogger(LOGGER_NAME)

    def publish(self, report: Report) -> Optional[str]:
        try:
            return write_textfile(self.directory, self._render(report))
        except OSError as exc:
            log(self._log, logging.ERROR, "cannot write the textfile", dir=self.directory,
                error=str(exc))
            return None

    def close(self) -> None:
        pass  # the last file stays: node_exporter keeps serving it, as after any exit
