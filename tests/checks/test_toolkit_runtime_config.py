"""toolkit-runtime-config: the NVIDIA Container Runtime's config.toml against the device
plugin's deviceListStrategy (policy version 2; not applicable under version 1).

Expectations by hand from the toolkit's defaults (`nvidia-ctk config default`: envvar accepted
when unprivileged, volume mounts not accepted, mode auto) and the device plugin README
("deviceListStrategy", envvar the default); the rules are docs/decisions.md's.
"""
import pytest

from tests.checks.test_toolkit_floor import verdict

CHECK = "toolkit-runtime-config"


@pytest.mark.parametrize("name, path, expected", [
    ("toolkit-runtime-config-default", "device-plugin", ("pass", None)),
    ("toolkit-runtime-config-default", "dra", ("pass", None)),
    # No config.toml at all: the defaults would serve envvar, but nothing is there to judge.
    ("host-foundation-only", "device-plugin", ("skip", None)),
    ("host-foundation-only", "dra", ("skip", None)),
    ("toolkit-runtime-config-envvar-refused", "device-plugin",
     ("fail", "toolkit-runtime-envvar-refused")),
    ("toolkit-runtime-config-envvar-refused", "operator-clusterpolicy",
     ("fail", "toolkit-runtime-envvar-refused")),
    ("toolkit-runtime-config-envvar-refused", "dra", ("pass", None)),
    ("toolkit-runtime-config-cdi-mode", "device-plugin",
     ("fail", "toolkit-runtime-cdi-mode-envvar")),
    ("toolkit-runtime-config-cdi-mode", "operator-gpucluster", ("pass", None)),
    ("toolkit-runtime-config-volume-mounts", "device-plugin",
     ("fail", "toolkit-runtime-volume-mounts-refused")),
    ("toolkit-runtime-config-invalid", "device-plugin",
     ("unknown", "toolkit-runtime-config-invalid")),
])
def test_runtime_config_against_the_path(name, path, expected, tmp_path):
    assert verdict(name, path, 2, check=CHECK, tmp_path=tmp_path)[:2] == expected


@pytest.mark.parametrize("name", ["toolkit-runtime-config-envvar-refused",
                                  "toolkit-runtime-config-cdi-mode"])
def test_policy_version_1_does_not_judge_it(name, tmp_path):
    status, code, _ = verdict(name, "device-plugin", 1, check=CHECK, tmp_path=tmp_path)
    assert status == "skip" and code is None


def test_dra_reports_the_mode(tmp_path):
    _, _, summary = verdict("toolkit-runtime-config-cdi-mode", "dra", 2, check=CHECK,
                            tmp_path=tmp_path)
    assert "runtime mode 'cdi'" in summary and "containerd injects" in summary


def test_summaries_write_toml_booleans(tmp_path):
    _, _, summary = verdict("toolkit-runtime-config-envvar-refused", "device-plugin", 2,
                            check=CHECK, tmp_path=tmp_path)
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in summary


def test_a_cdi_strategy_is_served_by_any_mode(tmp_path):
    from tests.conftest import bundle, run_cli

    config = tmp_path / "cdi-cri.yaml"
    config.write_text("policy_version: 2\ntoolkit: {device_list_strategy: cdi-cri}\n")
    res = run_cli(["check", "--bundle", bundle("toolkit-runtime-config-cdi-mode"), "--config",
                   str(config), "--path", "device-plugin", "--only", CHECK, "--format", "json"])
    got = res.json()["checks"][0]
    assert got["status"] == "pass" and "deviceListStrategy cdi-cri" in got["summary"]


def test_no_config_fails_a_strategy_the_defaults_refuse(tmp_path):
    from tests.conftest import bundle, run_cli

    config = tmp_path / "mounts.yaml"
    config.write_text("policy_version: 2\ntoolkit: {device_list_strategy: volume-mounts}\n")
    res = run_cli(["check", "--bundle", bundle("host-foundation-only"), "--config",
                   str(config), "--path", "device-plugin", "--only", CHECK, "--format", "json"])
    got = res.json()["checks"][0]
    assert (got["status"], got["code"]) == ("fail", "toolkit-runtime-volume-mounts-refused")
    assert "absent (the toolkit's defaults)" in got["summary"]


def test_an_unknown_strategy_is_a_config_error(tmp_path):
    from tests.conftest import bundle, run_cli

    config = tmp_path / "bad.yaml"
    config.write_text("toolkit: {device_list_strategy: env}\n")
    res = run_cli(["check", "--bundle", bundle("toolkit-runtime-config-default"), "--config",
                   str(config), "--only", CHECK])
    assert res.rc == 2 and "device_list_strategy" in res.err


def test_cdi_mode_with_a_spec_that_names_gpus_by_uuid_serves_the_envvar_strategy(tmp_path):
    # The device plugin puts GPU UUIDs in NVIDIA_VISIBLE_DEVICES (deviceIDStrategy uuid); cdi
    # mode looks up nvidia.com/gpu=<uuid>: a spec generated with --device-name-strategy=uuid
    # has those names (CDI spec format: devices[].name), so nothing is missing.
    import shutil

    from tests.conftest import bundle, run_cli

    dest = tmp_path / "b"
    shutil.copytree(bundle("toolkit-runtime-config-cdi-mode"), dest, symlinks=True)
    spec = dest / "root/etc/cdi/nvidia.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
                    "- name: GPU-0b6c2b7e-0000-4000-8000-000000000000\n"
                    "  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
                    "containerEdits: {}\n")
    res = run_cli(["check", "--bundle", str(dest), "--path", "device-plugin", "--only", CHECK,
                   "--format", "json", "--config",
                   str(bundle("toolkit-runtime-config-cdi-mode") + "/test-config.yaml")])
    got = res.json()["checks"][0]
    assert got["status"] == "pass", got["summary"]
    # The same host with an index-named spec still fails: the UUIDs resolve to nothing.
    spec.write_text(spec.read_text().replace("GPU-0b6c2b7e-0000-4000-8000-000000000000", "0"))
    res = run_cli(["check", "--bundle", str(dest), "--path", "device-plugin", "--only", CHECK,
                   "--format", "json", "--config",
                   str(bundle("toolkit-runtime-config-cdi-mode") + "/test-config.yaml")])
    got = res.json()["checks"][0]
    assert (got["status"], got["code"]) == ("fail", "toolkit-runtime-cdi-mode-envvar")
