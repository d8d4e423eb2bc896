"""The native route's image step (agent/host/workload_native.py `_image`): an image in neither
namespace that cannot be pulled is missing; one that is in k8s.io but fails to copy into the
agent's namespace is on the host, so `workload.skip_if_image_missing` must not skip it. ctr's
answers are scripted here; tests/integration/test_workload_e2e.py runs the real ctr."""
from typing import List, Tuple

import pytest

from agent.host.seam import Host, StaticFacts
from agent.host.workload_native import NativeRoute
from agent.host.workload_record import Attempt, WorkloadSpec
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.workload.gpu_workload import GPU_WORKLOAD

IMAGE = "registry.example/cuda:12"
INGEST = "ctr: failed to ingest \"index-sha256:ab\": ref locked: unavailable"


class Scripted(NativeRoute):
    """ctr answering from a table keyed by (namespace, first two words); every call kept."""

    def __init__(self, answers) -> None:
        super().__init__()
        self.answers = answers
        self.calls: List[Tuple[str, ...]] = []

    def ctr(self, spec, *args, ns=None, timeout=None):
        key = (ns or spec.namespace, " ".join(args[:2]))
        self.calls.append(key)
        rc, out, err = self.answers.get(key, (0, "", ""))
        return CommandResult(("ctr", *args), rc, out, err)


def spec() -> WorkloadSpec:
    return WorkloadSpec(path="dra", mode="cdi", handler="nvidia", image=IMAGE,
                        command=["nvidia-smi", "-L"], cdi_device="nvidia.com/gpu=all",
                        socket="/run/containerd/containerd.sock", namespace="gpu-node-agent")


def image_step(answers, tmp_path) -> Attempt:
    attempt = Attempt(spec(), "native")
    ok = Scripted(answers)._image(spec(), attempt, {"snapshotter": ""}, tmp_path)
    assert ok is (attempt.failed_step is None)
    return attempt


def verdict(attempt: Attempt) -> Outcome:
    host = Host("/nonexistent", facts=StaticFacts({"workload": attempt.record()}))
    settings = {"workload": {"paths": ["dra"], "skip_if_image_missing": True}}
    return GPU_WORKLOAD.run(host, ResolvedPolicy(load_policy(2), "dra", settings=settings))


def test_an_image_in_k8s_io_that_fails_to_copy_is_on_the_host_and_fails(tmp_path):
    attempt = image_step({
        ("k8s.io", "images ls"): (0, IMAGE + "\n", ""),
        ("gpu-node-agent", "images import"): (1, "", INGEST),
    }, tmp_path)
    assert (attempt.failed_step, attempt.image_missing) == ("image", False)
    assert attempt.error == f"{IMAGE}: copying it from the k8s.io namespace: {INGEST}"
    got = verdict(attempt)
    # Not skipped although skip_if_image_missing is set: the image is there.
    assert (got.status, got.code) == (Status.FAIL, "image-failed")
    assert got.summary == (f"native route: step `image` failed: {IMAGE}: copying it from the "
                           f"k8s.io namespace: {INGEST}")


def test_an_image_in_neither_namespace_that_cannot_be_pulled_is_missing(tmp_path):
    attempt = image_step({
        ("gpu-node-agent", "images pull"): (1, "", "ctr: failed to resolve reference"),
    }, tmp_path)
    assert (attempt.failed_step, attempt.image_missing) == ("image", True)
    got = verdict(attempt)
    assert (got.status, got.summary) == (
        Status.SKIP, f"image {IMAGE} not on the host (workload.skip_if_image_missing)")


@pytest.mark.parametrize("listed_in_agent_ns", [True, False])
def test_the_copy_is_tried_only_when_the_agents_namespace_lacks_the_image(tmp_path,
                                                                          listed_in_agent_ns):
    answers = {("k8s.io", "images ls"): (0, IMAGE + "\n", "")}
    if listed_in_agent_ns:
        answers[("gpu-node-agent", "images ls")] = (0, IMAGE + "\n", "")
    attempt = Attempt(spec(), "native")
    route = Scripted(answers)
    assert route._image(spec(), attempt, {"snapshotter": ""}, tmp_path)
    copied = ("gpu-node-agent", "images import") in route.calls
    assert copied is not listed_in_agent_ns
    assert attempt.failed_step is None and not attempt.image_missing
