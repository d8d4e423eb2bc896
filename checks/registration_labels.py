"""registration-labels: no kubelet registration label pre-sets the allocation label.

The agent puts the allocation label (config `kube.allocation_label`) on the Node only when
the gate is open (docs/kubernetes.md). A kubelet started with `--node-labels=<that key>=...`
sets it itself when it registers the Node (kubelet `--node-labels`: "Labels to add when
registering the node in the cluster"), before any check ran, so GPU pods that select the
label land on a host the gate never opened for; and it does so again whenever the Node is
registered anew (deleted, or a host reinstalled). Any value counts: the key is what pods
select.

Where the flags are read (agent/safeio/nodeadm.py): nodeadm's NodeConfig sources
(`kube.nodeadm_config_paths`, else the built-in candidates; `spec.kubelet.flags`, appended
across documents as nodeadm merges them), and the kubelet arguments already rendered:
nodeadm's `/etc/eks/kubelet/environment` (`NODEADM_KUBELET_ARGS`), kubeadm's flags file, the
distro defaults files and Canonical Kubernetes' args file. Both are read: the rendered file is
what the running kubelet got, the NodeConfig what the next `nodeadm init` renders.
"""
from typing import Any, List, Mapping, Tuple

from agent.safeio.kubelet_args import args_words, node_labels
from agent.safeio.nodeadm import KUBELET_ARGS_FILES, NODEADM_CONFIGS, kubelet_flags, read_sources
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    input_missing,
    not_applicable,
    passed,
    unknown,
)
from checks.policy import ResolvedPolicy

# agent/config.py KubeConfig.allocation_label's default (checks may not import the config;
# tests/checks/test_registration_labels.py holds the two equal).
DEFAULT_ALLOCATION_LABEL = "workload.example.com/gpu-allocation"
PRESET = "allocation-label-preset"
UNREADABLE = "kubelet-flags-unreadable"
KUBELET_FLAGS_DOC = ("kubelet command-line reference, --node-labels; aws/eks-hybrid "
                     "internal/kubelet/environment.go (NODEADM_KUBELET_ARGS)")
NODEADM_SOURCE = ("awslabs/amazon-eks-ami nodeadm/internal/configprovider (file.go, mime.go) "
                  "and nodeadm/internal/api/merge.go")


def _kube(policy: ResolvedPolicy) -> Mapping[str, Any]:
    kube = policy.setting("kube") if hasattr(policy, "setting") else None
    return kube if isinstance(kube, Mapping) else {}


def _sources(kube: Mapping[str, Any]) -> Tuple[str, ...]:
    paths = kube.get("nodeadm_config_paths")
    if isinstance(paths, list) and paths:
        return tuple(p for p in paths if isinstance(p, str))
    return NODEADM_CONFIGS


# The files are hostile input (a bundle's, or a hand-edited host's): a 4 MiB args file of
# `--node-labels` made a summary as long. Each entry is cut, the summary names the first few.
SHOWN, MAX_ENTRY, MAX_LISTED = 5, 200, 64


def _shown(entries: List[str]) -> str:
    more = f"; and {len(entries) - SHOWN} more" if len(entries) > SHOWN else ""
    return "; ".join(entries[:SHOWN]) + more


def run(host: HostView, policy: ResolvedPolicy) -> Outcome:
    kube = _kube(policy)
    if kube.get("enabled") is False:
        return not_applicable("the agent writes no Node labels (kube.enabled: false)")
    key = kube.get("allocation_label")
    key = key if isinstance(key, str) and key else DEFAULT_ALLOCATION_LABEL
    preset: List[str] = []
    problems: List[str] = []
    read: List[str] = []
    for source in read_sources(host, _sources(kube), unreadable=True):
        for file in source.files:
            if file.problem:
                problems.append(f"{file.path}: {file.problem}")
                continue
            read.append(file.path)
            flags = [f for doc in file.configs for f in kubelet_flags(doc)]
            # A list entry may hold `--flag value` (nodeadm joins the entries with spaces).
            words = [w for f in flags for w in f.split()]
            preset += [f"{file.path} spec.kubelet.flags --node-labels sets {k}={v}"[:MAX_ENTRY]
                       for k, v in node_labels(words) if k == key]
    for path in KUBELET_ARGS_FILES:
        text = host.read_text_or_none(path)
        if text is None:
            if host.is_file(path):
                problems.append(f"{path}: could not be read")
            continue
        read.append(path)
        preset += [f"{path} --node-labels sets {k}={v}"[:MAX_ENTRY]
                   for k, v in node_labels(args_words(text)) if k == key]
    if preset:
        return failed("a kubelet registration label pre-sets the allocation label, so GPU pods "
                      "can land before the gate opens: " + _shown(preset),
                      code=PRESET, label=key, preset=preset[:MAX_LISTED],
                      preset_count=len(preset), read=read)
    if problems:
        problems = [p[:MAX_ENTRY] for p in problems]
        return unknown("cannot tell whether the kubelet registers the allocation label "
                       f"{key}: " + _shown(problems), code=UNREADABLE, label=key,
                       problems=problems[:MAX_LISTED], read=read)
    if not read:
        # Nothing to judge (a host before its kubelet is set up, or a bundle without these
        # files): not a pass, which would claim the flags were seen.
        return input_missing("no nodeadm NodeConfig and no kubelet args file found, so no "
                             f"registration label to judge (looked for {key})", label=key,
                             read=read)
    return passed(f"no kubelet registration label sets {key} ({', '.join(read)})", label=key,
                  read=read)


REGISTRATION_LABELS = Check(
    id="registration-labels",
    title="No kubelet registration label (--node-labels) pre-sets the allocation label",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Remove the allocation label from the kubelet's --node-labels; the agent sets "
                "it when the gate opens.",
    run=run,
    # The built-in candidates only: a source configured elsewhere (kube.nodeadm_config_paths)
    # is read live but not captured by collect (its allow-list is static).
    reads=(*(f"{NODEADM_CONFIGS[0]}/*{s}" for s in (".yaml", ".yml", ".json")),
           *NODEADM_CONFIGS[1:], *KUBELET_ARGS_FILES),
    timeout_s=5.0,
    since_policy=2,
    failures=(
        Failure(PRESET, Status.FAIL,
                "the kubelet's --node-labels (NodeConfig spec.kubelet.flags or a rendered "
                "kubelet args file) set the allocation label's key",
                "Remove that key from --node-labels: from the NodeConfig's spec.kubelet.flags "
                "(then run `nodeadm init` again, which rewrites /etc/eks/kubelet/environment) "
                "or from the kubelet args file named (kubeadm: "
                "nodeRegistration.kubeletExtraArgs; Canonical Kubernetes: "
                "/var/snap/k8s/common/args/kubelet), and restart the kubelet. On a Node that "
                "already registered, remove the label once (`kubectl label node <name> "
                "<key>-`): the agent sets it when the gate opens.",
                KUBELET_FLAGS_DOC),
        Failure(UNREADABLE, Status.UNKNOWN,
                "a NodeConfig source or kubelet args file exists but could not be read or "
                "holds no NodeConfig (the summary names the file and why)",
                "Fix or remove the file named (nodeadm would refuse it too: `nodeadm init` "
                "fails on a config it cannot parse), or point kube.nodeadm_config_paths at "
                "the source nodeadm's --config-source names.", NODEADM_SOURCE),
    ),
)
