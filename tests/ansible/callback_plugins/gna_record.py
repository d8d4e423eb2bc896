"""An aggregate callback that writes the play's results as JSON for the tests.

ansible-core ships no json callback (it lives in the ansible.posix collection, which is not on
PyPI on its own), so the tests enable this one with ANSIBLE_CALLBACKS_ENABLED=gna_record and read
GNA_RECORD_FILE: per task its name, host status, changed/failed/skipped, msg and duration, and
the final per-host stats (the same numbers as the PLAY RECAP).
"""
import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: gna_record
    type: aggregate
    short_description: record task results and stats as JSON (tests only)
    description: writes GNA_RECORD_FILE when the playbook ends
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gna_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._tasks = []
        self._started = {}

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._started[task._uuid] = time.monotonic()

    def v2_playbook_on_handler_task_start(self, task):
        self._started[task._uuid] = time.monotonic()

    def _record(self, result, status):
        res = dict(result._result)
        task = result._task
        began = self._started.get(task._uuid, time.monotonic())
        self._tasks.append({
            "task": task.get_name(),
            "action": task.action,
            "host": result._host.get_name(),
            "status": status,
            "changed": bool(res.get("changed", False)),
            "msg": res.get("msg"),
            "cmd": res.get("cmd"),
            "rc": res.get("rc"),
            "diff": res.get("diff"),
            "duration_s": round(time.monotonic() - began, 3),
        })

    def v2_runner_on_ok(self, result, **kwargs):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_runner_item_on_ok(self, result):
        pass

    def v2_playbook_on_stats(self, stats):
        out = os.environ.get("GNA_RECORD_FILE")
        if not out:
            return
        hosts = sorted(stats.processed.keys())
        summary = {h: stats.summarize(h) for h in hosts}
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"tasks": self._tasks, "stats": summary}, fh, default=str, indent=1)
