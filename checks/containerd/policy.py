"""The `containerd` policy section: the gates policy version 2 adds to the container-runtime
checks. checks.policy.Policy carries it as ``policy.containerd``.

The defaults are what policy version 1 gets (no new gate); policy_v2.yaml turns them on.
"""
from agent.safeio.schema import Record


class _Strict(Record, frozen=True):
    """Unknown keys are refused."""


class ContainerdPolicy(_Strict):
    # containerd-nvidia-runtime warns (nodeadm-partial-cri-table) when a nodeadm drop-in's
    # partial CRI table replaces, under containerd 1.x import semantics, settings nodeadm's
    # own config.toml made (sandbox_image, runc's SystemdCgroup, the CNI directories);
    # False = named in the details only (version 1).
    partial_cri_table_warns: bool = False
    # runtimeclass-handler holds the RuntimeClass's handler against the runtimes in
    # containerd's effective config; False = version 1: the handler must equal
    # containerd.handler, or (a false failure fixed in every version) be a runtime containerd
    # has.
    runtimeclass_effective: bool = False
