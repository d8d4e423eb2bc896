"""Discovering the site checks: the files of the configured directory, vetted before any runs.

A file is run only when it and its directory are owned by root and not writable by group or
others (the rule node-problem-detector leaves to the operator, and that sudo applies to its
sudoers file): anyone who could change the file could otherwise run code as the agent. A
refused file, a bad sidecar or a bad name is a check that is `unknown` saying why, never a
crash and never a run. The directory is read once, when the command starts (`run` needs a
restart, not SIGHUP, to see a new file).
"""
import os
import re
import stat
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.model import PATHS, Check, Interval, Severity
from agent.safeio.bounded import CONFIG_CAP, read_text_capped
from agent.safeio.yamlio import YamlError, safe_load
from checks.site.outcome import FAILURES, RUNNER_GRACE_S, argv_for, refusal, runner

NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME = 50  # the id `site-<name>` stays a short metric label
MAX_CHECKS = 64
DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 600
SIDECAR_KEYS = ("title", "severity", "gates", "interval", "timeout", "remediation")
# Not checks: sidecars, hidden files, editors' and package managers' leftovers.
_IGNORED = re.compile(r"^\.|~$|\.(ya?ml|md|txt|dpkg-[a-z]+|rpmnew|rpmsave|rpmorig|bak|swp)$")
DIR_CHECK_ID = "site-checks"
REMEDIATION = "See docs/site-checks.md."


def permission_problem(path: str, want_dir: bool, executable: bool = True) -> Optional[str]:
    """Why ``path`` may not be trusted (lstat: a symlink is refused), or None."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot stat it ({exc.strerror or exc})"
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    mode = f"mode {stat.filemode(st.st_mode)} ({stat.S_IMODE(st.st_mode):04o})"
    if not kind_ok:
        return f"not a {'directory' if want_dir else 'regular file'} ({mode})"
    if st.st_uid != 0:
        return f"owned by uid {st.st_uid}, not root (uid 0)"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others ({mode})"
    if not want_dir and executable and not st.st_mode & stat.S_IXUSR:
        return f"not executable by its owner ({mode})"
    return None


def _sidecar(path: str) -> Tuple[Dict[str, Any], Optional[str]]:
    """(the sidecar's settings, None) or ({}, 'field: problem'). Absent: ({}, None)."""
    if not os.path.lexists(path):
        return {}, None
    # The sidecar can soften a gate (severity, gates): it is held to the file's own rule.
    problem = permission_problem(path, want_dir=False, executable=False)
    if problem:
        return {}, f"(file): refused: {problem}"
    try:
        data = safe_load(read_text_capped(path, CONFIG_CAP, nofollow=True))
    except (OSError, YamlError) as exc:
        return {}, f"(file): {exc}"
    if data is None:
        return {}, None
    if not isinstance(data, Mapping):
        return {}, "(top level): expected a mapping"
    extra = sorted(str(k) for k in data if k not in SIDECAR_KEYS)
    if extra:
        return {}, f"{extra[0]}: unknown key (known: {', '.join(SIDECAR_KEYS)})"
    out: Dict[str, Any] = {}
    for key, value in data.items():
        why = _field(key, value, out)
        if why:
            return {}, f"{key}: {why}"
    return out, None


def _field(key: str, value: Any, out: Dict[str, Any]) -> Optional[str]:
    if key in ("title", "remediation"):
        if not isinstance(value, str) or not value.strip() or len(value) > 200:
            return "a non-empty string of at most 200 characters"
        out[key] = value.strip()
    elif key == "severity":
        if value not in [s.value for s in Severity]:
            return "critical or warning"
        out[key] = Severity(value)
    elif key == "interval":
        if value not in [i.value for i in Interval]:
            return "bootstrap-only, slow or fast"
        out[key] = Interval(value)
    elif key == "timeout":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMEOUT_S:
            return f"whole seconds from 1 to {MAX_TIMEOUT_S}"
        out[key] = value
    elif key == "gates":
        if not isinstance(value, list) or any(p not in PATHS for p in value):
            return f"a list of allocation paths ({', '.join(PATHS)})"
        out[key] = tuple(p for p in PATHS if p in value)
    return None


def _check(name: str, path: str, dir_problem: Optional[str]) -> Check:
    base = os.path.splitext(path)[0]
    settings, sidecar_problem = _sidecar(base + ".yaml")
    deadline = int(settings.get("timeout", DEFAULT_TIMEOUT_S))
    common: Dict[str, Any] = dict(
        id=f"site-{name}", title=settings.get("title", f"site check {name}"),
        severity=settings.get("severity", Severity.CRITICAL),
        gates=settings.get("gates", PATHS), interval=settings.get("interval", Interval.SLOW),
        remediation=settings.get("remediation", REMEDIATION), failures=FAILURES,
        description=f"The site's own check {path} (docs/site-checks.md).",
    )
    problem = dir_problem or permission_problem(path, want_dir=False)
    if problem:
        return Check(**common, run=refusal(f"{path}: refused, never run: {problem}",
                                           "site-check-refused", path=path, problem=problem))
    if sidecar_problem:
        where = f"{base}.yaml: field {sidecar_problem}"
        return Check(**common, run=refusal(f"{where}; not run", "site-check-sidecar",
                                           path=path, sidecar=base + ".yaml"))
    # The engine's own deadline sits past the runner's, so the runner's answer is the one seen.
    directory = os.path.dirname(path)

    def vet() -> Optional[str]:
        # Asked again right before each run: `run` keeps the checks for its lifetime, and a
        # file or directory changed since the load (swapped for a symlink, made writable) is
        # not run.
        return permission_problem(directory, want_dir=True) or permission_problem(
            path, want_dir=False)

    return Check(**common, run=runner(path, deadline, vet), runs=(argv_for(path, deadline),),
                 timeout_s=deadline + 2 * RUNNER_GRACE_S)


def _dir_check(summary: str, code: str, **details: Any) -> Check:
    return Check(id=DIR_CHECK_ID, title="site-check directory", severity=Severity.CRITICAL,
                 gates=PATHS, interval=Interval.SLOW, remediation=REMEDIATION,
                 run=refusal(summary, code, **details), failures=FAILURES,
                 description="The configured site-check directory itself (docs/site-checks.md).")


def load_site_checks(directory: Optional[str]) -> List[Check]:
    """The checks of ``directory`` in name order (none when unset); a directory-level problem
    is one extra check, `site-checks`, unknown naming it."""
    if not directory:
        return []
    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        return [_dir_check(f"{directory}: cannot list the site-check directory "
                           f"({exc.strerror or exc})", "site-check-refused", path=directory)]
    dir_problem = permission_problem(directory, want_dir=True)
    checks: List[Check] = []
    bad: List[str] = []
    seen: Dict[str, str] = {}
    for entry in entries:
        if _IGNORED.search(entry):
            continue
        name = os.path.splitext(entry)[0]
        # fullmatch: `$` also matches before a final newline, so match() took "abc\n".
        if not NAME.fullmatch(name) or len(name) > MAX_NAME or name in seen:
            why = f"same name as {seen[name]}" if name in seen else "not lowercase kebab-case"
            # A file name may hold a newline or a control character: shown escaped, so the
            # summary stays one line.
            bad.append(f"{entry if entry.isprintable() else ascii(entry)} ({why})")
            continue
        seen[name] = entry
        if len(checks) >= MAX_CHECKS:
            bad.append(f"{entry} (more than {MAX_CHECKS} site checks)")
            continue
        checks.append(_check(name, os.path.join(directory, entry), dir_problem))
    if dir_problem:
        checks.append(_dir_check(f"{directory}: refused, nothing in it is run: {dir_problem}",
                                 "site-check-refused", path=directory, problem=dir_problem))
    elif bad:
        checks.append(_dir_check(f"{directory}: not run: {'; '.join(bad[:5])}",
                                 "site-check-name", path=directory, files=bad))
    return checks
