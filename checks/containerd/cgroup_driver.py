"""containerd-cgroup-driver: the NVIDIA runtime's cgroup driver (options.SystemdCgroup) is the one
the kubelet uses, else GPU pods fail at start (runc refuses a cgroupsPath in the other driver's
form: "expected cgroupsPath to be of format slice:prefix:name").

Whose driver the kubelet uses:
- containerd 2.x with kubelet >= 1.34: the kubelet asks the CRI (RuntimeConfig) and containerd
  answers with its *default* runtime's SystemdCgroup (KEP-4033 "Discover cgroup driver from
  CRI", kubernetes/enhancements keps/sig-node/4033-group-driver-detection-over-cri, GA in
  v1.34; containerd 2.0 internal/cri/server/runtime_config_linux.go), so `nvidia` must match
  the default runtime;
- containerd 1.x (no RuntimeConfig) or an older kubelet: the kubelet's own `cgroupDriver`
  (KubeletConfiguration, default "cgroupfs"; the `--cgroup-driver` flag wins over the file).

The kubelet's config file is the one its `--config` argument names in the args files the
kubelet units read (agent/safeio/nodeadm.py KUBELET_ARGS_FILES), else kubeadm's
/var/lib/kubelet/config.yaml or nodeadm's /etc/kubernetes/kubelet/config.json
(awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go, kubeletConfigRoot/kubeletConfigFile).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.safeio.kubelet_args import args_words, flag_values
from agent.safeio.nodeadm import KUBELET_ARGS_FILES
from agent.safeio.yamlio import YamlError, safe_load
from checks.base import (
    RUNTIME_HANDLER_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    input_missing,
    passed,
    unknown,
    version_str,
    version_tuple,
)
from checks.containerd.config import DEFAULT_CONFIG, DROPIN_GLOBS, discover, table
from checks.containerd.effective import VERSION_DECIDES, Context, View, decide, resolve
from checks.containerd.installed import DPKG_STATUS, VERSION_ARGVS, dump_argv
from checks.kubelet_version import KUBELET_ARGVS
from checks.policy import ResolvedPolicy

KUBELET_CONFIGS = ("/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet/config.json")
CRI_DRIVER_KUBELET = (1, 34, 0)  # KEP-4033 GA
KEP = ("KEP-4033 Discover cgroup driver from CRI (kubernetes/enhancements "
       "keps/sig-node/4033-group-driver-detection-over-cri; GA in Kubernetes v1.34)")
KUBELET_DOC = ("kubernetes.io/docs/setup/production-environment/container-runtimes/ "
               "(cgroup drivers; containerd's SystemdCgroup); KubeletConfiguration cgroupDriver")

DIFFERS_FROM_DEFAULT = Failure(
    "nvidia-cgroup-differs-from-default", Status.FAIL,
    "containerd 2.x with kubelet >= 1.34: the kubelet takes containerd's default runtime's "
    "cgroup driver, and the nvidia runtime's SystemdCgroup differs from it (GPU pods fail at "
    "start)",
    "Set SystemdCgroup in the nvidia runtime's options to the default runtime's value (re-run "
    "`nvidia-ctk runtime configure --runtime=containerd`, which copies the default runtime's "
    "options) and restart containerd.",
    KEP,
)
DIFFERS_FROM_KUBELET = Failure(
    "nvidia-cgroup-differs-from-kubelet", Status.FAIL,
    "the nvidia runtime's SystemdCgroup does not match the kubelet's cgroupDriver (GPU pods "
    "fail at start)",
    "Make them agree: SystemdCgroup = true in the nvidia runtime's options with cgroupDriver: "
    "systemd in the kubelet's config (the usual choice on systemd hosts), or both cgroupfs; "
    "restart containerd and the kubelet.",
    KUBELET_DOC,
)
KUBELET_CONFIG_UNREADABLE = Failure(
    "kubelet-config-unreadable", Status.UNKNOWN,
    "the kubelet's config file is not valid YAML/JSON, so its cgroupDriver cannot be told",
    "Fix the file named in the summary (the kubelet refuses to start with it).",
    KUBELET_DOC,
)


def _systemd(runtime: Any) -> bool:
    return table(runtime, "options").get("SystemdCgroup") is True


def kubelet_version(host: HostView) -> Optional[Tuple[int, int, int]]:
    for argv in KUBELET_ARGVS:
        res = host.run(list(argv), timeout=10)
        if res.ok:
            return version_tuple(res.stdout)
    return None


def _args(host: HostView) -> List[str]:
    words: List[str] = []
    for path in KUBELET_ARGS_FILES:
        words.extend(args_words(host.read_text_or_none(path) or ""))
    return words


def kubelet_config_paths(host: HostView) -> List[str]:
    named = flag_values(_args(host), "config")
    return list(dict.fromkeys(named[-1:] + list(KUBELET_CONFIGS)))


def kubelet_driver(host: HostView) -> Tuple[Optional[str], str]:
    """(cgroupfs|systemd, where from) or (None, why): None with "unreadable: ..." for a file the
    kubelet would refuse, None with "absent: ..." when nothing says."""
    flag = flag_values(_args(host), "cgroup-driver")
    if flag:
        return flag[-1], "the kubelet's --cgroup-driver argument"
    paths = kubelet_config_paths(host)
    for path in paths:
        text = host.read_text_or_none(path)
        if text is None:
            continue
        try:
            data = safe_load(text)
        except YamlError as exc:
            return None, f"unreadable: {path}: {str(exc).splitlines()[0][:160]}"
        driver = data.get("cgroupDriver") if isinstance(data, dict) else None
        return (str(driver) if driver else "cgroupfs"), (
            f"{path} cgroupDriver" if driver else f"{path} (cgroupDriver unset: cgroupfs)")
    return None, f"absent: no kubelet config ({', '.join(paths)})"


def _evaluate(ctx: Context, view: View, kubelet: Optional[Tuple[int, int, int]],
              driver: Tuple[Optional[str], str]) -> Outcome:
    runtimes = table(view.cri, "containerd", "runtimes")
    nvidia = runtimes.get(ctx.handler)
    mine = _systemd(nvidia)
    details: Dict[str, Any] = {**ctx.details(), "source": view.source,
                               "nvidia_systemd_cgroup": mine,
                               "kubelet_version": version_str(kubelet) if kubelet else None}
    if view.major >= 2 and (kubelet is None or kubelet >= CRI_DRIVER_KUBELET):
        default = str(table(view.cri, "containerd").get("default_runtime_name") or "runc")
        theirs = _systemd(runtimes.get(default))
        details.update(default_runtime=default, default_systemd_cgroup=theirs,
                       rule="kubelet takes the cgroup driver from containerd (KEP-4033)")
        if mine != theirs:
            return failed(
                f"runtime '{ctx.handler}' has SystemdCgroup = {str(mine).lower()} but the "
                f"default runtime '{default}' has {str(theirs).lower()}: the kubelet (>= 1.34) "
                "takes its cgroup driver from containerd's default runtime, so GPU pods fail "
                "at start",
                f"Set SystemdCgroup = {str(theirs).lower()} in the '{ctx.handler}' runtime's "
                "options (as the default runtime has) and restart containerd.",
                code=DIFFERS_FROM_DEFAULT.code, **details)
        return passed(f"runtime '{ctx.handler}' and the default runtime '{default}' agree: "
                      f"SystemdCgroup = {str(mine).lower()}", **details)
    value, where = driver
    details.update(kubelet_cgroup_driver=value, kubelet_cgroup_driver_from=where,
                   rule="kubelet uses its own cgroupDriver")
    if value is None:
        if where.startswith("unreadable"):
            return unknown(f"cannot tell the kubelet's cgroup driver: {where[12:]}",
                           code=KUBELET_CONFIG_UNREADABLE.code, **details)
        return input_missing(f"the kubelet's cgroup driver is not known yet ({where[8:]})",
                             **details)
    if mine != (value == "systemd"):
        want = "true" if value == "systemd" else "false"
        return failed(
            f"runtime '{ctx.handler}' has SystemdCgroup = {str(mine).lower()} but the kubelet "
            f"uses the {value} cgroup driver ({where}): GPU pods fail at start",
            f"Set SystemdCgroup = {want} in the '{ctx.handler}' runtime's options and restart "
            f"containerd (or change the kubelet's cgroupDriver in {where.split(' ')[0]}).",
            code=DIFFERS_FROM_KUBELET.code, **details)
    return passed(f"runtime '{ctx.handler}' SystemdCgroup = {str(mine).lower()} matches the "
                  f"kubelet's {value} cgroup driver ({where})", **details)


def _run(host: HostView, policy: ResolvedPolicy) -> Outcome:
    ctx = resolve(host, policy)
    kubelet = kubelet_version(host)
    driver = kubelet_driver(host)
    return decide(ctx, lambda c, v: _evaluate(c, v, kubelet, driver))


def _discover(host: HostView) -> Tuple[Sequence[str], Sequence[str]]:
    reads, presence = discover(host)
    return list(reads) + kubelet_config_paths(host), presence


CONTAINERD_CGROUP_DRIVER = Check(
    id="containerd-cgroup-driver",
    title="The NVIDIA runtime's cgroup driver is the one the kubelet uses",
    severity=Severity.CRITICAL,
    gates=RUNTIME_HANDLER_PATHS,
    interval=Interval.SLOW,
    remediation=(
        "Make the nvidia runtime's options.SystemdCgroup match the kubelet's cgroup driver "
        "(containerd 2.x with kubelet >= 1.34: the default runtime's SystemdCgroup) and restart "
        "containerd."
    ),
    run=_run,
    reads=(DEFAULT_CONFIG, DPKG_STATUS) + DROPIN_GLOBS + ("/etc/containerd/*.toml",)
    + KUBELET_ARGS_FILES + KUBELET_CONFIGS,
    runs=VERSION_ARGVS + tuple(dump_argv(a[0], DEFAULT_CONFIG) for a in VERSION_ARGVS)
    + KUBELET_ARGVS,
    discover=_discover,
    requires=("containerd-nvidia-runtime",),
    timeout_s=30.0,
    since_policy=2,
    failures=(VERSION_DECIDES, DIFFERS_FROM_DEFAULT, DIFFERS_FROM_KUBELET,
              KUBELET_CONFIG_UNREADABLE),
)
