"""KubeFacts: the `node` and `runtimeclasses` host facts read through the API double, cached,
and an error value (never an exception) when the API cannot be read."""
import pytest

from agent.cli_kube import ApiWiring
from agent.host.seam import Host
from agent.kube.facts import KubeFacts
from tests.kube_double import KubeDouble, kubeconfig_yaml
from tests.kube_reports import config

NODE = "gpu-host-1"


class Base:
    def fact(self, name):
        return {"pci_devices": ["from base"]}.get(name)


@pytest.fixture
def api(tmp_path):
    double = KubeDouble(str(tmp_path)).start()
    double.add_node(NODE, labels={"nvidia.com/mps.capable": "true"})
    double.add_runtimeclass("nvidia", "nvidia")
    double.add_token("t", f"system:node:{NODE}")
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"token": "t"}))
    yield double, str(kc)
    double.stop()


def test_reads_node_and_runtimeclasses_once_per_ttl(api):
    double, kc = api
    now = [0.0]
    facts = KubeFacts(config(kubeconfig=kc, node_name=NODE), Base(), clock=lambda: now[0], ttl=600)
    assert facts.fact("pci_devices") == ["from base"]
    node = facts.fact("node")
    assert node["metadata"]["labels"]["nvidia.com/mps.capable"] == "true"
    assert [i["handler"] for i in facts.fact("runtimeclasses")["items"]] == ["nvidia"]
    for _ in range(5):
        facts.fact("node"), facts.fact("runtimeclasses")
    assert double.counts() == {"GET": 2}
    now[0] = 601
    facts.fact("runtimeclasses")
    assert double.counts() == {"GET": 3}
    facts.close()


def test_node_name_from_the_host_when_not_configured(api, tmp_path):
    double, kc = api
    root = tmp_path / "root" / "etc"
    root.mkdir(parents=True)
    (root / "hostname").write_text("GPU-HOST-1\n")
    cfg = config(kubeconfig=kc)
    # The composition root resolves the name from the Host it built (agent/cli_kube.py).
    facts = ApiWiring(name_host=lambda: Host(str(tmp_path / "root"))).facts(cfg)
    assert facts.fact("node")["metadata"]["name"] == NODE


def test_errors_are_values(api, tmp_path):
    double, kc = api
    missing = KubeFacts(config(kubeconfig=str(tmp_path / "nope"), node_name=NODE))
    assert "no such file" in missing.fact("runtimeclasses")["error"]
    wrong = KubeFacts(config(kubeconfig=kc, node_name="gpu-host-2"))
    assert "HTTP 403" in wrong.fact("node")["error"]
    off = KubeFacts(config(kubeconfig=kc, enabled=False))
    assert "kube.enabled is false" in off.fact("node")["error"]
    double.inject(503, count=2)
    assert "HTTP 503" in KubeFacts(config(kubeconfig=kc, node_name=NODE)).fact("runtimeclasses")["error"]


def test_hosts_built_per_cycle_share_one_cache(api):
    double, kc = api
    cfg = config(kubeconfig=kc, node_name=NODE)
    wiring = ApiWiring(name_host=Base)  # what `run` keeps for the process (agent/cli_run.py)
    for _ in range(5):  # `run` builds a Host (and its fact source) every cycle
        source = wiring.wrap(Base(), cfg)
        assert source.fact("node")["metadata"]["name"] == NODE
        assert source.fact("pci_devices") == ["from base"]
    assert double.counts() == {"GET": 1}
    other = wiring.wrap(Base(), config(kubeconfig=kc, node_name="gpu-host-2"))
    assert "HTTP 403" in other.fact("node")["error"]


def test_run_shares_one_client_with_the_publisher_one_exec_run_per_credential(api, tmp_path):
    """`run` wires the API facts and the publisher (agent/cli_run.py, agent/cli_kube.py) to
    the same session: the exec plugin runs once per credential lifetime, not once each."""
    import datetime

    from agent.outputs.node.publish import Publisher
    from tests.kube_reports import report

    double, _ = api
    runs = tmp_path / "runs"
    expiry = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
              ).strftime("%Y-%m-%dT%H:%M:%SZ")
    plugin = tmp_path / "plugin"
    plugin.write_text(
        f"#!/bin/sh\necho run >> {runs}\n"
        "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
        f"\"status\":{{\"token\":\"t\",\"expirationTimestamp\":\"{expiry}\"}}}}'\n")
    plugin.chmod(0o755)
    kc = tmp_path / "exec-kubeconfig"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}))
    cfg = config(kubeconfig=str(kc), node_name=NODE, consecutive_opens=1)
    wiring = ApiWiring(name_host=Base)
    pub = Publisher(cfg, session=wiring.session(cfg))
    for _ in range(5):  # five cycles: the checks read the facts, then the verdict is published
        source = wiring.wrap(Base(), cfg)
        assert source.fact("node")["metadata"]["name"] == NODE
        assert source.fact("runtimeclasses")["items"]
        assert pub.publish(report()).error is None
    assert len(runs.read_text().splitlines()) == 1
    assert double.counts()["GET"] == 2  # the Node once, the RuntimeClasses once
    pub.close()


def test_the_node_name_is_resolved_once_per_session_from_the_host_the_root_opened(api, tmp_path):
    """`run` opens a Host every cycle; the name is read from the first one (agent/cli_kube.py)
    and not again until the kube settings change."""
    double, kc = api
    root = tmp_path / "root" / "etc"
    root.mkdir(parents=True)
    (root / "hostname").write_text("gpu-host-1\n")
    lookups = []

    class Counting(Host):
        def hostname(self):
            lookups.append(1)
            return super().hostname()

    def never():
        raise AssertionError("the opened Host is used, not a second one")

    wiring = ApiWiring(name_host=never)
    cfg = config(kubeconfig=kc)
    first = wiring.wrap(Counting(str(tmp_path / "root")), cfg)
    assert first.fact("pci_devices") is None and lookups == []  # looked up on first need only
    for _ in range(3):
        host = wiring.wrap(Counting(str(tmp_path / "root")), cfg)
        assert host.fact("node")["metadata"]["name"] == NODE
    assert wiring.session(cfg).node_name() == (NODE, "hostname")
    assert len(lookups) == 1
    assert double.counts() == {"GET": 1}


def test_run_wiring_one_session_for_facts_and_publisher_renewed_on_other_settings(api):
    """agent/cli_run.py: the Publisher of each config generation gets the session the host
    facts use; a reload with the same kube settings keeps it, other settings close it."""
    import argparse

    from agent.cli_run import _node_outputs
    from agent.daemon.service import Generation

    double, kc = api
    wiring = ApiWiring(name_host=Base)
    args = argparse.Namespace(dry_run=True, host_root=None, bundle=None)
    cfg = config(kubeconfig=kc, node_name=NODE)
    make = _node_outputs(args, True, wiring)
    (pub,) = make(Generation(cfg, None, None, "dra", []))
    assert pub.session is wiring.session(cfg)
    assert wiring.wrap(Base(), cfg).fact("node")["metadata"]["name"] == NODE
    (again,) = make(Generation(config(kubeconfig=kc, node_name=NODE), None, None, "dra", []))
    assert again.session is pub.session  # same settings: same session, same Node read
    assert double.counts() == {"GET": 1}
    other = config(kubeconfig=kc, node_name="gpu-host-2")
    (moved,) = make(Generation(other, None, None, "dra", []))
    assert moved.session is not pub.session and moved.session is wiring.session(other)
    assert moved.session.node_name() == ("gpu-host-2", "config kube.node_name")
    assert pub.session._client is None  # the old one was closed
    wiring.close()
