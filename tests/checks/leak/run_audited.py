"""Runs `gpu-node-agent check --bundle B` under a sys.addaudithook that records every open,
directory listing, exec, socket connect and library load outside the allowed places.

Usage: python run_audited.py BUNDLE [PATH]   (prints one JSON line: {"violations", "report"})

Allowed: the bundle (and the temp dir a .tar.gz is unpacked into), the Python installation
(stdlib and site-packages: lazy imports), and this repository's own package directories.
Everything the agent imports for a check is imported before the hook is installed.

The Host resolves a bundle path one component at a time from a descriptor of root/
(agent/host/resolve.py: openat(2) with O_PATH|O_NOFOLLOW), which the hook sees as a relative
name without its descriptor. So a relative name is allowed only while that walk runs, and only
as one component (no "/", not "." or ".."): the file itself is then opened by its absolute
path under root/, which the hook checks as any other. The count is printed as "walked".
"""
import io
import json
import os
import sys
import tempfile
import threading
from contextlib import redirect_stdout

bundle = os.path.realpath(sys.argv[1])
path = sys.argv[2] if len(sys.argv) > 2 else "dra"
repo = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, repo)

import agent.cli  # noqa: E402
import agent.host.resolve  # noqa: E402
import checks.registry  # noqa: E402,F401
from agent.version import version  # noqa: E402

version()  # package metadata is read once, before the hook
# The policy files are read and the config and policy records built once, before the hook.
agent.cli.resolve_policy(__import__("agent.config").config.Config(), None, path)

ALLOWED = [
    bundle,
    os.path.join(os.path.realpath(tempfile.gettempdir()), "gna-bundle-"),
    os.path.realpath(sys.prefix),
    os.path.realpath(sys.base_prefix),
    os.path.realpath(sys.exec_prefix),
    os.path.join(repo, "agent"),
    os.path.join(repo, "checks"),
    os.path.dirname(os.path.realpath(__file__)),  # sys.path[0]: the import system lists it
] + [os.path.realpath(p) for p in sys.path if p and "site-packages" in p]
WATCHED = {"open", "os.listdir", "os.scandir", "glob.glob", "os.exec", "os.posix_spawn",
           "os.spawn", "os.system", "subprocess.Popen", "socket.connect", "ctypes.dlopen",
           "os.fork", "pty.spawn"}
ALWAYS_BAD = {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen",
              "socket.connect", "os.fork", "pty.spawn"}
violations = []
state = {"walked": 0}
walking = threading.local()  # per thread: the engine runs checks in worker threads
_walk = agent.host.resolve.Resolver._walk


def _flagged_walk(self, *args, **kwargs):
    walking.on = True
    try:
        return _walk(self, *args, **kwargs)
    finally:
        walking.on = False


agent.host.resolve.Resolver._walk = _flagged_walk


def hook(event, args):
    if event not in WATCHED:
        return
    if event in ALWAYS_BAD:
        violations.append([event, repr(args)[:200]])
        return
    target = args[0] if args else None
    if event == "ctypes.dlopen":
        violations.append([event, repr(target)])
        return
    if isinstance(target, int) or target is None:
        return  # an fd already opened (checked when it was opened)
    if isinstance(target, bytes):
        target = target.decode("utf-8", "replace")
    text = os.fspath(target)
    if not os.path.isabs(text):
        if getattr(walking, "on", False) and "/" not in text and text not in (".", ".."):
            state["walked"] += 1
            return
        violations.append([event, "relative: " + text])
        return
    real = os.path.realpath(text)
    if real == "/dev/null" or any(real == a or real.startswith(a.rstrip("/") + "/") or
                                  (a.endswith("-") and real.startswith(a)) for a in ALLOWED):
        return
    violations.append([event, real])


sys.addaudithook(hook)
out = io.StringIO()
with redirect_stdout(out):
    rc = agent.cli.main(["check", "--bundle", sys.argv[1], "--path", path, "--format", "json"])
print(json.dumps({"rc": rc, "violations": violations, "walked": state["walked"],
                  "report": out.getvalue()}))
