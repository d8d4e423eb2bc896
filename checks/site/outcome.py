"""One site check's run: the argv that executes it, and its answer read as an Outcome.

The contract follows node-problem-detector's custom plugin monitor
(kubernetes/node-problem-detector, docs/custom_plugin_monitor.md and
pkg/custompluginmonitor/types/types.go): exit 0 is OK, 1 is NonOK, any other code Unknown; a
timeout per plugin; the output is the message. Beyond it: an optional first stdout line of JSON
may say `warn` (docs/site-checks.md).
"""
import json
from typing import Any, Callable, Dict, Optional, Tuple

from checks.base import (
    CommandResult,
    Failure,
    HostView,
    Outcome,
    Status,
    failed,
    input_missing,
    passed,
    unknown,
    warned,
)

# The environment a site check gets, and nothing else (env(1) -i): a search path of the
# system's own directories and the C locale, so the check cannot inherit the agent's.
CLEAN_PATH = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
ENV = ("/usr/bin/env", "-i", CLEAN_PATH, "LANG=C")
# coreutils timeout(1) signals the whole process group it leads, so a check's children die
# with it; it exits 124 when the deadline passed (GNU coreutils manual, "timeout invocation").
TIMEOUT = "/usr/bin/timeout"
TIMEOUT_EXIT = 124
KILL_AFTER_S = 2  # SIGTERM at the deadline, SIGKILL this much later
# The runner's own limit is a little past timeout(1)'s, so it only acts if timeout(1) cannot.
RUNNER_GRACE_S = 5.0

MAX_JSON_LINE = 4096
MAX_SUMMARY = 200
MAX_DETAIL_KEYS = 32
MAX_DETAIL_VALUE = 512
MAX_OUTPUT = 2048
JSON_KEYS = frozenset({"status", "summary", "details"})
JSON_STATUSES = {"pass": Status.PASS, "warn": Status.WARN, "fail": Status.FAIL}
_RANK = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}

NPD = ("kubernetes/node-problem-detector docs/custom_plugin_monitor.md (exit 0 OK, 1 NonOK, "
       "other Unknown; per-plugin timeout)")

FAILURES: Tuple[Failure, ...] = (
    Failure("site-check-failed", Status.FAIL, "the site check exited 1 (or its JSON line said "
            "fail)", "read the check's summary and output; fix what it names", NPD),
    Failure("site-check-warn", Status.WARN, "the site check's JSON line said warn",
            "read the check's summary; the site decides whether it matters", NPD),
    Failure("site-check-unknown", Status.UNKNOWN, "the site check exited with a code other "
            "than 0 or 1, or could not be started", "run the file by hand as root with the "
            "clean environment (docs/site-checks.md) and fix it", NPD),
    Failure("site-check-timeout", Status.UNKNOWN, "the site check did not finish by its "
            "deadline and was killed", "make it finish sooner or raise `timeout` in its "
            "sidecar", NPD),
    Failure("site-check-bad-output", Status.UNKNOWN, "the site check's first line looked like "
            "JSON but is not a valid status object", "print {\"status\": ..., \"summary\": "
            "..., \"details\": {...}} or plain text (docs/site-checks.md)", NPD),
    Failure("site-check-refused", Status.UNKNOWN, "the file or its directory is not a "
            "root-owned regular file/directory closed to group and others; never run",
            "chown root:root and chmod go-w the file and its directory", NPD),
    Failure("site-check-sidecar", Status.UNKNOWN, "the check's sidecar YAML is invalid; never "
            "run", "fix the field the summary names (docs/site-checks.md, sidecar keys)", NPD),
    Failure("site-check-name", Status.UNKNOWN, "a file in the site-check directory has no "
            "valid check name, or two files share one", "rename it: lowercase kebab-case, "
            "one file per name", NPD),
)


def argv_for(path: str, deadline_s: int) -> Tuple[str, ...]:
    """What the host runs: the file, under a clean environment and timeout(1)."""
    return (*ENV, TIMEOUT, "-k", str(KILL_AFTER_S), str(deadline_s), path)


def _json_line(line: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(the status object, None) or (None, why it is refused)."""
    if len(line) > MAX_JSON_LINE:
        return None, f"the JSON line is longer than {MAX_JSON_LINE} characters"
    try:
        data = json.loads(line)
    except RecursionError:  # 4,096 characters nest ~2,000 deep: past Python 3.9's limit
        return None, "the JSON line nests too deeply"
    except ValueError as exc:
        return None, f"the first line is not valid JSON ({str(exc)[:80]})"
    if not isinstance(data, dict):
        return None, "the JSON line is not an object"
    extra = sorted(set(data) - JSON_KEYS)
    if extra:
        return None, f"unknown key(s) {', '.join(extra)} (known: details, status, summary)"
    status = data.get("status")
    if status is not None and (not isinstance(status, str) or status not in JSON_STATUSES):
        return None, f"status {str(status)[:40]!r} is not pass, warn or fail"
    summary = data.get("summary")
    if summary is not None and not isinstance(summary, str):
        return None, "summary is not a string"
    details = data.get("details", {})
    if details is None:
        details = {}
    if not isinstance(details, dict) or len(details) > MAX_DETAIL_KEYS:
        return None, f"details is not an object of at most {MAX_DETAIL_KEYS} keys"
    for key, value in details.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            return None, f"details.{key[:40]} is not a string, number, boolean or null"
        if isinstance(value, str) and len(value) > MAX_DETAIL_VALUE:
            return None, f"details.{key[:40]} is longer than {MAX_DETAIL_VALUE} characters"
    return {"status": status, "summary": summary, "details": details}, None


def interpret(res: CommandResult, path: str, deadline_s: int) -> Outcome:
    """The Outcome of one run of the site check at ``path``."""
    if res.not_recorded:
        return input_missing(f"{path}: not run here ({res.describe()})", path=path)
    out = res.stdout[:MAX_OUTPUT]
    base: Dict[str, Any] = {"path": path, "exit_code": res.rc, "output": out,
                            "stderr": res.stderr[:MAX_OUTPUT]}
    if res.timed_out or res.rc == TIMEOUT_EXIT:
        return unknown(f"{path} did not finish within its {deadline_s}s deadline; killed",
                       code="site-check-timeout", deadline_s=deadline_s, **base)
    if res.rc not in (0, 1):
        why = res.describe() if res.rc in (126, 127) or res.rc < 0 else f"{path} exited {res.rc}"
        return unknown(f"{why} (0 is pass, 1 is fail, anything else unknown)",
                       code="site-check-unknown", **base)
    lines = res.stdout.splitlines()
    first = lines[0].strip() if lines else ""
    said: Optional[Status] = None
    summary = first
    if first.startswith("{"):  # the optional status line (docs/site-checks.md)
        data, problem = _json_line(first)
        if data is None or problem is not None:
            return unknown(f"{path}: {problem}", code="site-check-bad-output", **base)
        said = JSON_STATUSES.get(data["status"]) if data["status"] else None
        summary = str(data["summary"] or "")
        base["reported"] = data["details"]
    summary = " ".join(summary.split())[:MAX_SUMMARY] or f"{path} exited {res.rc}"
    status = Status.FAIL if res.rc == 1 else Status.PASS
    if said is not None and _RANK[said] > _RANK[status]:  # the worse of the two wins
        status = said
    if status == Status.FAIL:
        return failed(summary, code="site-check-failed", **base)
    if status == Status.WARN:
        return warned(summary, code="site-check-warn", **base)
    return passed(summary, **base)


def runner(path: str, deadline_s: int,
           vet: Optional[Callable[[], Optional[str]]] = None) -> Any:
    """The Check's run function for the site check at ``path``; ``vet`` (why the file may
    not be run now, or None) is asked before each run on a live host (a bundle replays a
    recorded answer and has no file to vet)."""
    argv = argv_for(path, deadline_s)

    def run(host: HostView, policy: Any) -> Outcome:
        problem = vet() if vet is not None and getattr(host, "is_live", False) else None
        if problem:
            return unknown(f"{path}: refused, never run: {problem}", code="site-check-refused",
                           path=path, problem=problem)
        return interpret(host.run(argv, timeout=deadline_s + RUNNER_GRACE_S), path, deadline_s)

    return run


def refusal(summary: str, code: str, **details: Any) -> Any:
    """The run function of a check that is never executed: always this unknown."""
    def run(host: HostView, policy: Any) -> Outcome:
        return unknown(summary, code=code, **details)

    return run

