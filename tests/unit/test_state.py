"""The sticky-fault store (agent/xid/state.py): atomic writes, tolerance, boot ids, the lock, clears."""

import json
import logging
import os
import threading
import time

import pytest

from agent.xid.state import (
    STATE_FILE,
    StateStore,
    add_clear,
    add_fault,
    cleared,
    empty_state,
    read_state_file,
)


def fault(pci="0000:9b:00", code=119, klass="reset-gpu", mono=1_000_000, index=4):
    return {"gpu": {"pci": pci, "index": index, "uuid": f"GPU-{pci}"}, "kind": "xid",
            "code": code, "class": klass, "first_mono_us": mono, "last_mono_us": mono,
            "first_at": 1.0, "last_at": 1.0, "count": 1, "message": "m"}


def test_missing_file_is_a_fresh_state(tmp_path):
    assert StateStore(str(tmp_path), "b1").load() == empty_state("b1")
    assert read_state_file(str(tmp_path / STATE_FILE)) == empty_state(None)


def test_update_writes_atomically_and_leaves_no_temp_file(tmp_path):
    store = StateStore(str(tmp_path / "state"), "b1")
    store.update(lambda s: add_fault(s, fault()))
    names = sorted(os.listdir(tmp_path / "state"))
    assert names == ["sticky.json", "sticky.lock"]
    data = json.loads((tmp_path / "state" / STATE_FILE).read_text())
    assert data["boot_id"] == "b1" and data["faults"][0]["code"] == 119


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    store = StateStore(str(tmp_path), "b1")
    store.update(lambda s: add_fault(s, fault()))
    before = (tmp_path / STATE_FILE).read_text()

    def boom(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        store.update(lambda s: add_fault(s, fault(code=79, klass="reboot")))
    assert (tmp_path / STATE_FILE).read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["sticky.json", "sticky.lock"]


@pytest.mark.parametrize("content", ["{not json", "[]", '{"version": 99, "faults": [], "clears": []}',
                                     '{"version": 1, "faults": "x", "clears": []}', "\x00\x01"])
def test_corrupt_file_is_a_warning_and_a_fresh_start(tmp_path, caplog, content):
    (tmp_path / STATE_FILE).write_text(content)
    store = StateStore(str(tmp_path), "b1")
    with caplog.at_level(logging.WARNING, logger="gpu-node-agent"):
        state = store.update(lambda s: None)
    assert state["faults"] == [] and state["boot_id"] == "b1"
    assert any("starting fresh" in r.getMessage() for r in caplog.records)
    assert json.loads((tmp_path / STATE_FILE).read_text())["version"] == 1
    assert read_state_file(str(tmp_path / STATE_FILE))["boot_id"] == "b1"


def test_corrupt_file_as_a_fact_is_unknown(tmp_path):
    (tmp_path / STATE_FILE).write_text("{")
    assert read_state_file(str(tmp_path / STATE_FILE)) is None


def test_a_new_boot_id_drops_the_old_faults(tmp_path):
    StateStore(str(tmp_path), "b1").update(lambda s: add_fault(s, fault()))
    assert StateStore(str(tmp_path), "b1").load()["faults"]
    assert StateStore(str(tmp_path), "b2").load() == empty_state("b2")


def test_the_lock_serialises_writers(tmp_path):
    store = StateStore(str(tmp_path), "b1")
    order = []
    with store.locked():
        t = threading.Thread(target=lambda: store.update(lambda s: order.append("other")))
        t.start()
        time.sleep(0.3)
        order.append("holder")  # the other writer is still blocked on flock
    t.join(5)
    assert order == ["holder", "other"]


def test_faults_merge_per_gpu_kind_and_code():
    state = empty_state("b1")
    assert add_fault(state, fault(mono=1))
    assert add_fault(state, fault(mono=5))
    assert add_fault(state, fault(code=79, klass="reboot", mono=6))
    assert [(f["code"], f["count"], f["last_mono_us"]) for f in state["faults"]] == [(119, 2, 5), (79, 1, 6)]


def test_clear_removes_and_holds_against_older_lines():
    state = empty_state("b1")
    add_fault(state, fault(mono=1_000))
    removed = add_clear(state, "4", "ops", "operator clear", mono_us=2_000, at=10.0)
    assert [f["code"] for f in removed] == [119] and state["faults"] == []
    assert state["clears"][-1]["pci"] == ["0000:9b:00"] and state["clears"][-1]["by"] == "ops"
    assert not add_fault(state, fault(mono=1_500))  # the same old line read again
    assert add_fault(state, fault(mono=2_500))  # a new XID after the clear


def test_an_observed_reset_does_not_clear_a_reboot_fault():
    state = empty_state("b1")
    add_fault(state, fault(code=79, klass="reboot", mono=1_000))
    add_fault(state, fault(code=119, klass="reset-gpu", mono=1_000))
    add_clear(state, "0000:9b:00", "gpu-node-agent", "gpu reset observed",
              classes=["reset-gpu"], mono_us=2_000)
    assert [f["code"] for f in state["faults"]] == [79]


def test_clear_by_uuid_and_all():
    gpu = {"pci": "0000:18:00", "index": 0, "uuid": "GPU-abc"}
    state = {"clears": [{"selector": "gpu-ABC", "pci": [], "mono_us": 10, "at": 1.0, "classes": None}]}
    assert cleared(state, gpu, "reboot", 5, None)
    assert not cleared(state, gpu, "reboot", 11, None)
    assert not cleared(state, {"pci": "0000:2a:00", "index": 1}, "reboot", 5, None)
    every = {"clears": [{"selector": "all", "mono_us": 10, "at": 100.0, "classes": None}]}
    assert cleared(every, {"pci": "x"}, "reset-gpu", None, 50.0)  # wall-clock lines
    assert not cleared(every, {"pci": "x"}, "reset-gpu", None, 150.0)
