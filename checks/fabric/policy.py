"""The `imex` policy section and the `imex` config section.

``ImexPolicy`` is the gate (checks.policy.Policy carries it as ``policy.imex``): what a host
`nvidia-imex` service that is active or enabled on a ComputeDomains host is. Its default is
what a policy without the section gets (report it, warn); policy_v2.yaml makes it `fail`.

``ImexConfig`` is a per-host setting, not a gate (agent.config.Config carries it as
``config.imex``; docs/config.md): whether this host serves the NVIDIA DRA driver's
ComputeDomains. ``auto`` decides from the host (the compute-domain kubelet plugin's
registration socket); a host validated before it joins Kubernetes has no plugin yet, so
``true`` states it up front. It lives here, beside the check that reads it, so the config
module stays within its line budget.
"""
from typing import Literal, Union

from agent.safeio.schema import Record


class ImexPolicy(Record, frozen=True):
    host_service_conflict: Literal["warn", "fail"] = "warn"


class ImexConfig(Record):
    compute_domains: Union[Literal["auto"], bool] = "auto"
