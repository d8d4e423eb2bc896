"""Bounded parsing: the YAML and JSON loaders refuse alias bombs, deep nesting and huge
integers with our own error type, and each of the red-team's exit-3 inputs is now exit 2 with
one line through the real command line."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from agent.errors import ParseError
from agent.safeio import jsonio, yamlio
from tests.conftest import REPO
from tests.hostile_bundles import META, dirm, reg, write_tar

LIMIT_S = 120  # bounds a hang only; not a speed assertion


def _cli(*args, tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True,
                          text=True, timeout=LIMIT_S, cwd=REPO, env=env)


def _one_line_exit_2(result, *needles):
    assert result.returncode == 2, (result.returncode, result.stderr[-800:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-800:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# 9 levels of 9 aliases: 9**9 = 387,420,489 nodes once expanded (the "billion laughs").
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))


@pytest.mark.parametrize("text, problem", [
    (BOMB, "aliases are expanded"),
    ("&a [*a]", "refers to its own enclosing node"),
    ("[" + "1, " * 50_000 + "1]", "more than 50000 nodes"),  # no alias: just too many
    # libyaml's composer would segfault; newer libyaml stops it first ("maximum nesting depth")
    ("[" * 100_000, "nest"),
    ("- " * 70 + "x", "nested deeper than 64 levels"),
    ("n: " + "1" * 5000, "an integer longer than 640 digits"),
    ("n: !!int '" + "7" * 700 + "'", "an integer longer than 640 digits"),
    ("{[1]: 2}", "unhashable"),
    ("d: 2001-13-45", "month"),
    ("a: [", "line "),
    ("x: \x07", "control characters"),
])
def test_yaml_loader_refuses_with_its_own_error(text, problem):
    with pytest.raises(yamlio.YamlError) as info:
        yamlio.safe_load(text)
    assert isinstance(info.value, ParseError)
    assert problem in str(info.value) and "\n" not in str(info.value)


def test_yaml_limits_leave_ordinary_documents_alone():
    text = "a: &x {k: [1, 2, 3]}\nb: *x\nc: {<<: *x, m: 1}\n" + "".join(f"k{i}: {i}\n" for i in range(500))
    data = yamlio.safe_load(text)
    assert data["b"] == {"k": [1, 2, 3]} and data["k499"] == 499
    assert data["c"] == {"k": [1, 2, 3], "m": 1}  # merge keys still work
    assert list(yamlio.safe_load_all("a: 1\n---\nb: 2\n")) == [{"a": 1}, {"b": 2}]
    assert yamlio.safe_load("n: " + "9" * 640)["n"] == int("9" * 640)  # at the limit: kept


@pytest.mark.parametrize("text, problem", [
    ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
    ("[" * 50_000, "nested deeper than 64 levels"),
    ("[" + "1," * 100_000 + "1]", "more than 100000 values"),
    ('[{"a": 1}' + ', {"a": 1}' * 100_000 + "]", "more than 100000 values"),
    ('{"a": ' + "1" * 5000 + "}", "an integer longer than 640 digits"),
    ('{"a": }', "line 1: invalid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    ('"' + "\\" * 10, "invalid JSON"),
])
def test_json_loader_refuses_with_its_own_error(text, problem):
    with pytest.raises(jsonio.JsonError) as info:
        jsonio.loads(text)
    assert isinstance(info.value, ParseError)
    assert problem in str(info.value)


def test_json_depth_ignores_brackets_inside_strings():
    text = json.dumps({"s": "[" * 500, "t": ["{" * 300]})
    assert jsonio.loads(text)["s"] == "[" * 500
    assert jsonio.loads("[" * 64 + "]" * 64) == eval("[" * 64 + "]" * 64)  # noqa: S307


# -- through the command line ------------------------------------------------------------
def test_config_with_a_huge_integer_is_exit_2(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("expected_gpus: " + "9" * 5000 + "\n")
    _one_line_exit_2(_cli("config", "validate", str(cfg), tmp_path=tmp_path), str(cfg), "640")


def test_config_alias_bomb_is_exit_2(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BOMB)
    _one_line_exit_2(_cli("config", "validate", str(cfg), tmp_path=tmp_path), "alias")


def test_dev_zero_as_config_is_exit_2(tmp_path):
    _one_line_exit_2(_cli("config", "validate", "/dev/zero", tmp_path=tmp_path),
                     "/dev/zero", "not a regular file")


def test_fifo_as_config_is_exit_2_and_does_not_block(tmp_path):
    fifo = tmp_path / "c.fifo"
    os.mkfifo(fifo)  # nobody ever writes to it: an open without O_NONBLOCK would block
    _one_line_exit_2(_cli("config", "validate", str(fifo), tmp_path=tmp_path),
                     str(fifo), "FIFO")


def test_oversize_config_is_exit_2(tmp_path):
    cfg = tmp_path / "big.yaml"
    cfg.write_text("# padding\n" * (110 * 1024))  # > 1 MiB (agent/boundedio.CONFIG_CAP)
    _one_line_exit_2(_cli("config", "validate", str(cfg), tmp_path=tmp_path), "cap")


def _dir_bundle(tmp_path, **files):
    b = tmp_path / "b"
    (b / "root").mkdir(parents=True)
    (b / "bundle.yaml").write_bytes(META)
    for name, text in files.items():
        (b / name.replace("_", ".")).write_text(text)
    return b


@pytest.mark.parametrize("files, needles", [
    ({"host_json": "[" * 5000 + "]" * 5000}, ("host.json", "nested deeper")),
    ({"gpus_json": '{"gpus": ' + "7" * 6000 + "}"}, ("gpus.json", "integer longer")),
    ({"commands_yaml": "- argv: [x]\n  rc: " + "1" * 6000 + "\n"}, ("commands.yaml", "integer")),
])
def test_bundle_files_over_a_parser_limit_are_exit_2(tmp_path, files, needles):
    b = _dir_bundle(tmp_path, **files)
    _one_line_exit_2(_cli("check", "--bundle", str(b), tmp_path=tmp_path), *needles)


def test_oversize_kmsg_log_is_exit_2(tmp_path):
    b = _dir_bundle(tmp_path)
    with open(b / "kmsg.log", "wb") as fh:
        fh.truncate(5 * 1024 * 1024)  # sparse: past the 4 MiB cap, costs no disk
    _one_line_exit_2(_cli("check", "--bundle", str(b), tmp_path=tmp_path), "kmsg.log", "cap")


def test_kmsg_log_over_the_line_cap_is_exit_2_and_only_newline_counts(tmp_path):
    b = _dir_bundle(tmp_path)
    (b / "kmsg.log").write_bytes(b"x\n" * 100_001)  # 200 KB, under the byte cap
    _one_line_exit_2(_cli("check", "--bundle", str(b), tmp_path=tmp_path), "100000 lines")
    from agent.host.bundle import load_bundle

    (b / "kmsg.log").write_bytes(b"a\rb\x0cc\n" * 3)  # \r, \f are not record separators
    loaded = load_bundle(b)
    try:
        assert loaded.host.kmsg() == ["a\rb\x0cc"] * 3
    finally:
        loaded.close()


def test_over_long_tar_names_are_exit_2(tmp_path):
    for i, (name, fmt) in enumerate([("a/" * 2100 + "x", tarfile.GNU_FORMAT),
                                     ("a/" * 2100 + "x", tarfile.PAX_FORMAT),
                                     ("root/" + "n" * 300, tarfile.PAX_FORMAT)]):
        archive = write_tar(tmp_path / f"long{i}.tar.gz",
                            [reg("bundle.yaml", META), dirm("root"), reg(name)], fmt=fmt)
        line = _one_line_exit_2(_cli("check", "--bundle", str(archive), tmp_path=tmp_path))
        assert "long" in line, line
    assert not [p for p in os.listdir(tmp_path) if p.startswith("gna-bundle-")]


def test_cdi_spec_alias_bomb_on_a_host_is_the_checks_verdict_naming_the_file(tmp_path):
    # A CDI spec is host data, not input to the command: the checks report it (unknown or
    # fail naming the file), the run does not crash and does not take 2 GB.
    tree = tmp_path / "tree"
    (tree / "etc" / "cdi").mkdir(parents=True)
    (tree / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tree / "proc" / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  x\n")
    (tree / "etc" / "cdi" / "nvidia.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n" + BOMB)
    result = _cli("check", "--host-root", str(tree), "--only", "cdi-spec-current",
                  "--format", "json", tmp_path=tmp_path)
    assert result.returncode == 1, result.stderr[-800:]
    (check,) = json.loads(result.stdout)["checks"]
    assert check["status"] in ("unknown", "fail"), check
    assert "/etc/cdi/nvidia.yaml" in check["summary"] and "alias" in check["summary"], check


def test_a_toml_bomb_under_root_is_the_containerd_checks_verdict(tmp_path):
    # 3.9 MB of empty tables: tomllib would take ~820 MiB (the unit's cap is 128 MiB). A host
    # file, not input to the command: the containerd checks report it naming the file.
    b = _dir_bundle(tmp_path)
    conf = b / "root" / "etc" / "containerd"
    conf.mkdir(parents=True)
    (conf / "config.toml").write_text("".join(f"[t{i}]\n" for i in range(400_000)))
    result = _cli("check", "--bundle", str(b), "--only", "containerd-nvidia-runtime",
                  "--path", "device-plugin", "--format", "json", tmp_path=tmp_path)
    assert result.returncode == 1, result.stderr[-800:]
    (check,) = json.loads(result.stdout)["checks"]
    assert check["status"] in ("unknown", "fail"), check
    assert "/etc/containerd/config.toml" in check["summary"], check
    assert "more than 10000" in check["summary"], check
