"""The `health` policy section: how many healthy GPUs keep a node's gate open.

`min_healthy_gpus` (default "all": every GPU healthy, the verdict the agent gave before the
field existed, so no policy version adds it). A GPU is unhealthy when a check that would close
the gate names it (details["gpus_at_fault"]) or when it is on PCI but missing from NVML; with
a number N, the gate stays open while at least N GPUs are healthy (agent/gpu_health.py). The
NVIDIA device plugin withdraws an unhealthy GPU on its own (k8s-device-plugin
internal/rm/health.go marks the device Unhealthy in ListAndWatch), which is what makes
serving the rest safe on the device-plugin paths; on DRA paths the number is advisory
(docs/decisions.md "Per-GPU health").
"""
from typing import Annotated, Literal, Union

from agent.safeio.schema import Field, Record

ALL: Literal["all"] = "all"


class HealthPolicy(Record, frozen=True):
    # "all", or an integer >= 1 (strict: "7" or 7.0 is a mistake in the config, not a 7).
    min_healthy_gpus: Union[Literal["all"], Annotated[int, Field(ge=1, strict=True)]] = ALL
