"""gpu-workload's pre-join route: the CRI socket, exactly as the kubelet would start a pod.

A pod sandbox (host network, so no CNI is needed before join) with the path's runtime handler
(device-plugin paths: RuntimeClass.handler, CRI RunPodSandboxRequest.runtime_handler) or the
default handler with a container asking for the CDI device (DRA paths: CRI
ContainerConfig.CDI_devices, and the `cdi.k8s.io/` annotation containerd 1.7 also reads).
Source: kubernetes/cri-api pkg/apis/runtime/v1/api.proto. The output is read from the CRI
log file (kubernetes docs, "CRI container logs": `<time> <stream> <tag> <content>` lines).

The client is grpcio + the cri-api stubs, the optional `[workload]` extra, imported only here:
without it the record says so (`tool`) and the check is `unknown` (docs/decisions.md).
Every call carries the step deadline; the sandbox (and with it the container) is removed in a
`finally`, and leftovers labelled gpu-node-agent.workload=1 are removed before each run.
The container log directory is a temp directory named gna-workload-<pid>-<random>; one a run
killed by SIGKILL left (no `finally` runs) is removed by a later run when it is ours (same
uid), older than a run's deadline and its process is gone (as agent/host/bundle_unpack.py does
for unpacked bundles).
"""
import os
import shutil
import stat
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List

from agent.host.workload_record import LABEL, LABEL_VALUE, OUTPUT_CAP, Attempt, WorkloadSpec
from agent.safeio.bounded import ReadCapExceeded, read_bytes_capped

POLL_S = 0.2
TEMP_PREFIX = "gna-workload-"


def run_deadline_s(spec: WorkloadSpec) -> float:
    """The longest a run lives: seven step calls (image status, pull, sandbox, create, start,
    the exit wait and its last status call) and the two cleanups' calls at their deadlines."""
    return 7 * spec.step_deadline_s + 6 * spec.cleanup_deadline_s


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no pid is that large
        return False
    except OSError:
        return True  # EPERM: someone else's process by that number
    return True


def remove_stale(tmp: str, older_than_s: float) -> List[str]:
    """Remove log directories killed runs left: ours (same uid), a directory (not a link),
    last modified more than ``older_than_s`` ago, whose pid (in the name) is gone. Returns
    the names removed."""
    now = time.time()
    removed: List[str] = []
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            pid = int(entry.name[len(TEMP_PREFIX):].split("-", 1)[0])
        except (OSError, ValueError):
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or pid <= 0:
            continue
        if now - st.st_mtime < older_than_s or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed


def _import() -> Any:
    import grpc  # noqa: F401
    from cri_api.v1 import api_pb2, api_pb2_grpc

    return grpc, api_pb2, api_pb2_grpc


def cri_log_text(data: str) -> str:
    """The content of CRI log lines (`<RFC3339Nano> <stdout|stderr> <P|F> <content>`),
    partial lines (P) joined to the next."""
    out: List[str] = []
    for line in data.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 3:
            continue
        content = parts[3] if len(parts) == 4 else ""
        out.append(content if parts[2] == "P" else content + "\n")
    return "".join(out)


class CriRoute:
    def run(self, spec: WorkloadSpec) -> Dict[str, Any]:
        attempt = Attempt(spec, "cri")
        try:
            grpc, cri, stubs = _import()
        except ImportError as exc:
            attempt.fail("tool", f"the CRI client is not installed ({exc}): "
                         "pip install 'gpu-node-agent[workload]'")
            return attempt.record()
        channel = grpc.insecure_channel(f"unix://{spec.socket}")
        rt, img = stubs.RuntimeServiceStub(channel), stubs.ImageServiceStub(channel)
        tmp = tempfile.gettempdir()
        remove_stale(tmp, run_deadline_s(spec))
        logdir = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=tmp))
        try:
            self._leftovers(grpc, cri, rt, spec, attempt)
            self._run(grpc, cri, rt, img, spec, attempt, logdir)
        finally:
            self._leftovers(grpc, cri, rt, spec, attempt, after=True)
            channel.close()
            shutil.rmtree(logdir, ignore_errors=True)
        return attempt.record()

    def _leftovers(self, grpc: Any, cri: Any, rt: Any, spec: WorkloadSpec, attempt: Attempt,
                   after: bool = False) -> None:
        """Stop and remove every sandbox carrying our label (its containers go with it)."""
        t = spec.cleanup_deadline_s
        try:
            sel = cri.PodSandboxFilter(label_selector={LABEL: LABEL_VALUE})
            items = rt.ListPodSandbox(cri.ListPodSandboxRequest(filter=sel), timeout=t).items
            for sb in items:
                rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=sb.id), timeout=t)
                rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=sb.id), timeout=t)
                attempt.cleanup_removed.append(f"sandbox {sb.id[:12]}")
            if after:
                left = rt.ListPodSandbox(cri.ListPodSandboxRequest(filter=sel), timeout=t).items
                attempt.cleanup_left.extend(f"sandbox {sb.id[:12]}" for sb in left)
        except grpc.RpcError as exc:
            attempt.cleanup_left.append(f"cleanup: {exc.code().name}: {exc.details()}")

    def _run(self, grpc: Any, cri: Any, rt: Any, img: Any, spec: WorkloadSpec,
             attempt: Attempt, logdir: Path) -> None:
        t = spec.step_deadline_s
        step = "image"
        try:
            status = img.ImageStatus(cri.ImageStatusRequest(image=cri.ImageSpec(image=spec.image)),
                                     timeout=t)
            if not status.image.id:
                try:
                    img.PullImage(cri.PullImageRequest(image=cri.ImageSpec(image=spec.image)),
                                  timeout=t)
                except grpc.RpcError as exc:
                    attempt.image_missing = exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED
                    raise
            labels = {LABEL: LABEL_VALUE}
            ns = cri.NamespaceOption(network=cri.NODE)
            pod = cri.PodSandboxConfig(
                metadata=cri.PodSandboxMetadata(name="gpu-workload", uid=str(uuid.uuid4()),
                                                namespace="gpu-node-agent"),
                labels=labels, log_directory=str(logdir),
                linux=cri.LinuxPodSandboxConfig(security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=ns)))
            step = "sandbox"
            handler = spec.handler if spec.mode == "handler" else ""
            req = cri.RunPodSandboxRequest(config=pod, runtime_handler=handler)
            sandbox = rt.RunPodSandbox(req, timeout=t).pod_sandbox_id
            step = "create"
            extra: Dict[str, Any] = {}
            if spec.mode == "handler":
                # What the NVIDIA device plugin's Allocate answers (envs), which the nvidia
                # runtime reads (NVIDIA/k8s-device-plugin, nvidia-container-toolkit docs).
                extra["envs"] = [cri.KeyValue(key="NVIDIA_VISIBLE_DEVICES", value="all")]
            if spec.mode == "cdi":
                extra["CDI_devices"] = [cri.CDIDevice(name=spec.cdi_device)]
                extra["annotations"] = {"cdi.k8s.io/gpu-node-agent": spec.cdi_device}
            ctr = cri.ContainerConfig(
                metadata=cri.ContainerMetadata(name="gpu"), image=cri.ImageSpec(image=spec.image),
                command=list(spec.command), labels=labels, log_path="gpu.log",
                linux=cri.LinuxContainerConfig(security_context=cri.LinuxContainerSecurityContext(
                    namespace_options=ns)), **extra)
            cid = rt.CreateContainer(cri.CreateContainerRequest(
                pod_sandbox_id=sandbox, config=ctr, sandbox_config=pod), timeout=t).container_id
            step = "start"
            rt.StartContainer(cri.StartContainerRequest(container_id=cid), timeout=t)
            step = "exit"
            deadline = time.monotonic() + t
            while True:
                st = rt.ContainerStatus(cri.ContainerStatusRequest(container_id=cid),
                                        timeout=t).status
                if st.state == cri.CONTAINER_EXITED:
                    break
                if time.monotonic() > deadline:
                    attempt.fail("exit", f"the container did not exit within {t:g}s",
                                 deadline=True)
                    return
                time.sleep(POLL_S)
            attempt.exit_code = int(st.exit_code)
            log = logdir / "gpu.log"
            try:  # our own temp file, still bounded (agent/safeio/bounded.py)
                raw = read_bytes_capped(log, OUTPUT_CAP * 4).decode("utf-8", "replace")
            except (OSError, ReadCapExceeded) as exc:
                raw = ""
                attempt.notes.append(f"container log unread: {exc}")
            attempt.output = cri_log_text(raw)
            if attempt.exit_code != 0:
                attempt.fail("exit", f"`{' '.join(spec.command)}` exited {attempt.exit_code}")
        except grpc.RpcError as exc:
            hit = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            what = f"no answer within {t:g}s" if hit else f"{exc.code().name}: {exc.details()}"
            attempt.fail(step, what, deadline=hit)
