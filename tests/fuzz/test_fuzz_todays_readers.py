"""Today's new readers over hostile input: rpm's header blobs and SQLite database
(checks/rpmdb.py), ld.so.cache images (agent/ldcache.py, which agent/host/driver_root.py reads), a site check's answer
(checks/site/outcome.py), CDI specs for the native workload route
(agent/host/workload_native.py), the k8s snap's args file (checks/containerd/snap.py), and
the checks that read TOML, kubelet args, systemctl output, the GPU snapshot and Node /
ResourceSlice JSON (toolkit-runtime-config, registration-labels, imex, gpu-sku, gpu-capacity,
allocation-owner) through a host whose every answer is fuzzed. Each returns its own error type
or an Outcome; nothing else escapes."""
import sqlite3
import struct
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from hypothesis import strategies as st

from agent.config import Config
from agent.host.workload_native import cdi_edits
from agent.hostview import CommandResult
from agent.ldcache import NEW_MAGIC, OLD_MAGIC, cache_entries
from agent.model import PATHS, Outcome, Status
from checks.allocation.allocation_owner import ALLOCATION_OWNER
from checks.allocation.gpu_capacity import GPU_CAPACITY
from checks.containerd.snap import snap_config
from checks.fabric.imex import IMEX
from checks.gpu.gpu_sku import GPU_SKU
from checks.policy import ResolvedPolicy, load_policy
from checks.registration_labels import REGISTRATION_LABELS
from checks.rpmdb import RpmDbError, header_fields, installed_versions
from checks.site.outcome import interpret
from checks.toolkit_runtime_config import TOOLKIT_RUNTIME_CONFIG
from tests.fixtures.families.toolkit import rpm_header
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import JSON, NASTY, SNAPSHOT, TEXT

STATUSES = {s.value for s in Status}

# --- rpm header blobs and the database -------------------------------------------------------

HEADER = rpm_header([(1000, "nvidia-container-toolkit"), (1001, "1.18.0"), (1002, "1")])


def _mutate(blob: bytes, edits: List[Any]) -> bytes:
    out = bytearray(blob)
    for at, value in edits:
        if out:
            out[at % len(out)] = value
    return bytes(out)


BLOBS = st.one_of(
    st.binary(max_size=200),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8).map(
        lambda e: _mutate(HEADER, e)),
    st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)).map(
        lambda c: struct.pack(">II", *c) + HEADER[8:]),
)


def headers(blob: Any) -> None:
    try:
        found = header_fields(blob)
    except RpmDbError:
        return
    expect(all(isinstance(v, str) and len(v) <= 1024 for v in found.values()),
           "a field that is not bounded text", found)


def _database() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rpmdb.sqlite"
        db = sqlite3.connect(str(path))
        db.execute("CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "blob BLOB NOT NULL)")
        db.execute("INSERT INTO Packages (blob) VALUES (?)", (HEADER,))
        db.commit()
        db.close()
        return path.read_bytes()


DATABASE = _database()
DATABASES = st.one_of(
    st.lists(st.tuples(st.integers(0, len(DATABASE) - 1), st.integers(0, 255)), min_size=1,
             max_size=12).map(lambda e: _mutate(DATABASE, e)),
    st.integers(16, len(DATABASE)).map(lambda n: DATABASE[:n]),
    st.binary(max_size=64).map(lambda b: b"SQLite format 3\x00" + b),
)


def databases(data: Any) -> None:
    try:
        found = installed_versions(data, ["nvidia-container-toolkit"])
    except RpmDbError:
        return
    expect(all(isinstance(v, str) and isinstance(r, str) for v, r in found.values()),
           "a version that is not text", found)


test_rpm_headers_quick = quick(BLOBS, headers)
test_rpm_headers_deep = deep("rpm header blobs", BLOBS, headers)
test_rpmdb_quick = quick(DATABASES, databases)
test_rpmdb_deep = deep("rpm SQLite database", DATABASES, databases)

# --- ld.so.cache -----------------------------------------------------------------------------


def _cache(count: int, key: int, value: int, flags: int, tail: bytes, old: Optional[int]) -> bytes:
    new = NEW_MAGIC + struct.pack("<II", count, len(tail)) + b"\0" * 20
    new += struct.pack("<iIIIQ", flags, key, value, 0, 0) + tail
    if old is None:
        return new
    head = OLD_MAGIC + b"\0" + struct.pack("<I", old)
    return head + b"\0" * ((-len(head)) % 8) + new


CACHES = st.one_of(
    st.binary(max_size=200),
    st.builds(_cache, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
              st.integers(0, 2**32 - 1), st.sampled_from([0x0303, 0x0A03, 0x0003, -1]),
              st.binary(max_size=64), st.one_of(st.none(), st.integers(0, 2**32 - 1))),
)


def caches(data: Any) -> None:
    for machine in ("x86_64", "aarch64"):
        for name, path in cache_entries(data, machine):
            expect(isinstance(name, str) and isinstance(path, str), "an entry not text")


test_ld_so_cache_quick = quick(CACHES, caches)
test_ld_so_cache_deep = deep("ld.so.cache", CACHES, caches)

# --- a site check's answer -------------------------------------------------------------------

FIRST_LINE = st.one_of(
    JSON.map(lambda v: __import__("json").dumps(v)),
    st.builds(lambda s, m, d: __import__("json").dumps({"status": s, "summary": m, "details": d}),
              st.one_of(st.sampled_from(["pass", "warn", "fail"]), JSON), JSON, JSON),
    st.integers(0, 3000).map(lambda n: '{"details":' + "[" * n + "]" * n + "}"),
    TEXT, NASTY)
ANSWERS = st.builds(
    lambda first, rest, rc, timed_out: CommandResult(("x",), rc, first + "\n" + rest, rest,
                                                     timed_out=timed_out),
    FIRST_LINE, NASTY, st.one_of(st.sampled_from([0, 1, 2, 124, 126, 127, -9]), st.integers()),
    st.booleans())


def answers(res: Any) -> None:
    out = interpret(res, "/etc/site.d/x.sh", 30)
    expect(str(out.status) in STATUSES, "status", out.status)
    expect(len(out.summary) <= 400, "an unbounded summary", len(out.summary))
    if str(out.status) == "pass":
        expect(res.rc == 0 and not res.timed_out, "pass without exit 0", res)


test_site_answer_quick = quick(ANSWERS, answers)
test_site_answer_deep = deep("site-check answers", ANSWERS, answers)

# --- CDI specs for ctr -----------------------------------------------------------------------

EDITS = st.fixed_dictionaries({}, optional={
    "env": st.one_of(st.lists(st.one_of(NASTY, JSON), max_size=3), JSON),
    "mounts": st.one_of(st.lists(st.one_of(st.fixed_dictionaries(
        {"hostPath": st.one_of(NASTY, JSON), "containerPath": st.one_of(NASTY, JSON)},
        optional={"options": JSON}), JSON), max_size=3), JSON),
    "deviceNodes": st.one_of(st.lists(st.one_of(st.fixed_dictionaries(
        {}, optional={"path": st.one_of(NASTY, JSON), "hostPath": JSON}), JSON), max_size=3),
        JSON),
    "hooks": JSON,
})
SPECS = st.one_of(
    st.builds(lambda top, dev: {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
                                "containerEdits": top,
                                "devices": [{"name": "all", "containerEdits": dev}]},
              st.one_of(EDITS, JSON), st.one_of(EDITS, JSON)),
    JSON)


def cdi(spec: Any) -> None:
    import json

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "nvidia.json").write_text(json.dumps(spec))
        try:
            flags, notes = cdi_edits([d], "nvidia.com/gpu=all")
        except LookupError:
            return
    expect(all(isinstance(f, str) and f.startswith("--") for f in flags), "a flag", flags)
    expect(all(not f.startswith("--mount=") or f.count(",") == 3 for f in flags),
           "a --mount with extra fields", flags)


test_cdi_spec_quick = quick(SPECS, cdi)
test_cdi_spec_deep = deep("CDI spec to ctr flags", SPECS, cdi)

# --- checks over a host whose every answer is fuzzed ----------------------------------------


class AnyHost:
    """Every read, command and fact answered from one fuzzed case."""

    is_live = False

    def __init__(self, case: Dict[str, Any]) -> None:
        self.case = case

    def read_text_or_none(self, path: str) -> Optional[str]:
        return self.case["files"].get(path, self.case["text"])

    def read_text(self, path: str) -> str:
        text = self.read_text_or_none(path)
        if text is None:
            raise FileNotFoundError(path)
        return text

    def is_file(self, path: str) -> bool:
        return self.case["text"] is not None

    def exists(self, path: str) -> bool:
        return self.case["text"] is not None

    def is_socket(self, path: str) -> bool:
        return bool(self.case["sockets"])

    def glob(self, pattern: str) -> List[str]:
        return ["/var/lib/kubelet/device-plugins/nvidia-gpu.sock"] if self.case["sockets"] else []

    def listdir(self, path: str) -> List[str]:
        return []

    def run(self, argv: List[str], timeout: float = 0.0) -> CommandResult:
        rc, out, err = self.case["run"]
        return CommandResult(tuple(argv), rc, out, err)

    def fact(self, name: str) -> Any:
        return self.case["facts"].get(name)

    def gpus(self) -> Any:
        return self.case["snapshot"]

    def boot_id(self) -> Optional[str]:
        return "00000000-0000-0000-0000-000000000000"

    def kmsg(self) -> List[str]:
        return []


DEVICE = st.fixed_dictionaries({}, optional={
    "name": NASTY, "attributes": st.one_of(st.fixed_dictionaries({}, optional={
        "uuid": st.one_of(st.fixed_dictionaries(
            {"string": st.just("GPU-01000100-0000-0000-0000-000000000000")}), JSON),
        "parentUUID": JSON}), JSON)})
SLICE = st.fixed_dictionaries({}, optional={
    "spec": st.one_of(st.fixed_dictionaries({}, optional={
        "driver": st.one_of(st.just("gpu.nvidia.com"), JSON),
        "nodeName": JSON, "devices": st.one_of(st.lists(DEVICE, max_size=3), JSON)}), JSON),
    "metadata": JSON})
NODE = st.fixed_dictionaries({}, optional={
    "status": st.one_of(st.fixed_dictionaries({}, optional={
        "allocatable": st.one_of(st.dictionaries(
            st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb",
                             "cpu"]), st.one_of(st.sampled_from(["8", "1k", "-1", "1e400"]),
                                                JSON), max_size=3), JSON),
        "capacity": JSON, "conditions": JSON}), JSON),
    "metadata": st.one_of(st.fixed_dictionaries({}, optional={"labels": JSON, "name": NASTY}),
                          JSON),
    "spec": JSON})
FACTS = st.fixed_dictionaries({}, optional={
    "node": st.one_of(NODE, JSON),
    "resourceslices": st.one_of(st.fixed_dictionaries({}, optional={
        "items": st.one_of(st.lists(SLICE, max_size=3), JSON), "error": JSON}), JSON),
    "sticky": JSON, "dev_nodes": JSON, "pci_devices": JSON})
TOML = st.one_of(
    st.builds(lambda mode, env, mounts: f"{env}\n{mounts}\n[nvidia-container-runtime]\n{mode}\n",
              st.sampled_from(['mode = "cdi"', "mode = 7", 'mode = "' + "x" * 5000 + '"', "",
                               "mode = [1, 2]"]),
              st.sampled_from(["accept-nvidia-visible-devices-envvar-when-unprivileged = false",
                               "accept-nvidia-visible-devices-envvar-when-unprivileged = 1", ""]),
              st.sampled_from(["accept-nvidia-visible-devices-as-volume-mounts = true",
                               "accept-nvidia-visible-devices-as-volume-mounts = 'x'", ""])),
    TEXT)
ARGS = st.one_of(
    st.lists(st.one_of(st.builds(lambda k, v: f"--node-labels={k}={v}", NASTY, NASTY),
                       st.builds(lambda v: f"--config={v}", NASTY), NASTY), max_size=4).map(
        "\n".join),
    TEXT)
CASES = st.fixed_dictionaries({
    "text": st.one_of(st.none(), TOML, ARGS, TEXT),
    "files": st.dictionaries(st.sampled_from([
        "/etc/nvidia-container-runtime/config.toml", "/etc/eks/kubelet/environment",
        "/var/snap/k8s/common/args/kubelet", "/var/snap/k8s/common/args/containerd",
        "/var/snap/k8s/common/lock/containerd-config-dir", "/proc/devices"]),
        st.one_of(st.none(), TOML, ARGS, TEXT), max_size=4),
    "run": st.tuples(st.sampled_from([0, 1, 3, 4, 127]), st.one_of(
        st.sampled_from(["active\n", "enabled\n", "inactive\n", "masked\n"]), NASTY), NASTY),
    "facts": FACTS,
    "snapshot": SNAPSHOT,
    "sockets": st.booleans(),
    "path": st.sampled_from(PATHS),
    "sku": st.sampled_from([None, "H100-SXM5-80GB", "A100-SXM4-80GB", "unknown-product"]),
})
CHECKS = (TOOLKIT_RUNTIME_CONFIG, REGISTRATION_LABELS, IMEX, GPU_SKU, GPU_CAPACITY,
          ALLOCATION_OWNER)
POLICY = load_policy(2)


def through_the_checks(case: Dict[str, Any]) -> None:
    host = AnyHost(case)
    settings = Config(allocation_path=case["path"]).model_dump()
    if case["sku"]:
        settings.setdefault("gpu", {})["expected_sku"] = case["sku"]
    policy = ResolvedPolicy(POLICY, case["path"], settings=settings)
    for check in CHECKS:
        out = check.run(host, policy)  # type: ignore[arg-type]
        expect(isinstance(out, Outcome), f"{check.id} returned {type(out).__name__}")
        expect(str(out.status) in STATUSES, f"{check.id} status", out.status)
        try:
            out.summary.encode("utf-8")
        except UnicodeEncodeError:
            expect(False, f"{check.id} summary cannot be printed", out.summary)
    path, _ = snap_config(host)  # type: ignore[arg-type]
    expect(path is None or path.startswith("/"), "a snap config path not absolute", path)


test_todays_checks_quick = quick(CASES, through_the_checks)
test_todays_checks_deep = deep("today's checks over any host", CASES, through_the_checks)

# --- kubelet args words: the linear splitter against shlex, its oracle ----------------------

SHELL_LINE = st.text(st.sampled_from(list(" \t\r\n#'\"\\ab=-,") + ["é", "\x00"]), max_size=30)


def same_as_shlex(line: str) -> None:
    import shlex

    from agent.safeio.nodeadm import _split

    try:
        want: Any = shlex.split(line, comments=True)
    except ValueError:
        want = ValueError
    try:
        got: Any = _split(line)
    except ValueError:
        got = ValueError
    expect(got == want, "differs from shlex.split(comments=True)", (line, got, want))


test_args_split_quick = quick(SHELL_LINE, same_as_shlex)
test_args_split_deep = deep("kubelet args splitter vs shlex", SHELL_LINE, same_as_shlex)
