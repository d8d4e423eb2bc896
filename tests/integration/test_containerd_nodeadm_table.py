"""nodeadm's partial CRI table against the real containerd: nodeadm's config.toml (aws/eks-hybrid
internal/containerd/config.template.toml) plus a config.d/00-nodeadm.toml holding only the
`nvidia` runtime (a partial `[plugins."io.containerd.grpc.v1.cri"...]` table, as
spec.containerd.config renders it). containerd 1.x replaces the whole CRI table per imported
file (docs/man/containerd-config.toml.5.md, "imports"): 1.6's and 1.7's `config dump` lose
nodeadm's sandbox_image, runc's SystemdCgroup = true and the registry config_path (and on 1.7
the cni bin_dir, whose default differs); 2.1 merges key by key and keeps them all. The check's
report must say exactly that."""
import pytest

from agent.config import Config
from agent.host.seam import Host
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.policy import ResolvedPolicy, load_policy
from tests.conftest import BUNDLES
from tests.integration.containerd.support import (
    BinaryAs,
    containerd_16,
    containerd_17,
    containerd_21,
    rewrite_tree,
)

pytestmark = pytest.mark.integration
BUNDLE = "containerd-nodeadm-partial-cri-table"
BINARIES = {"1.6": containerd_16, "1.7": containerd_17, "2.1": containerd_21}
# What nodeadm's config.toml sets in the CRI table and each series' dump no longer has
# (read off the template and the real dumps: the runc runtime is gone altogether, though
# default_runtime_name still says "runc"; discard_unpacked_layers false; an empty
# config_path; 1.6 prints pause:3.6, 1.7 pause:3.8 and its own cni bin_dir /usr/lib/cni).
_BOTH = {"sandbox_image", "registry.config_path", "containerd.discard_unpacked_layers",
         "containerd.runtimes.runc.runtime_type", "containerd.runtimes.runc.options.SystemdCgroup"}
LOST = {"1.6": _BOTH, "1.7": _BOTH | {"cni.bin_dir"}}


def run(tmp_path, series, version):
    tree = rewrite_tree(BUNDLES / BUNDLE / "root", tmp_path / "root")
    settings = Config(containerd={"config_path": str(tree / "etc/containerd/config.toml")}).model_dump()
    host = Host("/", commands=BinaryAs(BINARIES[series]()))
    return CONTAINERD_NVIDIA_RUNTIME.run(host, ResolvedPolicy(load_policy(version), "device-plugin",
                                                              settings=settings))


@pytest.mark.parametrize("series", ["1.6", "1.7"])
def test_1x_dump_loses_what_the_report_names(tmp_path, series):
    out = run(tmp_path, series, 2)
    assert out.details["source"] == "containerd config dump"
    assert out.status == "warn" and out.code == "nodeadm-partial-cri-table", out.summary
    found = out.details["nodeadm_partial_cri_table"]
    assert set(found["removes"]) == LOST[series]
    lost = {x["key"]: x for x in found["lost"]}
    assert lost["sandbox_image"]["written"] == "localhost/kubernetes/pause:0.1.0"
    assert lost["sandbox_image"]["effective"].startswith("registry.k8s.io/pause:")
    assert lost["containerd.runtimes.runc.options.SystemdCgroup"] == {
        "key": "containerd.runtimes.runc.options.SystemdCgroup", "written": True, "effective": None}
    assert "sandbox_image" in out.summary.split(" it removes ", 1)[1]


def test_policy_1_keeps_the_pass_and_names_it(tmp_path):
    out = run(tmp_path, "1.6", 1)
    assert out.status == "pass" and out.code is None
    assert "sandbox_image" in out.details["nodeadm_partial_cri_table"]["removes"]


def test_21_merges_and_keeps_them(tmp_path):
    out = run(tmp_path, "2.1", 2)
    assert out.details["source"] == "containerd config dump"
    assert out.status == "pass", out.summary
    assert "nodeadm_partial_cri_table" not in out.details
