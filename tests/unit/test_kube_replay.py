"""The API double against a real kube-apiserver v1.34.9: every request of
tests/fixtures/kube-apiserver/node-identity-exchanges-1.34.9.jsonl is sent, in order, to the
double with the same identity, and the answer reduced as the file reduces it (its README) must
equal the recorded one: status code, kind, apiVersion, reason, message, details, code, and for
objects the labels, annotations, spec, conditions (type, status, reason, in order), item names
and top-level keys.

EXCEPTIONS names any recorded exchange the double does not reproduce, with the reason; it is
empty, and a test keeps it honest (an exception that starts to match must be removed)."""
import json
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
import requests

from tests.kube_certs import CA
from tests.kube_double import KubeDouble

RECORDING = (
    Path(__file__).resolve().parent.parent
    / "fixtures" / "kube-apiserver" / "node-identity-exchanges-1.34.9.jsonl"
)
NODE = "gpu-host-1"
# name of the exchange -> why the double answers differently. None left.
EXCEPTIONS: Dict[str, str] = {}
NOT_TAINT = [{"effect": "NoSchedule", "key": "node.kubernetes.io/not-ready"}]


def exchanges():
    return [json.loads(line) for line in RECORDING.read_text().splitlines() if line.strip()]


def reduce(body: Any) -> Dict[str, Any]:
    """The file's reduction of an answer (its README, `response.body`)."""
    if isinstance(body, dict) and body.get("kind") == "Status":
        return {k: body.get(k) for k in
                ("apiVersion", "code", "details", "kind", "message", "reason", "status")}
    meta = body.get("metadata") or {}
    conditions = ((body.get("status") or {}) if isinstance(body.get("status"), dict) else {}).get(
        "conditions") or []
    return {
        "annotations": meta.get("annotations") or None,
        "conditions": [{"reason": c.get("reason"), "status": c.get("status"), "type": c.get("type")}
                       for c in conditions],
        "items": [i["metadata"]["name"] for i in body["items"]] if "items" in body else None,
        "kind": body.get("kind"),
        "labels": meta.get("labels") or None,
        "spec": body.get("spec"),
        "top_keys": sorted(body),
    }


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    (tmp / "rogue").mkdir()
    rogue_ca = CA(str(tmp / "rogue"), name="rogue-ca")  # a CA the server does not trust
    double = KubeDouble(str(tmp))
    double.tls_accept_ca(rogue_ca.path)
    double.start()
    # The recording's starting state (its README): two Nodes with a kubelet-style Ready
    # condition and the not-ready taint TaintNodesByCondition put there, a RuntimeClass.
    double.add_node(NODE, labels={"team": "ml"}, taints=[dict(t) for t in NOT_TAINT])
    double.add_node("gpu-host-2", taints=[dict(t) for t in NOT_TAINT])
    double.add_runtimeclass("nvidia", "nvidia")
    double.add_token("node-token", f"system:node:{NODE}")
    node_cert = double.client_cert(NODE)[:2]
    admin_cert = double.admin_cert()[:2]
    rogue_cert = rogue_ca.issue(f"system:node:{NODE}", org="system:nodes", stem="rogue")[:2]
    who = {
        "node": {"cert": node_cert},
        "admin": {"cert": admin_cert},
        "token": {"headers": {"Authorization": "Bearer node-token"}},
        "badtoken": {"headers": {"Authorization": "Bearer not-a-token"}},
        "none": {},
        "rogue": {"cert": rogue_cert},
    }
    results = []
    session = requests.Session()
    session.trust_env = False
    try:
        for ex in exchanges():
            req = ex["request"]
            ident = who[req["who"]]
            headers = {"Accept": "application/json", **ident.get("headers", {})}
            data: Optional[bytes] = None
            if req["body"] is not None:
                body = req["body"]
                # a string body was sent as it stands (e.g. "[1,2]"), an object as JSON
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            if req["content_type"]:
                headers["Content-Type"] = req["content_type"]
            resp = session.request(
                req["method"], double.url + req["path"], params=req["params"], data=data,
                headers=headers, cert=ident.get("cert"), verify=double.ca.path, timeout=10,
            )
            results.append((ex, resp.status_code, reduce(resp.json())))
    finally:
        session.close()
        double.stop()
    return results


def mismatches(results):
    out = {}
    for ex, code, got in results:
        want = ex["response"]
        if code != want["status"] or got != want["body"]:
            diff = {k: (want["body"].get(k), got.get(k)) for k in set(want["body"]) | set(got)
                    if want["body"].get(k) != got.get(k)}
            out[ex["name"]] = (want["status"], code, diff)
    return out


def test_the_file_is_the_recorded_one():
    exs = exchanges()
    assert len(exs) == 60
    assert len({e["name"] for e in exs}) == 60  # names identify exchanges in EXCEPTIONS


def test_every_recorded_exchange_is_reproduced(replay):
    assert len(replay) == 60
    bad = {k: v for k, v in mismatches(replay).items() if k not in EXCEPTIONS}
    assert bad == {}


def test_named_exceptions_still_differ(replay):
    bad = mismatches(replay)
    assert [name for name in EXCEPTIONS if name not in bad] == []


@pytest.mark.parametrize("name, code, detail", [
    # the differences named for this test, spelled out by hand from the recording
    ("SMP own status add GPUReady", 200, ["GPUReady", "Ready"]),
    ("GET missing node", 403, None),
    ("SMP missing node status", 404, None),
    ("merge-patch missing node (main object)", 404, None),
    ("GET own node, no credentials", 403, None),
    ("GET own node, cert from another CA", 401, None),
    ("SMP own status condition element without type", 500, None),
    ("GET unknown path", 403, None),
    ("PUT own node (no body change)", 400, None),
    ("merge-patch label value invalid", 422, None),
    ("merge-patch own annotation with invalid key", 422, None),
])
def test_listed_differences(replay, name, code, detail):
    ex, got_code, got = next(r for r in replay if r[0]["name"] == name)
    assert got_code == code
    if detail is not None:
        assert [c["type"] for c in got["conditions"]] == detail
    if code in (401, 400, 500):
        assert got["details"] is None  # the real server omits details there
    if code == 422:
        assert got["reason"] == "Invalid" and len(got["details"]["causes"]) == 4


def test_status_patch_with_labels_changes_them_and_noderestriction_applies(replay):
    by_name = {r[0]["name"]: r for r in replay}
    _, code, got = by_name["merge-patch /status with a label change"]
    assert code == 200 and got["labels"]["via-status"] == "yes"
    _, code, got = by_name["merge-patch /status with a node-restriction label"]
    assert code == 403 and "node-restriction.kubernetes.io/x" in got["message"]
