"""registration-labels (checks/registration_labels.py): the whole Outcome of each branch, and
how the config's kube section, the sources and unreadable files are taken.

Expected values are written by hand from the module's documented behaviour: the key is
`kube.allocation_label` (a non-string or empty value falls back to the default,
workload.example.com/gpu-allocation, agent/config.py's KubeConfig default); nodeadm's
NodeConfig sources are read in `os.ReadDir` order and their `spec.kubelet.flags` are
appended across files ("for flags with multiple values like `--node-labels`, the values from
every instance will be merged": awslabs/amazon-eks-ami nodeadm/internal/api/merge.go);
`/etc/eks/kubelet/environment` holds `NODEADM_KUBELET_ARGS="..."` (aws/eks-hybrid
internal/kubelet/environment.go); --node-labels is comma-separated key=value (kubelet
command-line reference). A file that exists but cannot be read (here: past the agent's 4 MiB
read cap, agent/safeio/bounded.py) is a problem named with its path, never a silent skip.
"""
from types import SimpleNamespace

from agent.config import Config
from agent.host.seam import Host
from agent.model import Outcome, Status
from agent.safeio.bounded import DEFAULT_CAP
from checks.policy import ResolvedPolicy, load_policy
from checks.registration_labels import REGISTRATION_LABELS
from tests.checks.containerd_support import write_files

KEY = "workload.example.com/gpu-allocation"
ENV = "/etc/eks/kubelet/environment"
NODECONFIG = "/etc/eks/nodeadm/nodeConfig.yaml"
DROPINS = "/etc/eks/nodeadm.d"
PRESET_SUMMARY = ("a kubelet registration label pre-sets the allocation label, so GPU pods can "
                  "land before the gate opens: ")
UNKNOWN_SUMMARY = f"cannot tell whether the kubelet registers the allocation label {KEY}: "


def host_with(root, files, too_big=()):
    write_files(root, files)
    for path in too_big:
        # A regular file one byte past the read cap: it exists, and no read of it succeeds.
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            f.truncate(DEFAULT_CAP + 1)
    return Host(root)


def policy(**kube):
    settings = Config().model_dump()
    settings["kube"] = {**settings["kube"], **kube}
    return ResolvedPolicy(load_policy(2), "dra", settings=settings)


def nodeconfig(*flags):
    lines = "".join(f"    - {f}\n" for f in flags)
    return ("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n"
            f"    flags:\n{lines}")


def env(args):
    return f'NODEADM_KUBELET_ARGS="{args}"\n'


def preset_outcome(preset, read, key=KEY):
    return Outcome(Status.FAIL, PRESET_SUMMARY + "; ".join(preset),
                   {"label": key, "preset": preset, "preset_count": len(preset), "read": read},
                   code="allocation-label-preset")


# --- each branch's whole Outcome -----------------------------------------------------------

def test_kube_disabled_is_not_applicable_with_no_details(tmp_path):
    host = host_with(tmp_path, {ENV: env(f"--node-labels={KEY}=dra")})
    out = REGISTRATION_LABELS.run(host, policy(enabled=False))
    assert out == Outcome(Status.SKIP, "the agent writes no Node labels (kube.enabled: false)",
                          {}, skip="not-applicable")


def test_a_preset_in_the_rendered_args_fails_naming_label_preset_and_read(tmp_path):
    host = host_with(tmp_path, {ENV: env(f"--v=2 --node-labels={KEY}=dra")})
    out = REGISTRATION_LABELS.run(host, policy())
    assert out == preset_outcome([f"{ENV} --node-labels sets {KEY}=dra"], [ENV])


def test_an_unparsable_source_is_unknown_naming_label_problems_and_read(tmp_path):
    host = host_with(tmp_path, {NODECONFIG: "apiVersion: v1\nkind: ConfigMap\n",
                                ENV: env("--v=2")})
    out = REGISTRATION_LABELS.run(host, policy())
    problem = f"{NODECONFIG}: no document of kind NodeConfig"
    assert out == Outcome(Status.UNKNOWN, UNKNOWN_SUMMARY + problem,
                          {"label": KEY, "problems": [problem], "read": [ENV]},
                          code="kubelet-flags-unreadable")


def test_nothing_to_read_is_input_missing_naming_the_label_and_an_empty_read(tmp_path):
    out = REGISTRATION_LABELS.run(host_with(tmp_path, {}), policy())
    assert out == Outcome(Status.SKIP,
                          "no nodeadm NodeConfig and no kubelet args file found, so no "
                          f"registration label to judge (looked for {KEY})",
                          {"label": KEY, "read": []}, skip="input-missing")


def test_other_labels_pass_naming_the_label_and_every_file_read(tmp_path):
    host = host_with(tmp_path, {NODECONFIG: nodeconfig("--node-labels=team=ml"),
                                ENV: env("--node-labels=team=ml")})
    out = REGISTRATION_LABELS.run(host, policy())
    assert out == Outcome(Status.PASS,
                          f"no kubelet registration label sets {KEY} ({NODECONFIG}, {ENV})",
                          {"label": KEY, "read": [NODECONFIG, ENV]})


# --- the kube section and the key ----------------------------------------------------------

def test_a_policy_without_settings_reads_with_the_default_key(tmp_path):
    # An object without `setting` (the engine's policy for a bare check run) gets defaults.
    host = host_with(tmp_path, {ENV: env(f"--node-labels={KEY}=dra")})
    out = REGISTRATION_LABELS.run(host, SimpleNamespace(path="dra"))
    assert out == preset_outcome([f"{ENV} --node-labels sets {KEY}=dra"], [ENV])


def test_a_kube_section_that_is_not_a_mapping_is_taken_as_empty(tmp_path):
    host = host_with(tmp_path, {ENV: env(f"--node-labels={KEY}=dra")})
    for kube in ("disabled", ["enabled", False]):
        pol = ResolvedPolicy(load_policy(2), "dra", settings={"kube": kube})
        out = REGISTRATION_LABELS.run(host, pol)
        assert out == preset_outcome([f"{ENV} --node-labels sets {KEY}=dra"], [ENV]), kube


def test_an_empty_or_non_string_key_falls_back_to_the_default(tmp_path):
    host = host_with(tmp_path, {ENV: env(f"--node-labels={KEY}=dra")})
    for key in ("", 42):
        out = REGISTRATION_LABELS.run(host, policy(allocation_label=key))
        assert out == preset_outcome([f"{ENV} --node-labels sets {KEY}=dra"], [ENV]), key


# --- unreadable files ----------------------------------------------------------------------

def test_a_nodeconfig_that_cannot_be_read_is_unknown_not_absent(tmp_path):
    host = host_with(tmp_path, {}, too_big=(NODECONFIG,))
    out = REGISTRATION_LABELS.run(host, policy())
    problem = f"{NODECONFIG}: could not be read"
    assert out == Outcome(Status.UNKNOWN, UNKNOWN_SUMMARY + problem,
                          {"label": KEY, "problems": [problem], "read": []},
                          code="kubelet-flags-unreadable")


def test_an_args_file_that_cannot_be_read_is_unknown_naming_it(tmp_path):
    host = host_with(tmp_path, {}, too_big=("/etc/default/kubelet",))
    out = REGISTRATION_LABELS.run(host, policy())
    problem = "/etc/default/kubelet: could not be read"
    assert out == Outcome(Status.UNKNOWN, UNKNOWN_SUMMARY + problem,
                          {"label": KEY, "problems": [problem], "read": []},
                          code="kubelet-flags-unreadable")


# --- several files of one source -----------------------------------------------------------

def test_a_bad_file_does_not_stop_the_files_after_it(tmp_path):
    # 10-other.yaml has no NodeConfig; 20-kubelet.yaml, read after it by name, sets the key.
    host = host_with(tmp_path, {f"{DROPINS}/10-other.yaml": "kind: ConfigMap\n",
                                f"{DROPINS}/20-kubelet.yaml":
                                nodeconfig(f"--node-labels={KEY}=dra")})
    out = REGISTRATION_LABELS.run(host, policy())
    assert out == preset_outcome(
        [f"{DROPINS}/20-kubelet.yaml spec.kubelet.flags --node-labels sets {KEY}=dra"],
        [f"{DROPINS}/20-kubelet.yaml"])


def test_presets_accumulate_across_files_and_sources(tmp_path):
    host = host_with(tmp_path, {f"{DROPINS}/10-a.yaml": nodeconfig(f"--node-labels={KEY}=a"),
                                f"{DROPINS}/20-b.yaml": nodeconfig(f"--node-labels {KEY}=b"),
                                f"{DROPINS}/30-c.yaml": nodeconfig("--v=2"),
                                ENV: env(f"--node-labels={KEY}=c")})
    out = REGISTRATION_LABELS.run(host, policy())
    assert out == preset_outcome(
        [f"{DROPINS}/10-a.yaml spec.kubelet.flags --node-labels sets {KEY}=a",
         f"{DROPINS}/20-b.yaml spec.kubelet.flags --node-labels sets {KEY}=b",
         f"{ENV} --node-labels sets {KEY}=c"],
        [f"{DROPINS}/10-a.yaml", f"{DROPINS}/20-b.yaml", f"{DROPINS}/30-c.yaml", ENV])
