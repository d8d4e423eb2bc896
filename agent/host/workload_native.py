"""gpu-workload's after-join route: containerd's native API through `ctr` (shipped with
containerd) in a namespace of our own (`workload.namespace`, default gpu-node-agent).

CRI works only in `k8s.io`, where a running kubelet removes sandboxes it did not create
(kubelet pod garbage collection); containerd namespaces isolate everything else
(containerd docs/namespaces.md), so the kubelet never sees this container. The runtime is the
handler's as the effective CRI config has it (`containerd config dump`: runtime_type,
options.BinaryName, options.SystemdCgroup, the snapshotter, cdi_spec_dirs). The CDI device is
applied from the same CDI spec containerd reads: `ctr` has no CDI flag, so its
containerEdits (env, mounts, deviceNodes; CDI spec SPEC.md) become `ctr` flags, and hooks,
which `ctr` cannot express, are counted in the record's notes.

Every command goes through the bounded runner (agent/safeio/commands.py) with the step
deadline. Cleanup: tasks killed and deleted, labelled containers removed with their
snapshots, leases and active snapshots in our namespace removed, before and after each run.
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.host.workload_record import LABEL, LABEL_VALUE, OUTPUT_CAP, Attempt, WorkloadSpec
from agent.hostview import CommandResult
from agent.safeio.bounded import read_bytes_capped
from agent.safeio.commands import SubprocessCommands
from agent.safeio.yamlio import safe_load

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.9/3.10
    import tomli as tomllib

CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_V3_RUNTIME = "io.containerd.cri.v1.runtime"
CRI_V3_IMAGES = "io.containerd.cri.v1.images"
CDI_DIRS = ["/etc/cdi", "/var/run/cdi"]  # containerd's default cdi_spec_dirs


def _table(data: Any, *keys: str) -> Dict[str, Any]:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def runtime_options(dump: Dict[str, Any], handler: Optional[str]) -> Dict[str, Any]:
    """The handler's runtime (None: default_runtime_name) from an effective config."""
    plugins = _table(dump, "plugins")
    v3 = CRI_V3_RUNTIME in plugins
    cri = _table(plugins, CRI_V3_RUNTIME if v3 else CRI_V2)
    ctd = _table(cri, "containerd")
    name = handler or str(ctd.get("default_runtime_name") or "runc")
    rt = _table(ctd, "runtimes", name)
    opts = _table(rt, "options")
    snap = _table(plugins, CRI_V3_IMAGES).get("snapshotter") if v3 else ctd.get("snapshotter")
    return {"name": name, "found": bool(rt), "runtime_type": rt.get("runtime_type"),
            "binary": opts.get("BinaryName") or None, "systemd": bool(opts.get("SystemdCgroup")),
            "snapshotter": snap or None, "cdi_dirs": list(cri.get("cdi_spec_dirs") or CDI_DIRS)}


def cdi_edits(dirs: Sequence[str], device: str) -> Tuple[List[str], List[str]]:
    """(ctr flags, notes) for the CDI device `kind=name` from the specs in ``dirs``."""
    kind, _, name = device.partition("=")
    for d in dirs:
        for path in sorted(Path(d).glob("*")) if os.path.isdir(d) else []:
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                # The bounded loader (agent/safeio/yamlio.py): an alias bomb in a spec would
                # otherwise expand when its edits are formatted into flags.
                spec = safe_load(read_bytes_capped(path, 4 * 1024 * 1024).decode("utf-8"))
            except Exception:  # an unreadable spec is containerd's to refuse too
                continue
            if not isinstance(spec, dict) or spec.get("kind") != kind:
                continue
            devices = spec.get("devices")
            for dev in devices if isinstance(devices, list) else []:
                if isinstance(dev, dict) and dev.get("name") == name:
                    try:
                        return _flags([spec.get("containerEdits") or {},
                                       dev.get("containerEdits") or {}])
                    except (TypeError, KeyError, AttributeError, ValueError) as exc:
                        raise LookupError(f"CDI device {device} in {path}: containerEdits not "
                                          f"in the CDI spec's shape ({type(exc).__name__}: "
                                          f"{str(exc)[:200]})") from None
    raise LookupError(f"unresolvable CDI device {device} (specs in {', '.join(dirs)})")


def _text(value: Any, what: str) -> str:
    # CDI SPEC.md: every path and env entry is a string; a comma would end ctr's --mount
    # field (type=bind,src=...,dst=...) and start another option.
    if not isinstance(value, str) or not value or (what.startswith("mount") and "," in value):
        raise ValueError(f"{what} {str(value)[:80]!r} is not a usable string")
    return value


def _flags(edits: List[Dict[str, Any]]) -> Tuple[List[str], List[str]]:
    flags: List[str] = []
    notes: List[str] = []
    for e in edits:
        flags += [f"--env={_text(v, 'env')}" for v in e.get("env") or []]
        for m in e.get("mounts") or []:
            opts = [_text(o, "mount option") for o in m.get("options") or [] if o != "bind"]
            flags.append(f"--mount=type=bind,src={_text(m['hostPath'], 'mount hostPath')},"
                         f"dst={_text(m['containerPath'], 'mount containerPath')},"
                         f"options={':'.join(opts + ['rbind'])}")
        flags += [f"--device={_text(d.get('hostPath') or d['path'], 'device path')}"
                  for d in e.get("deviceNodes") or []]
        if e.get("hooks"):
            notes.append(f"{len(e['hooks'])} CDI hook(s) not applied: ctr cannot express them")
    return flags, notes


def _why(res: CommandResult) -> str:
    """ctr's own message first (`ctr: ...`), the argv only when there is none."""
    text = (res.stderr or res.stdout).strip()
    return text[:2000] if text else res.describe()


class NativeRoute:
    def __init__(self) -> None:
        self.runner = SubprocessCommands(output_cap=OUTPUT_CAP * 4)

    def ctr(self, spec: WorkloadSpec, *args: str, ns: Optional[str] = None,
            timeout: Optional[float] = None) -> CommandResult:
        argv = [spec.ctr, "--address", spec.socket, "--namespace", ns or spec.namespace, *args]
        return self.runner.run(argv, timeout or spec.step_deadline_s)

    def run(self, spec: WorkloadSpec) -> Dict[str, Any]:
        attempt = Attempt(spec, "native")
        if spec.image.startswith("-"):
            # ctr parses a positional that starts with "-" as a flag (Go's flag package,
            # which urfave/cli uses): `images pull -x` would be an option, not an image.
            attempt.fail("image", f"workload.image {spec.image[:80]!r} starts with '-': not an "
                         "image reference")
            return attempt.record()
        probe = self.ctr(spec, "version")
        if probe.not_installed:
            attempt.fail("tool", f"`{spec.ctr}` not installed (containerd's client)")
            return attempt.record()
        cid = f"gpu-node-agent-workload-{os.getpid()}"
        tmp = Path(tempfile.mkdtemp(prefix="gna-workload-"))
        try:
            self.cleanup(spec, attempt)
            self._run(spec, attempt, cid, tmp)
        finally:
            self.cleanup(spec, attempt, after=True)
            shutil.rmtree(tmp, ignore_errors=True)
        return attempt.record()

    def cleanup(self, spec: WorkloadSpec, attempt: Attempt, after: bool = False) -> None:
        t = spec.cleanup_deadline_s
        ids = self.ctr(spec, "containers", "ls", "-q", f'labels."{LABEL}"=={LABEL_VALUE}',
                       timeout=t).stdout.split()
        for c in ids:
            self.ctr(spec, "tasks", "kill", "-s", "SIGKILL", c, timeout=t)
            self.ctr(spec, "tasks", "delete", "--force", c, timeout=t)
            if self.ctr(spec, "containers", "delete", c, timeout=t).ok:
                attempt.cleanup_removed.append(f"container {c}")
        # The namespace is ours alone: every lease (ctr's own, left by a killed run) and
        # every active snapshot (a container's rw layer) in it is ours to remove.
        for lease in self.ctr(spec, "leases", "ls", "-q", timeout=t).stdout.split():
            if self.ctr(spec, "leases", "delete", lease, timeout=t).ok:
                attempt.cleanup_removed.append(f"lease {lease}")
        snap = spec.extra.get("snapshotter")
        sargs = ["snapshots", "--snapshotter", str(snap)] if snap else ["snapshots"]
        listing = self.ctr(spec, *sargs, "ls", timeout=t).stdout.splitlines()
        for key in [ln.split()[0] for ln in listing[1:] if ln.split()[-1:] == ["Active"]]:
            if self.ctr(spec, *sargs, "delete", key, timeout=t).ok:
                attempt.cleanup_removed.append(f"snapshot {key}")
        if after:
            left = self.ctr(spec, "containers", "ls", "-q", timeout=t).stdout.split()
            attempt.cleanup_left.extend(f"container {c}" for c in left)

    def _options(self, spec: WorkloadSpec, attempt: Attempt) -> Optional[Dict[str, Any]]:
        binary = str(spec.extra.get("containerd") or "containerd")
        dump = self.runner.run([binary, "--config", spec.containerd_config, "config", "dump"],
                               spec.step_deadline_s)
        try:
            data = tomllib.loads(dump.stdout) if dump.ok else None
        except tomllib.TOMLDecodeError as exc:
            data, dump = None, CommandResult(dump.argv, 1, "", str(exc))
        if data is None:
            attempt.fail("runtime", f"containerd's effective config: {dump.describe()}")
            return None
        opts = runtime_options(data, spec.handler if spec.mode == "handler" else None)
        if not opts["found"]:
            attempt.fail("sandbox", f'no runtime for "{opts["name"]}" is configured in '
                         "containerd's effective CRI config")
            return None
        spec.extra["snapshotter"] = opts["snapshotter"]
        return opts

    def _run(self, spec: WorkloadSpec, attempt: Attempt, cid: str, tmp: Path) -> None:
        opts = self._options(spec, attempt)
        if opts is None or not self._image(spec, attempt, opts, tmp):
            return
        flags = ["--label", f"{LABEL}={LABEL_VALUE}",
                 "--runtime", str(opts["runtime_type"] or "io.containerd.runc.v2")]
        if opts["snapshotter"]:
            flags += ["--snapshotter", str(opts["snapshotter"])]
        if opts["binary"]:
            flags += ["--runc-binary", str(opts["binary"])]
        if opts["systemd"]:
            flags.append("--runc-systemd-cgroup")
        if spec.mode == "handler":
            flags.append("--env=NVIDIA_VISIBLE_DEVICES=all")  # the device plugin's answer
        else:
            try:
                edits, notes = cdi_edits(opts["cdi_dirs"], spec.cdi_device)
            except LookupError as exc:
                attempt.fail("create", str(exc))
                return
            flags += edits
            attempt.notes.extend(notes)
        # ctr 1.7's `containers create` lacks --runc-binary (only `run` has the runc
        # flags: containerd 1.7 cmd/ctr/commands/run/run_unix.go platformRunFlags); there
        # `run` creates and starts in one call and the container's presence tells the step.
        split = not opts["binary"] or "--runc-binary" in self.ctr(
            spec, "containers", "create", "--help").stdout
        if split:
            made = self.ctr(spec, "containers", "create", *flags, spec.image, cid, *spec.command)
            if not made.ok:
                attempt.fail("create", _why(made), deadline=made.timed_out)
                return
            ran = self.ctr(spec, "tasks", "start", cid)
        else:
            ran = self.ctr(spec, "run", *flags, spec.image, cid, *spec.command)
        attempt.output = ran.stdout
        if ran.timed_out:
            attempt.fail("start", f"no answer within {spec.step_deadline_s:g}s", deadline=True)
        elif ran.rc != 0 and ran.stderr.startswith("ctr: "):
            exists = self.ctr(spec, "containers", "ls", "-q", f"id=={cid}").stdout.strip()
            attempt.fail("start" if split or exists else "create", _why(ran))
        else:
            attempt.exit_code = ran.rc
            if ran.rc != 0:
                attempt.fail("exit", f"`{' '.join(spec.command)}` exited {ran.rc}")

    def _image(self, spec: WorkloadSpec, attempt: Attempt, opts: Dict[str, Any],
               tmp: Path) -> bool:
        """The image in our namespace: there already, copied from k8s.io (where CRI and an
        air-gapped preload put it), or pulled."""
        name = f"name=={spec.image}"
        if self.ctr(spec, "images", "ls", "-q", name).stdout.strip():
            return True
        snap = ["--snapshotter", str(opts["snapshotter"])] if opts["snapshotter"] else []
        on_host = bool(self.ctr(spec, "images", "ls", "-q", name, ns="k8s.io").stdout.strip())
        if on_host:
            tar = str(tmp / "image.tar")
            out = self.ctr(spec, "images", "export", tar, spec.image, ns="k8s.io")
            got = self.ctr(spec, "images", "import", *snap, tar) if out.ok else out
        else:
            got = self.ctr(spec, "images", "pull", *snap, spec.image)
        if not got.ok:
            # Missing means in neither namespace and not pullable. An image that is in k8s.io
            # but failed to copy (a full disk, containerd's content store refusing the ingest)
            # is on the host: `skip_if_image_missing` must not skip it, and the fix differs.
            attempt.image_missing = not got.timed_out and not on_host
            where = "copying it from the k8s.io namespace: " if on_host else ""
            attempt.fail("image", f"{spec.image}: {where}{_why(got)}", deadline=got.timed_out)
        return got.ok


__all__ = ["NativeRoute", "cdi_edits", "runtime_options"]
