"""Bundles: recorded commands replay exactly; .tar.gz bundles are unpacked safely."""
import io
import tarfile

import pytest

from agent.host.bundle import BundleError, load_bundle
from tests.conftest import bundle


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _file(name, data=b"x"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _meta():
    return _file("bundle.yaml", b"format_version: 1\nhostname: t\n")


def test_recorded_command_replays_and_unrecorded_argv_is_not_recorded():
    loaded = load_bundle(bundle("host-foundation-only"))
    try:
        res = loaded.host.run(["kubelet", "--version"])
        assert res.ok and "v1.34.2" in res.stdout
        other = loaded.host.run(["kubelet", "--version", "--extra"])
        assert other.not_recorded and not other.ok
        missing = loaded.host.run(["/snap/k8s/current/bin/kubelet", "--version"])
        assert missing.not_installed
    finally:
        loaded.close()


def test_tar_gz_bundle_loads(tmp_path):
    archive = tmp_path / "b.tar.gz"
    _tar(archive, [_meta(), _file("root/etc/os-release", b"ID=ubuntu\n")])
    loaded = load_bundle(archive)
    try:
        assert loaded.host.read_text("/etc/os-release") == "ID=ubuntu\n"
    finally:
        loaded.close()
    assert not loaded.host.root.exists()  # the unpacked copy is removed


@pytest.mark.parametrize(
    "member, problem",
    [
        (_file("/etc/passwd"), "leaves the bundle"),
        (_file("root/../../evil"), "leaves the bundle"),
    ],
)
def test_unsafe_paths_are_refused(tmp_path, member, problem):
    archive = tmp_path / "bad.tar.gz"
    _tar(archive, [_meta(), member])
    with pytest.raises(BundleError, match=problem):
        load_bundle(archive)


def test_link_leaving_the_bundle_and_devices_are_refused(tmp_path):
    link = tarfile.TarInfo("root/etc/x")
    link.type, link.linkname = tarfile.SYMTYPE, "../../../../etc/shadow"
    archive = tmp_path / "link.tar.gz"
    _tar(archive, [_meta(), (link, None)])
    with pytest.raises(BundleError, match="points outside"):
        load_bundle(archive)
    dev = tarfile.TarInfo("root/dev/nvidia0")
    dev.type = tarfile.CHRTYPE
    archive2 = tmp_path / "dev.tar.gz"
    _tar(archive2, [_meta(), (dev, None)])
    with pytest.raises(BundleError, match="device"):
        load_bundle(archive2)
    hard = tarfile.TarInfo("root/etc/h")
    hard.type, hard.linkname = tarfile.LNKTYPE, "bundle.yaml"
    archive3 = tmp_path / "hard.tar.gz"
    _tar(archive3, [_meta(), (hard, None)])
    with pytest.raises(BundleError, match="hard link"):
        load_bundle(archive3)


@pytest.mark.parametrize(
    "files, problem",
    [
        ({}, "missing; not a bundle"),
        ({"bundle.yaml": "format_version: 9\n"}, "format_version"),
        ({"bundle.yaml": "format_version: 1\n", "commands.yaml": "- {argv: 3}\n"}, "argv"),
        ({"bundle.yaml": "format_version: 1\n", "gpus.json": "{not json"}, "invalid JSON"),
        ({"bundle.yaml": "format_version: 1\n", "commands.yaml": "- [\n"}, "invalid YAML"),
    ],
)
def test_malformed_bundles_are_one_line_errors(tmp_path, files, problem):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(BundleError, match=problem) as info:
        load_bundle(tmp_path)
    assert "\n" not in str(info.value)
