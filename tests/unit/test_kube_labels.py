"""Label and annotation rules (agent/outputs/node/labels.py) and `config validate` refusing, before
anything is sent, what the API server would refuse. Expected verdicts are written by hand from
plugin/pkg/admission/noderestriction/admission.go, k8s.io/kubelet/pkg/apis/
well_known_labels.go and apimachinery's validation.go, and checked against the recorded
v1.34.9 server's answers (tests/fixtures/kube-apiserver/)."""
import json
from pathlib import Path

import pytest

from agent.outputs.node.labels import (
    KUBELET_LABELS,
    annotation_prefix_problem,
    label_key_problem,
    label_value_problem,
    noderestriction_forbids,
)
from tests.conftest import run_cli
from tests.kube_double import _restricted_label

RECORDING = Path(__file__).resolve().parent.parent / "fixtures" / "kube-apiserver" / (
    "node-identity-exchanges-1.34.9.jsonl")

REFUSED_TO_A_NODE = [
    "kubernetes.io/gpu",
    "k8s.io/gpu",
    "example.kubernetes.io/gpu",
    "example.k8s.io/gpu",
    "node-restriction.kubernetes.io/gpu",
    "team.node-restriction.kubernetes.io/gpu",
    "topology.kubernetes.io/gpu",  # the namespace is not allowed, only its exact keys
    "beta.kubernetes.io/gpu",
    "failure-domain.beta.kubernetes.io/gpu",
    "kubelet.k8s.io/gpu",  # kubelet.kubernetes.io is allowed, kubelet.k8s.io is not
]
ALLOWED_TO_A_NODE = [
    "foo.node.kubernetes.io/x",
    "node.kubernetes.io/gpu",
    "kubelet.kubernetes.io/gpu",
    "a.b.kubelet.kubernetes.io/gpu",
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "workload.example.com/gpu-healthy",
    "nvidia.com/gpu.present",
    "gpu",  # no prefix at all
    "mykubernetes.io/gpu",  # not a subdomain of kubernetes.io
]


@pytest.mark.parametrize("key", REFUSED_TO_A_NODE)
def test_noderestriction_refuses(key):
    assert noderestriction_forbids(key) and _restricted_label(key)
    assert "NodeRestriction" in label_key_problem(key)


@pytest.mark.parametrize("key", ALLOWED_TO_A_NODE + sorted(KUBELET_LABELS))
def test_noderestriction_allows(key):
    assert not noderestriction_forbids(key) and not _restricted_label(key)
    assert label_key_problem(key) is None


def test_the_recorded_server_agrees_on_every_label_a_node_patched():
    seen = 0
    for line in RECORDING.read_text().splitlines():
        ex = json.loads(line)
        req = ex["request"]
        body = req["body"] if isinstance(req["body"], dict) else {}
        labels = (body.get("metadata") or {}).get("labels") or {}
        patch = req["content_type"] in ("application/merge-patch+json",
                                        "application/strategic-merge-patch+json")
        if req["who"] != "node" or not labels or not patch or "gpu-host-1" not in req["path"]:
            continue
        for key in labels:
            if label_key_problem(key) is None and label_value_problem(labels[key]) is None:
                assert ex["response"]["status"] in (200, 409), (ex["name"], key)
            else:
                assert ex["response"]["status"] in (403, 422), (ex["name"], key)
            seen += 1
    assert seen >= 12


@pytest.mark.parametrize("value, ok", [
    ("dra", True), ("device-plugin", True), ("", True), ("a" * 63, True), ("a" * 64, False),
    ("not valid!", False), ("-x", False), ("x-", False), ("My_Value.1", True),
])
def test_label_values(value, ok):
    assert (label_value_problem(value) is None) is ok


@pytest.mark.parametrize("prefix, ok", [
    ("gpu-node-agent.workload.example.com", True), ("Bad_Prefix!", False),
    ("UPPER.example.com", True),  # annotation keys are validated lowercased
    ("a" * 254, False), ("x/y", False), ("", False),
])
def test_annotation_prefixes(prefix, ok):
    assert (annotation_prefix_problem(prefix) is None) is ok


def validate(tmp_path, body):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(body)
    return run_cli(["config", "validate", str(cfg)])


@pytest.mark.parametrize("body, field", [
    ('kube:\n  allocation_value: "not valid!"\n', "kube.allocation_value"),
    ('kube:\n  annotation_prefix: "Bad_Prefix!"\n', "kube.annotation_prefix"),
] + [(f"kube:\n  allocation_label: {k}\n", "kube.allocation_label") for k in REFUSED_TO_A_NODE]
  + [(f"kube:\n  health_label: {k}\n", "kube.health_label") for k in REFUSED_TO_A_NODE[:3]])
def test_config_validate_refuses(tmp_path, body, field):
    res = validate(tmp_path, body)
    assert res.rc == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and f"'{field}'" in lines[0] and "c.yaml" in lines[0]


@pytest.mark.parametrize("key", ["foo.node.kubernetes.io/x", "kubernetes.io/hostname",
                                 "topology.kubernetes.io/zone"])
def test_config_validate_accepts(tmp_path, key):
    res = validate(tmp_path, f"kube:\n  allocation_label: {key}\n  allocation_value: dra\n")
    assert res.rc == 0, res.err
