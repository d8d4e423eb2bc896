"""Hostile bundles through the real command line: each one is refused with exit 2 and one
line on stderr, nothing outside the bundle is written (a canary directory the links point at
stays byte-for-byte the same, the temp directory holds nothing new) and no unpacked
``gna-bundle-*`` directory is left behind.

Run this file under the oldest interpreter too (``.venv-3.9/bin/python``, pyenv 3.9.18): its
tarfile still has the quadratic PAX parser (CVE-2024-6232), so the PAX case there shows that
the pre-scan refuses the archive before tarfile parses it.
"""
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, bundle
from tests.hostile_bundles import (
    ARCHIVES,
    CANARY_TEXT,
    DIRECTORIES,
    META,
    dirm,
    make_canary,
    reg,
    snapshot,
    sym,
    write_tar,
)

# Generous: a refusal takes well under a second; this only bounds a hang (the unpatched PAX
# parser runs for hours), it is not a speed assertion.
HANG_LIMIT_S = 300


def _cli(args, tmpdir: Path, timeout: float = HANG_LIMIT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


@pytest.fixture
def place(tmp_path):
    """(where bundles are built, the canary directory, the TMPDIR the CLI gets)."""
    work = tmp_path / "work"
    work.mkdir()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    return work, make_canary(tmp_path), tmpdir


def _refused(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-node-agent: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# What each refusal must say (the defect it names), written from the bundle format rules.
EXPECT = {
    "escape-dir-link": "lies under the symlink 'root/evil'",
    "escape-file-link": "appears twice",
    "escape-dotdot-chain": "lies under the symlink 'l1'",
    "root-to-slash": "root: must be a directory, not a symlink",
    "kmsg-to-dev-zero": "kmsg.log: must be a regular file, not a symlink",
    "bundle-yaml-outside": "bundle.yaml",
    "duplicate-member": "appears twice",
    "pax-1mib": "PAX header",
    "alias-bomb": "alias",
    "gzip-bomb": "unpacks to more than",
    "dir-root-to-slash": "root: must be a directory, not a symlink",
    "dir-kmsg-to-dev-zero": "kmsg.log: must be a regular file, not a symlink",
    "dir-bundle-yaml-outside": "bundle.yaml: must be a regular file, not a symlink",
    "dir-commands-fifo": "commands.yaml: must be a regular file, not a device, FIFO or socket",
}


@pytest.mark.parametrize("case", sorted({**ARCHIVES, **DIRECTORIES}))
def test_hostile_bundle_is_refused_and_writes_nothing_outside(place, case):
    work, canary, tmpdir = place
    build = {**ARCHIVES, **DIRECTORIES}[case]
    target = build(work, canary)
    before_canary = snapshot(canary)
    before_work = {p for p in snapshot(work) if not p.startswith(target.name)}
    line = _refused(_cli(["check", "--bundle", str(target), "--format", "json"], tmpdir))
    assert EXPECT[case] in line, line
    assert snapshot(canary) == before_canary
    assert (canary / "target.txt").read_bytes() == CANARY_TEXT
    # Nothing new beside the bundle (the `l1/l2/x` chain would land in its parent).
    assert {p for p in snapshot(work) if not p.startswith(target.name)} == before_work
    assert os.listdir(tmpdir) == []  # no gna-bundle-* left, nothing written above it


def test_root_link_to_slash_cannot_apply_this_machines_verdict(place):
    work, canary, tmpdir = place
    target = DIRECTORIES["dir-root-to-slash"](work, canary)
    line = _refused(_cli(["check", "--bundle", str(target), "--apply"], tmpdir))
    assert "must be a directory" in line


def test_apply_is_refused_for_a_host_root_of_slash(place):
    # "live" is the source type: `--host-root /` is a tree that happens to be "/", and its
    # verdict is never published (the old rule, root resolves to "/", let it through).
    _, _, tmpdir = place
    line = _refused(_cli(["check", "--host-root", "/", "--apply", "--skip", "time-sync"], tmpdir))
    assert "--apply" in line and "--host-root" in line


def test_a_lone_top_level_symlink_is_not_taken_as_the_bundle_folder(place):
    work, canary, tmpdir = place
    real = work / "real"
    (real / "root").mkdir(parents=True)
    (real / "bundle.yaml").write_bytes(META)
    archive = write_tar(work / "lone-link.tar.gz", [sym("b", str(real))])
    line = _refused(_cli(["check", "--bundle", str(archive)], tmpdir))
    assert "bundle.yaml: missing" in line
    assert os.listdir(tmpdir) == []


def test_the_same_bundle_unpacks_when_it_is_benign(place):
    # The control: the builders' legitimate parts load, so each refusal above is the hostile
    # member's doing. Absolute links under root/ stay allowed (chroot semantics).
    work, canary, tmpdir = place
    archive = write_tar(work / "ok.tar.gz", [
        reg("bundle.yaml", META), dirm("root"), reg("root/etc/os-release", b"ID=ubuntu\n"),
        sym("root/etc/os-release.link", "/etc/os-release"),
    ])
    result = _cli(["check", "--bundle", str(archive), "--only", "os-supported",
                   "--format", "json"], tmpdir)
    assert result.returncode in (0, 1), result.stderr
    assert os.listdir(tmpdir) == []


def test_fixture_bundle_as_tar_gz_judged_as_the_directory_is(place):
    # The extractor changes nothing for a real bundle: packed, every check has the status it
    # has when the same bundle is read as a directory.
    work, _, tmpdir = place
    archive = work / "host-foundation-only.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle("host-foundation-only"), arcname="host-foundation-only")
    packed = _cli(["check", "--bundle", str(archive), "--format", "json"], tmpdir)
    plain = _cli(["check", "--bundle", bundle("host-foundation-only"), "--format", "json"], tmpdir)
    assert packed.returncode == plain.returncode and packed.returncode in (0, 1), packed.stderr

    def statuses(out):
        return {c["id"]: (c["status"], c["summary"]) for c in json.loads(out)["checks"]}

    assert statuses(packed.stdout) == statuses(plain.stdout)
    assert len(statuses(packed.stdout)) > 10
    assert os.listdir(tmpdir) == []


SIGTERM_RUNNER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[2])
    import agent.engine, agent.cli
    def run(self, host, *a, **k):
        # The unpacked copy exists now; the process is told to stop in the middle of a check.
        print("UNPACKED", host.root, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt")
    agent.engine.Engine.run = run
    sys.exit(agent.cli.main(["check", "--bundle", sys.argv[1]]))
""")


def test_sigterm_in_the_middle_of_a_check_removes_the_unpacked_bundle(place):
    work, _, tmpdir = place
    archive = write_tar(work / "ok.tar.gz", [reg("bundle.yaml", META), dirm("root")])
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.run([sys.executable, "-c", SIGTERM_RUNNER, str(archive), str(REPO)],
                          capture_output=True, text=True, timeout=HANG_LIMIT_S, env=env)
    assert "UNPACKED " + str(tmpdir) in proc.stdout  # it was unpacked under our TMPDIR
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert os.listdir(tmpdir) == []


def test_stale_unpacked_bundles_of_dead_processes_are_removed(place):
    work, _, tmpdir = place
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old = time.time() - 2 * 3600
    stale = tmpdir / f"gna-bundle-{dead.pid}-abc"
    alive = tmpdir / f"gna-bundle-{os.getpid()}-def"  # this test process: still running
    fresh = tmpdir / f"gna-bundle-{dead.pid}-ghi"
    other = tmpdir / "not-ours"
    for d in (stale, alive, fresh, other):
        (d / "root").mkdir(parents=True)
    for d in (stale, alive, other):
        os.utime(d, (old, old))
    archive = write_tar(work / "ok.tar.gz", [reg("bundle.yaml", META), dirm("root")])
    result = _cli(["check", "--bundle", str(archive), "--only", "os-supported"], tmpdir)
    assert result.returncode in (0, 1), result.stderr
    assert sorted(os.listdir(tmpdir)) == sorted([alive.name, fresh.name, other.name])


def test_pax_header_is_refused_before_tarfile_parses_anything(tmp_path, monkeypatch):
    # In-process, on whatever interpreter runs this file: tarfile must never be opened.
    from agent.errors import BundleError
    from agent.host import bundle_unpack as bundle_mod

    archive = ARCHIVES["pax-1mib"](tmp_path, make_canary(tmp_path))

    def no_tarfile(*a, **k):
        raise AssertionError("tarfile.open reached with the hostile PAX header")

    monkeypatch.setattr(bundle_mod.tarfile, "open", no_tarfile)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(BundleError, match="PAX header"):
        bundle_mod._safe_extract(archive, dest)
    assert os.listdir(dest) == []


def test_decompression_is_capped_whatever_the_headers_say(tmp_path, monkeypatch):
    # The stream cap itself (MAX_STREAM_BYTES), not the per-member size: shrink it so a small
    # archive of many small members crosses it.
    from agent.errors import BundleError
    from agent.host import bundle_prescan, bundle_unpack

    archive = write_tar(tmp_path / "many.tar.gz",
                        [reg("bundle.yaml", META)] + [reg(f"root/f{i}", b"y" * 4096)
                                                       for i in range(64)])
    monkeypatch.setattr(bundle_prescan, "MAX_STREAM_BYTES", 64 * 1024)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(BundleError, match="decompresses to more than 65536 bytes"):
        bundle_unpack._safe_extract(archive, dest)


@pytest.mark.parametrize("members, problem", [
    ([reg("a/" * 2100 + "x")], "4202-byte GNU long name"),
    ([reg("x" * 300)], "name too long"),
    ([reg("bundle.yaml", META), sym("d", "sub"), reg("d/f")], "lies under the symlink 'd'"),
    ([reg("bundle.yaml", META), reg("f"), reg("f/g")], "lies under the file 'f'"),
    ([reg("bundle.yaml", META), reg("a/b"), reg("a")], "appears twice"),
    ([reg("bundle.yaml", META), sym("s", "/x"), sym("s", "/y")], "appears twice"),
])
def test_member_rules(tmp_path, members, problem):
    from agent.errors import BundleError
    from agent.host.bundle import load_bundle

    archive = write_tar(tmp_path / "m.tar.gz", members, fmt=tarfile.GNU_FORMAT)
    with pytest.raises(BundleError, match=problem) as info:
        load_bundle(archive)
    assert "\n" not in str(info.value)


def test_pre_scan_refuses_what_tarfile_would_desynchronise_on(tmp_path):
    # A PAX `size` keyword changes where tarfile looks for the next header: refused, so the
    # pre-scan and tarfile always walk the same headers.
    from agent.errors import BundleError
    from agent.host.bundle import load_bundle

    info, data = reg("bundle.yaml", META)
    info.pax_headers = {"size": str(len(data))}
    archive = write_tar(tmp_path / "size.tar.gz", [(info, data)])
    with pytest.raises(BundleError, match="keyword 'size' is refused"):
        load_bundle(archive)


def test_live_is_the_source_type_not_the_path(tmp_path):
    from agent.host.bundle import load_bundle
    from agent.host.seam import Host

    assert Host("/").is_live is False  # a tree at "/" is still a tree
    assert Host("/", live=True).is_live is True
    with pytest.raises(ValueError):
        Host(tmp_path, live=True)
    loaded = load_bundle(bundle("host-foundation-only"))
    try:
        assert loaded.host.is_live is False
    finally:
        loaded.close()


AUDITED_TAR_RUNNER = textwrap.dedent("""
    # tests/checks/leak/run_audited.py's guard, for a .tar.gz: the extractor opens names
    # relative to a directory descriptor (openat), which an audit hook sees without the
    # descriptor, so a relative name is allowed only while _safe_extract (or the rmtree that
    # removes the unpacked copy, which walks by descriptor as well) runs; listing
    # $TMPDIR is the stale-directory clean-up. The Host's path walk (agent/host/resolve.py)
    # opens one component at a time relative to a descriptor too: allowed while it runs, one
    # component only, counted apart ("walked"). Everything else as there.
    import io, json, os, sys, tempfile, threading
    from contextlib import redirect_stdout
    archive, repo = os.path.realpath(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, repo)
    import agent.cli, checks.registry, agent.host.bundle, agent.host.bundle_unpack as B
    import agent.host.resolve as R
    from agent.version import version
    version()
    agent.cli.resolve_policy(__import__("agent.config").config.Config(), None, "dra")
    tmp = os.path.realpath(tempfile.gettempdir())
    allowed = [archive, os.path.join(tmp, "gna-bundle-"), os.path.realpath(sys.prefix),
               os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix),
               os.path.join(repo, "agent"), os.path.join(repo, "checks")] + [
               os.path.realpath(p) for p in sys.path if p and "site-packages" in p]
    state = {"extracting": False, "relative": 0, "walked": 0}
    def flagged(orig):
        def wrapped(*a, **k):
            state["extracting"] = True
            try:
                return orig(*a, **k)
            finally:
                state["extracting"] = False
        return wrapped
    B._safe_extract = flagged(B._safe_extract)
    B.shutil.rmtree = flagged(B.shutil.rmtree)  # removing the copy walks by descriptor too
    walking = threading.local()  # per thread: the engine runs checks in worker threads
    def walk_flagged(orig):
        def wrapped(*a, **k):
            walking.on = True
            try:
                return orig(*a, **k)
            finally:
                walking.on = False
        return wrapped
    R.Resolver._walk = walk_flagged(R.Resolver._walk)
    bad = {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen",
           "socket.connect", "os.fork", "pty.spawn", "ctypes.dlopen"}
    violations = []
    def hook(event, args):
        if event in bad:
            violations.append([event, repr(args)[:200]])
            return
        if event not in ("open", "os.listdir", "os.scandir", "glob.glob"):
            return
        target = args[0] if args else None
        if isinstance(target, int) or target is None:
            return
        text = os.fsdecode(target)
        if not os.path.isabs(text):
            if state["extracting"]:
                state["relative"] += 1
                return
            if getattr(walking, "on", False) and "/" not in text and text not in (".", ".."):
                state["walked"] += 1
                return
            violations.append([event, "relative: " + text])
            return
        real = os.path.realpath(text)
        if event == "os.scandir" and real == tmp:
            return
        if real == "/dev/null" or any(real == a or real.startswith(a.rstrip("/") + "/") or
                                      (a.endswith("-") and real.startswith(a)) for a in allowed):
            return
        violations.append([event, real])
    sys.addaudithook(hook)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = agent.cli.main(["check", "--bundle", archive, "--format", "json"])
    print(json.dumps({"rc": rc, "violations": violations, "relative": state["relative"],
                      "walked": state["walked"], "report": out.getvalue()}))
""")


def test_packed_bundle_under_an_audit_hook_reads_nothing_outside(place):
    work, _, tmpdir = place
    archive = work / "host-foundation-only.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle("host-foundation-only"), arcname="host-foundation-only")
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.run([sys.executable, "-c", AUDITED_TAR_RUNNER, str(archive), str(REPO)],
                          capture_output=True, text=True, timeout=HANG_LIMIT_S, env=env, cwd=REPO)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["violations"] == [], result["violations"][:10]
    assert result["relative"] > 0  # the extractor did go through directory descriptors
    assert result["walked"] > 0  # and so did the Host's reads under root/
    assert result["rc"] in (0, 1) and json.loads(result["report"])["checks"]
    assert os.listdir(tmpdir) == []


@pytest.mark.parametrize("where", [{"bundle": "b", "host_root": None},
                                   {"bundle": None, "host_root": "/"}])
def test_run_never_publishes_a_fixture_even_when_the_config_names_a_kubeconfig(where):
    from types import SimpleNamespace

    from agent.cli_kube import ApiWiring
    from agent.cli_run import _node_outputs
    from agent.config import Config

    config = Config.model_validate({"kube": {"kubeconfig": "/etc/kubernetes/kubelet.conf"},
                                    "nfd": {"path": "/etc/kubernetes/node-feature-discovery"
                                                    "/features.d/gpu-node-agent"}})
    args = SimpleNamespace(dry_run=False, **where)
    live = where["bundle"] is None and where["host_root"] is None  # as daemon_main decides
    api = ApiWiring()  # the composition root's API side (agent/cli_kube.py), as run builds it
    assert _node_outputs(args, live, api)(SimpleNamespace(config=config)) == []
    # The same config on the live machine does publish (the control).
    live_args = SimpleNamespace(dry_run=True, bundle=None, host_root=None)
    outputs = _node_outputs(live_args, True, api)(SimpleNamespace(config=config))
    assert [type(o).__name__ for o in outputs] == ["Publisher"]
    for out in outputs:
        out.close()
    api.close()


def test_signal_handlers_are_restored_and_a_later_handler_is_kept(tmp_path):
    import signal as sig

    from agent.host.bundle import load_bundle

    archive = write_tar(tmp_path / "ok.tar.gz", [reg("bundle.yaml", META), dirm("root")])
    before = sig.getsignal(sig.SIGTERM)
    sig.signal(sig.SIGTERM, sig.SIG_DFL)
    try:
        loaded = load_bundle(archive)
        assert sig.getsignal(sig.SIGTERM) is not sig.SIG_DFL  # ours while unpacked
        loaded.close()
        assert sig.getsignal(sig.SIGTERM) is sig.SIG_DFL
        loaded = load_bundle(archive)

        def daemons_own(*_):
            return None

        sig.signal(sig.SIGTERM, daemons_own)  # installed while the bundle is open
        loaded.close()
        assert sig.getsignal(sig.SIGTERM) is daemons_own
    finally:
        sig.signal(sig.SIGTERM, before)
