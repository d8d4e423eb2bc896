"""Every user mistake exits 2 with one line on stderr and no traceback (without --debug); a
reader that closes the pipe early is not an error; --debug is accepted after the subcommand.
Run through the real entry point in a child process, as a user types it."""
import os
import subprocess
import sys

import pytest

from tests.conftest import BUNDLES, REPO, run_cli

ENTRY = [sys.executable, "-m", "agent.cli"]


def _run(args, **kw):
    return subprocess.run(ENTRY + args, capture_output=True, text=True, timeout=120, cwd=REPO,
                          stdin=subprocess.DEVNULL, **kw)


def _one_line_usage_error(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu-node-agent: error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


def _config(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("address", ["nonsense", "localhost:99999", "1.2.3.4.5:9845", ":http",
                                     "bad_host!:9845"])
def test_run_with_a_bad_listen_address(address):
    line = _one_line_usage_error(_run(["run", "--listen-address", address]))
    assert "listen" in line and address in line


def test_config_validate_refuses_the_bad_listen_address_run_would_refuse(tmp_path):
    cfg = _config(tmp_path, "run:\n  listen_address: nonsense\n")
    line = _one_line_usage_error(_run(["config", "validate", cfg]))
    assert cfg in line and "run.listen_address" in line


def test_config_validate_refuses_inverted_time_sync_limits(tmp_path):
    cfg = _config(tmp_path, "time_sync:\n  offset_warn_s: 2.0\n  offset_fail_s: 1.0\n")
    line = _one_line_usage_error(_run(["config", "validate", cfg]))
    assert cfg in line and "time_sync" in line and "offset_warn_s" in line


def test_config_validate_accepts_equal_limits_and_existing_files(tmp_path):
    (tmp_path / "prom").mkdir()
    cfg = _config(tmp_path, f"time_sync:\n  offset_warn_s: 1.0\n  offset_fail_s: 1.0\n"
                            f"run:\n  textfile_dir: {tmp_path / 'prom'}\n")
    proc = _run(["config", "validate", cfg])
    assert proc.returncode == 0 and proc.stdout == f"{cfg}: valid\n", proc.stderr


@pytest.mark.parametrize("field,value", [("web_config_file", "/nonexistent/web.yml"),
                                         ("textfile_dir", "/nonexistent/textfile")])
def test_config_validate_refuses_files_that_do_not_exist(tmp_path, field, value):
    cfg = _config(tmp_path, f"run:\n  {field}: {value}\n")
    line = _one_line_usage_error(_run(["config", "validate", cfg]))
    assert f"run.{field}" in line and value in line


def test_config_validate_refuses_an_invalid_web_config(tmp_path):
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config: {cert_file: /nonexistent.crt}\n")
    cfg = _config(tmp_path, f"run:\n  web_config_file: {web}\n")
    line = _one_line_usage_error(_run(["config", "validate", cfg]))
    assert "run.web_config_file" in line


def test_run_refuses_a_missing_textfile_dir_at_start(tmp_path):
    cfg = _config(tmp_path, "run:\n  textfile_dir: /nonexistent/textfile\n")
    line = _one_line_usage_error(_run(["run", "--config", cfg, "--bundle",
                                       str(BUNDLES / "host-foundation-only")]))
    assert "textfile_dir" in line


def test_collect_into_a_non_empty_directory(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine\n")
    line = _one_line_usage_error(_run(["collect", "-o", str(tmp_path / "out")]))
    assert "not empty" in line
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine\n"


def test_collect_into_an_existing_file(tmp_path):
    (tmp_path / "out").write_text("x")
    assert "not a directory" in _one_line_usage_error(_run(["collect", "-o", str(tmp_path / "out")]))


@pytest.mark.parametrize("where", ["/nonexistent", "/etc/hostname"])
def test_check_host_root_that_is_not_a_directory(where):
    line = _one_line_usage_error(_run(["check", "--host-root", where]))
    assert where in line


def test_check_bundle_that_does_not_exist():
    assert "nope" in _one_line_usage_error(_run(["check", "--bundle", "nope"]))


@pytest.mark.parametrize("args", [["check", "--path", "nope"], ["check", "--format", "xml"],
                                  ["check", "--only", "nope"], ["check", "--skip", "nope"],
                                  ["explain", "nope"], ["frobnicate"], [],
                                  ["config", "validate", "/nonexistent.yaml"],
                                  ["check", "--config", "/nonexistent.yaml"]])
def test_other_typed_mistakes(args):
    _one_line_usage_error(_run(args))


def _closed_stdout(args):
    """Runs with stdout a pipe whose reader is already gone (what `| head` leaves)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(ENTRY + args, stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120, cwd=REPO, stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    return proc


@pytest.mark.parametrize("args", [["explain"], ["explain", "gpu-xid"], ["version"],
                                  ["config", "show"]])
def test_a_closed_reader_is_not_an_error(args):
    proc = _closed_stdout(args)
    assert proc.returncode == 0 and proc.stderr == ""


def test_a_closed_reader_never_hides_a_closed_gate():
    proc = _closed_stdout(["check", "--bundle", str(BUNDLES / "host-no-driver")])
    assert proc.returncode == 1 and proc.stderr == ""


def test_debug_is_accepted_after_the_subcommand():
    proc = _run(["check", "--bundle", str(BUNDLES / "host-no-driver"), "--only",
                 "driver-loaded", "--debug"])
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stderr
    assert _run(["version", "--debug"]).returncode == 0
    assert _run(["config", "show", "--debug"]).returncode == 0


def test_debug_after_the_subcommand_shows_the_traceback(monkeypatch):
    import agent.cli

    def boom(args):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(agent.cli, "cmd_version", boom)
    assert run_cli(["version"]).rc == 3
    with pytest.raises(RuntimeError):
        run_cli(["version", "--debug"])
