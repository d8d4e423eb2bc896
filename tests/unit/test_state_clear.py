"""`gpu-node-agent clear` in-process: argument checking, who/when recorded, exit codes."""

import json

from agent.xid.clear import boot_id
from agent.xid.state import StateStore, add_fault
from tests.conftest import run_cli


def config(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\n")
    return str(cfg)


def test_bad_target_is_a_usage_error(tmp_path):
    res = run_cli(["clear", "gpu4", "--config", config(tmp_path)])
    assert res.rc == 2 and "expected a GPU index, UUID, PCI bus id or 'all'" in res.err


def test_clear_by_uuid_removes_that_gpu_only(tmp_path, monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    store = StateStore(str(tmp_path / "state"), boot_id())
    for i in (1, 2):
        store.update(lambda s, i=i: add_fault(s, {
            "gpu": {"pci": f"0000:{i}8:00", "index": i, "uuid": f"GPU-0000000{i}-aaaa"},
            "kind": "xid", "code": 95, "class": "reset-gpu", "last_mono_us": 1, "count": 1}))
    res = run_cli(["clear", "GPU-00000002-aaaa", "--config", config(tmp_path)])
    assert res.rc == 0 and "cleared 1 sticky fault(s)" in res.out
    data = json.loads((tmp_path / "state" / "sticky.json").read_text())
    assert [f["gpu"]["index"] for f in data["faults"]] == [1]
    assert data["clears"][0]["by"].startswith("alice (via sudo as ")
    assert data["clears"][0]["selector"] == "GPU-00000002-aaaa"


def test_an_unwritable_state_dir_is_one_line_not_a_traceback(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"state_dir: {blocker / 'state'}\n")
    res = run_cli(["clear", "all", "--config", str(cfg)])
    assert res.rc == 2 and "clear: cannot update the state in" in res.err
    assert len(res.err.strip().splitlines()) == 1
