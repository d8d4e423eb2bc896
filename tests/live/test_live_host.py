"""The live-host tier: `check`, `collect` and `run` on the machine running the tests, with no
fixture, each fact compared with what the kernel says by an independent route (a child
process such as `cat`, `os.uname()`, the shell sourcing os-release). No fact the kernel can
give may come back null. The same tests hold on a GPU host: where a branch depends on the
machine (a loaded driver, containerd, chrony), both sides of it are asserted.

Runs the real entry point in child processes (`python -m agent.cli`), as an operator would.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

ENTRY = [sys.executable, "-m", "agent.cli"]
PROC_VERSION = "/proc/driver/nvidia/version"
PATHS = ("device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster")


def agent(args, **kw):
    proc = subprocess.run(ENTRY + args, capture_output=True, text=True, timeout=300, cwd=REPO,
                          stdin=subprocess.DEVNULL, **kw)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def sh(*argv):
    """The independent route: another program asks the kernel."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                          check=True).stdout


def kernel_boot_id():
    return sh("cat", "/proc/sys/kernel/random/boot_id").strip()


def os_release_by_shell():
    out = sh("sh", "-c", '. /etc/os-release 2>/dev/null || . /usr/lib/os-release; '
                         'printf "%s\\n%s\\n" "$ID" "$VERSION_ID"')
    os_id, version_id = (out.split("\n") + ["", ""])[:2]
    return os_id, version_id


def uptime_s():
    return float(sh("cat", "/proc/uptime").split()[0])


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """Keeps the agent off this machine's real state: its own state dir, no Kubernetes."""
    base = tmp_path_factory.mktemp("live")
    (base / "state").mkdir()
    cfg = base / "config.yaml"
    cfg.write_text(f"state_dir: {base / 'state'}\nkube:\n  enabled: false\n")
    return cfg


@pytest.fixture(scope="module")
def live_report(config):
    proc = agent(["check", "--config", str(config), "--format", "json"])
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert proc.returncode == (0 if doc["gate"]["open"] else 1)
    return {c["id"]: c for c in doc["checks"]}, doc


@pytest.fixture(scope="module")
def bundle(config, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "here.tar.gz"
    before = uptime_s()
    proc = agent(["collect", "--config", str(config), "-o", str(out)])
    after = uptime_s()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"bundle written to {out}\n"
    dest = out.parent / "x"
    with tarfile.open(out) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.12+ and later 3.9-3.11 patch releases
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # our own archive, written a moment ago
    return dest, out, before, after


# -- collect -----------------------------------------------------------------------------
def test_collect_records_the_kernels_boot_id(bundle):
    dest, _, _, _ = bundle
    meta = yaml.safe_load((dest / "bundle.yaml").read_text())
    want = kernel_boot_id()
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", want)
    assert meta["boot_id"] == want
    assert (dest / "root/proc/sys/kernel/random/boot_id").read_text().strip() == want


def test_collect_records_kernel_release_hostname_and_os_release(bundle):
    dest, _, _, _ = bundle
    meta = yaml.safe_load((dest / "bundle.yaml").read_text())
    assert (dest / "root/proc/sys/kernel/osrelease").read_text().strip() == os.uname().release
    assert (dest / "root/proc/sys/kernel/hostname").read_text().strip() == \
        sh("cat", "/proc/sys/kernel/hostname").strip()
    assert meta["hostname"] == sh("cat", "/proc/sys/kernel/hostname").strip()
    copied = dest / "root/etc/os-release"
    if Path("/etc/os-release").exists():
        assert copied.read_text() == sh("cat", "/etc/os-release")


def test_collect_records_uptime_between_two_independent_reads(bundle):
    dest, _, before, after = bundle
    captured = float((dest / "root/proc/uptime").read_text().split()[0])
    assert before <= captured <= after


def test_collect_records_every_kernel_fact(bundle):
    dest, _, _, _ = bundle
    facts = json.loads((dest / "host.json").read_text())
    # Lists (possibly empty on a host without a GPU), never null: the kernel can always say.
    assert isinstance(facts["pci_devices"], list)
    assert isinstance(facts["dev_nodes"], list)
    assert isinstance(facts["adjtimex"], dict) and isinstance(facts["adjtimex"]["state"], int)
    nvidia_nodes = sorted(f"/dev/{n}" for n in os.listdir("/dev") if n.startswith("nvidia")
                          and os.path.exists(f"/dev/{n}"))
    assert sorted(n["path"] for n in facts["dev_nodes"]) == [
        p for p in nvidia_nodes if os.path.exists(p) and not os.path.isdir(p)
        and os.stat(p).st_mode & 0o170000 == 0o020000]


def test_driver_version_file_is_captured_exactly_when_the_kernel_has_it(bundle):
    dest, _, _, _ = bundle
    captured = dest / "root" / PROC_VERSION.lstrip("/")
    if os.path.exists(PROC_VERSION):
        assert captured.read_text() == sh("cat", PROC_VERSION)
    else:
        assert not captured.exists()


def test_the_bundle_replays_the_live_verdicts(bundle, live_report, config):
    _, out, _, _ = bundle
    checks, doc = live_report
    proc = agent(["check", "--bundle", str(out), "--format", "json"])
    replay = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    # Facts that do not move between two reads a second apart.
    for cid in ("os-supported", "driver-loaded", "driver-branch"):
        assert (replay[cid]["status"], replay[cid]["summary"]) == \
            (checks[cid]["status"], checks[cid]["summary"]), cid
    assert replay["os-supported"]["details"]["kernel"] == os.uname().release


# -- check -------------------------------------------------------------------------------
def test_check_reports_this_kernel_and_os(live_report):
    checks, _ = live_report
    details = checks["os-supported"]["details"]
    assert details["kernel"] == os.uname().release
    assert (details["id"], details["version_id"]) == os_release_by_shell()


def test_check_sees_the_kernels_boot_id(live_report):
    checks, _ = live_report
    assert checks["allocation-owner"]["details"]["in_use"]["current_boot_id"] == kernel_boot_id()


def test_driver_verdict_follows_the_version_file(live_report):
    checks, _ = live_report
    if not os.path.exists(PROC_VERSION):
        assert checks["driver-loaded"]["status"] == "fail"
        assert f"{PROC_VERSION} absent" in checks["driver-loaded"]["summary"]
        assert checks["driver-branch"]["skip"] == "needs:driver-loaded"
    else:  # the same code path on a GPU host: the branch is judged from the same file
        text = sh("cat", PROC_VERSION)
        version = re.search(r"\b(\d{3})\.\d+(?:\.\d+)?\b", text.splitlines()[0])
        assert version, text
        assert checks["driver-branch"]["status"] != "skip"
        assert checks["driver-branch"]["details"]["branch"] == int(version.group(1))


def test_containerd_version_where_containerd_is_installed(live_report):
    checks, _ = live_report
    details = checks["containerd-nvidia-runtime"]["details"]
    binary = shutil.which("containerd")
    if binary is None:
        assert details["containerd_version"] is None or details["containerd_version_source"]
        return
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"\bv?(\d+\.\d+\.\d+)", out)
    assert m and details["containerd_version"] == m.group(1)


def test_time_sync_names_chrony_where_chronyd_answers(live_report):
    checks, _ = live_report
    chronyc = shutil.which("chronyc")
    answers = chronyc is not None and subprocess.run(
        [chronyc, "-c", "tracking"], capture_output=True, timeout=30).returncode == 0
    daemon = checks["time-sync"]["details"].get("daemon")
    if answers:
        assert daemon == "chrony"
    else:
        assert daemon != "chrony"


def test_every_path_gate_matches_check_with_that_path_alone(live_report, config):
    _, doc = live_report
    for path in PATHS:
        alone = json.loads(agent(["check", "--config", str(config), "--path", path,
                                  "--format", "json"]).stdout)
        # Live facts can move between runs (a time daemon, a log line): compare only what
        # the driver and OS decide, which cannot change between two runs a second apart.
        stable = {"os-supported", "driver-loaded", "driver-branch", "toolkit-version",
                  "kubelet-version"}
        assert [b for b in doc["gates"][path]["blocking"] if b in stable] == \
            [b for b in alone["gate"]["blocking"] if b in stable], path


# -- sticky faults across a reboot ---------------------------------------------------------
def _sticky_state(boot_id):
    fixture = REPO / "tests/fixtures/bundles/xid-sticky-old-boot/host.json"
    state = json.loads(fixture.read_text())["sticky"]
    state["boot_id"] = boot_id
    return state


@pytest.mark.parametrize("same_boot", [True, False], ids=["this-boot", "after-reboot"])
def test_a_sticky_fault_holds_within_its_boot_and_passes_after_a_reboot(tmp_path, same_boot):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    here = kernel_boot_id()
    other = "6f1c2a9e-5d1b-4c8e-9a51-0000000000b0"
    assert other != here
    (state_dir / "sticky.json").write_text(json.dumps(_sticky_state(here if same_boot else other)))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"state_dir: {state_dir}\nkube:\n  enabled: false\n")
    proc = agent(["check", "--config", str(cfg), "--only", "gpu-xid", "--format", "json"])
    xid = next(c for c in json.loads(proc.stdout)["checks"] if c["id"] == "gpu-xid")
    if same_boot:
        assert xid["status"] == "fail" and "79" in xid["summary"], xid
        assert proc.returncode == 1
    else:
        assert xid["status"] != "fail", xid
        assert xid["details"]["fatal"] == []


# -- run -----------------------------------------------------------------------------------
def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port, deadline):
    """The metrics body once the first cycle is published (bounded in time and tries)."""
    for _ in range(600):
        if time.monotonic() > deadline:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
            if "gpu_node_agent_gate_open" in body and "gpu_node_agent_check_status" in body:
                return body
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("no metrics from `run` within its deadline")


def test_run_serves_this_hosts_verdict_and_stops_on_sigterm(config, live_report):
    checks, doc = live_report
    port = _free_port()
    proc = subprocess.Popen(
        ENTRY + ["run", "--config", str(config), "--listen-address", f"127.0.0.1:{port}"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    try:
        body = _scrape(port, time.monotonic() + 120)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    gates = dict(re.findall(r'^gpu_node_agent_gate_open\{path="([^"]+)"\} (\S+)$', body, re.M))
    assert set(gates) == set(PATHS)
    # A gate `check` found closed by a fact that cannot change in a minute is closed in `run`.
    for path in PATHS:
        if {"driver-loaded", "driver-branch", "kubelet-version"} & set(
                doc["gates"][path]["blocking"]):
            assert float(gates[path]) == 0.0, path
    # driver-loaded decides the same way in `run` as in `check` on this host.
    # (the series also carries the check's `severity` label since the default exposition was
    # cut: docs/metrics.md)
    loaded = re.search(r'^gpu_node_agent_check_status\{check="driver-loaded",'
                       r'(?:[a-z_]+="[^"]*",)*status="pass"(?:,[a-z_]+="[^"]*")*\} (\S+)$',
                       body, re.M)
    assert loaded is not None
    want = 1.0 if checks["driver-loaded"]["status"] == "pass" else 0.0
    if not os.path.exists(PROC_VERSION):
        assert want == 0.0
    assert float(loaded.group(1)) == want
