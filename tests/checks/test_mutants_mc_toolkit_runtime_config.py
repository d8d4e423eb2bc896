"""toolkit-runtime-config on hand-written /etc/nvidia-container-runtime/config.toml files: the
exact verdict, summary and details for each path and deviceListStrategy.

The defaults are `nvidia-ctk config default`'s (NVIDIA/nvidia-container-toolkit
internal/config/config.go: accept-nvidia-visible-devices-envvar-when-unprivileged = true,
accept-nvidia-visible-devices-as-volume-mounts = false, [nvidia-container-runtime] mode =
"auto"); the strategies are the device plugin's (NVIDIA/k8s-device-plugin README,
"deviceListStrategy", envvar the default); the rules are docs/decisions.md's.
"""
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from agent.host.seam import Host
from agent.model import SKIP_INPUT_MISSING, SKIP_NOT_APPLICABLE, Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.toolkit_runtime_config import TOOLKIT_RUNTIME_CONFIG

CONFIG = "/etc/nvidia-container-runtime/config.toml"
ENVVAR = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"
INVALID = "toolkit-runtime-config-invalid"


def check(tmp_path: Path, config: Optional[str], path: str = "device-plugin",
          strategy: Optional[str] = None, spec: Optional[str] = None,
          overrides: Optional[Dict[str, Any]] = None) -> Outcome:
    if config is not None:
        f = tmp_path / CONFIG.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(config)
    if spec is not None:
        d = tmp_path / "etc/cdi"
        d.mkdir(parents=True, exist_ok=True)
        (d / "nvidia.yaml").write_text(spec)
    settings: Dict[str, Any] = {}
    if strategy is not None:
        settings["toolkit"] = {"device_list_strategy": strategy}
    policy = ResolvedPolicy(load_policy(2, overrides), path, settings=settings)
    return TOOLKIT_RUNTIME_CONFIG.run(Host(tmp_path), policy)


def found(mode: str = "auto", envvar: bool = True, mounts: bool = False) -> Dict[str, Any]:
    return {"mode": mode, ENVVAR: envvar, MOUNTS: mounts}


def test_operator_owned_toolkit_is_not_judged(tmp_path):
    owned = {"toolkit": {"managed_by_operator": True}}
    out = check(tmp_path, f"{ENVVAR} = false\n", "operator-clusterpolicy", overrides=owned)
    assert out == Outcome(Status.SKIP, "the GPU Operator installs and configures the toolkit on "
                          "the operator-clusterpolicy path (its toolkit and device-plugin "
                          "settings)", {}, skip=SKIP_NOT_APPLICABLE)
    # The same policy on a path the operator does not serve judges the host's file.
    out = check(tmp_path, None, "device-plugin", overrides=owned)
    assert out.status == Status.FAIL and out.code == "toolkit-runtime-envvar-refused"


def test_invalid_toml_is_unknown_naming_the_file(tmp_path):
    out = check(tmp_path, "mode = \n")
    assert (out.status, out.code, dict(out.details)) == (Status.UNKNOWN, INVALID,
                                                         {"config": CONFIG})
    assert out.summary.startswith("cannot judge the NVIDIA Container Runtime's config: "
                                  f"{CONFIG}: invalid TOML: ")


@pytest.mark.parametrize("text", [
    "[nvidia-container-runtime]\nmode = 5\n",
    f"{ENVVAR} = \"yes\"\n",  # a valid mode and a string where a boolean belongs
    f"{MOUNTS} = 1\n[nvidia-container-runtime]\nmode = \"auto\"\n",
])
def test_values_of_the_wrong_type_are_unknown(tmp_path, text):
    out = check(tmp_path, text)
    assert out == Outcome(Status.UNKNOWN, f"{CONFIG}: mode must be a string and the accept-* "
                          "keys booleans", {"config": CONFIG}, code=INVALID)


@pytest.mark.parametrize("text", [
    "",                                                   # no runtime table
    "nvidia-container-runtime = 5\n",                     # not a table
    "[nvidia-container-runtime]\nlog-level = \"info\"\n",  # a table without mode
])
def test_mode_defaults_to_auto(tmp_path, text):
    out = check(tmp_path, text, "dra")
    assert out == Outcome(
        Status.PASS, f"runtime mode 'auto' ({CONFIG}): on the dra path containerd injects the "
        "DRA driver's CDI devices itself, so the mode does not decide whether GPUs arrive",
        {**found(), "config": CONFIG})


def test_dra_path_reports_the_mode_cut_to_sixty_four_characters(tmp_path):
    text = f"{ENVVAR} = false\n{MOUNTS} = true\n[nvidia-container-runtime]\nmode = \"{'m' * 80}\"\n"
    out = check(tmp_path, text, "operator-gpucluster")
    assert out == Outcome(
        Status.PASS, f"runtime mode '{'m' * 64}' ({CONFIG}): on the operator-gpucluster path "
        "containerd injects the DRA driver's CDI devices itself, so the mode does not decide "
        "whether GPUs arrive", {**found("m" * 64, False, True), "config": CONFIG})


def test_dra_path_without_the_file_is_input_missing(tmp_path):
    out = check(tmp_path, None, "dra")
    assert out == Outcome(Status.SKIP, f"no {CONFIG}: on the dra path containerd injects the "
                          "DRA driver's CDI devices itself", {"config": CONFIG},
                          skip=SKIP_INPUT_MISSING)


@pytest.mark.parametrize("strategy, shown", [(None, "envvar"), ("envvar", "envvar"),
                                             ("bogus", "envvar"), ("cdi-cri", "cdi-cri"),
                                             ("cdi-annotations", "cdi-annotations")])
def test_defaults_file_passes_naming_the_strategy(tmp_path, strategy, shown):
    out = check(tmp_path, "[nvidia-container-runtime]\nmode = \"auto\"\n", strategy=strategy)
    assert out == Outcome(
        Status.PASS, f"runtime mode 'auto', {ENVVAR} = true, {MOUNTS} = false ({CONFIG}) serve "
        f"the device plugin's deviceListStrategy {shown}",
        {**found(), "device_list_strategy": shown, "config": CONFIG})


def test_volume_mounts_accepted_passes(tmp_path):
    out = check(tmp_path, f"{MOUNTS} = true\n{ENVVAR} = false\n", strategy="volume-mounts")
    assert out == Outcome(
        Status.PASS, f"runtime mode 'auto', {ENVVAR} = false, {MOUNTS} = true ({CONFIG}) serve "
        "the device plugin's deviceListStrategy volume-mounts",
        {**found("auto", False, True), "device_list_strategy": "volume-mounts",
         "config": CONFIG})


def test_no_file_is_input_missing_when_the_defaults_would_serve(tmp_path):
    out = check(tmp_path, None)
    assert out == Outcome(Status.SKIP, f"{CONFIG} absent (the toolkit's defaults) serve the "
                          "device plugin's deviceListStrategy envvar; nothing on the host to "
                          "judge", {"config": CONFIG}, skip=SKIP_INPUT_MISSING)


def test_envvar_refused_fails_with_details(tmp_path):
    out = check(tmp_path, f"{ENVVAR} = false\n")
    assert out == Outcome(
        Status.FAIL, f"{CONFIG}: {ENVVAR} = false, so the runtime ignores NVIDIA_VISIBLE_DEVICES "
        "in unprivileged pods, and the device plugin passes GPUs that way (deviceListStrategy "
        "envvar): pods start without their GPUs",
        {**found("auto", False), "device_list_strategy": "envvar", "config": CONFIG},
        code="toolkit-runtime-envvar-refused")


def test_volume_mounts_refused_fails_with_details(tmp_path):
    out = check(tmp_path, None, strategy="volume-mounts")
    where = f"{CONFIG} absent (the toolkit's defaults)"
    assert out == Outcome(
        Status.FAIL, f"{where}: {MOUNTS} = false, so the runtime ignores the device plugin's "
        "/var/run/nvidia-container-devices mounts (deviceListStrategy volume-mounts)",
        {**found(), "device_list_strategy": "volume-mounts", "config": where},
        code="toolkit-runtime-volume-mounts-refused")


CDI_MODE = "[nvidia-container-runtime]\nmode = \"cdi\"\n"


def spec(kind: str, name: str) -> str:
    return (f"cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n- name: {name}\n  containerEdits:\n"
            "    deviceNodes:\n    - path: /dev/nvidia0\n")


def cdi_mode_failure() -> Outcome:
    return Outcome(
        Status.FAIL, f"{CONFIG}: mode = \"cdi\" resolves NVIDIA_VISIBLE_DEVICES as CDI names "
        "(nvidia.com/gpu=<value>), and the device plugin passes GPU ids there (deviceListStrategy "
        "envvar) and no NVIDIA CDI spec names GPUs by UUID: use a CDI strategy, mode \"auto\", "
        "or a spec generated with --device-name-strategy=uuid",
        {**found("cdi"), "device_list_strategy": "envvar", "config": CONFIG},
        code="toolkit-runtime-cdi-mode-envvar")


@pytest.mark.parametrize("spec_text", [
    None,
    spec("nvidia.com/gpu", "0"),
    spec("example.com/gpu", "GPU-4b8e0e8a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"),  # another vendor's kind
])
def test_cdi_mode_with_envvar_fails_without_uuid_named_nvidia_gpus(tmp_path, spec_text):
    assert check(tmp_path, CDI_MODE, spec=spec_text) == cdi_mode_failure()


def test_cdi_mode_with_envvar_passes_when_nvidia_spec_names_gpus_by_uuid(tmp_path):
    out = check(tmp_path, CDI_MODE, spec=spec("nvidia.com/gpu",
                                              "GPU-4b8e0e8a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"))
    assert out.status == Status.PASS and out.code is None
    assert out.details["mode"] == "cdi"
