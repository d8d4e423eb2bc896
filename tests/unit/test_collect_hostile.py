"""`collect` on a hostile host: planted secrets in every form, symlinks and imports that lead out
of what the checks declare. Nothing planted may reach the bundle; what is copied still parses
to the structure the checks read; the bundle is private (0600 files, 0700 directories, a 0600
archive created O_EXCL). The planted host is tests/collect_hostile.py."""
import json
import os
import stat
import subprocess
import sys
import tarfile

import pytest
import yaml

from agent.cli import main
from agent.errors import OutputError
from agent.host.bundle import load_bundle
from agent.host.collect import collect
from agent.host.seam import Host
from checks.registry import ALL_CHECKS
from tests.collect_hostile import KMSG, FakeContainerd, build, bundle_bytes, leaks, plan, run_live

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

CRI = "io.containerd.grpc.v1.cri"


@pytest.fixture(scope="module")
def planted():
    return plan()


@pytest.fixture(scope="module")
def host_root(tmp_path_factory, planted):
    root = tmp_path_factory.mktemp("hostile") / "host"
    build(root, planted)
    return root


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory, host_root):
    """collect with a command source answering `containerd config dump` with registry auth."""
    host = Host(host_root, commands=FakeContainerd(), kmsg=KMSG, description="hostile tree")
    return collect(host, ALL_CHECKS, str(tmp_path_factory.mktemp("out") / "bundle"))


def test_the_plan_plants_at_least_sixteen_secret_forms_each_with_a_unique_canary(planted):
    values = list(planted.canaries().values())
    assert len(planted.forms) >= 16
    assert len(set(values)) == len(values)
    assert not any(a != b and a in b for a in values for b in values)


def test_the_host_tree_really_holds_every_canary(host_root, planted, tmp_path):
    """The grep below is only meaningful if the planted tree (and the fake commands) carry
    every canary: checked here on the raw inputs."""
    raw = b"".join(p.read_bytes() for p in host_root.rglob("*") if p.is_file() and not p.is_symlink())
    from tests.collect_hostile import dump_output

    raw += dump_output().encode() + "".join(KMSG).encode()
    raw += FakeContainerd().run(["nvidia-ctk", "--version"], 1).stderr.encode()
    missing = [form for form, value in planted.canaries().items() if value.encode() not in raw]
    assert missing == []


def test_no_planted_secret_reaches_any_file_of_the_bundle(bundle_dir, planted):
    assert leaks(bundle_dir, planted.canaries()) == {}


def test_command_output_is_recorded_and_redacted_structurally(bundle_dir):
    records = yaml.safe_load((bundle_dir / "commands.yaml").read_text())
    dump = next(r for r in records if r["argv"][:1] == ["containerd"] and r["argv"][-1] == "dump")
    data = tomllib.loads(dump["stdout"])
    registry = data["plugins"][CRI]["registry"]
    assert registry["configs"]["r1.example"]["auth"] == {
        "auth": "REDACTED", "identitytoken": "REDACTED", "password": "REDACTED",
        "username": "robot",
    }
    assert registry["headers"] == {"Authorization": ["REDACTED"]}
    # The rest of containerd's view is what the checks read: untouched.
    options = data["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]["options"]
    assert options == {"BinaryName": "/usr/bin/nvidia-container-runtime"}
    ctk = next(r for r in records if r["argv"] == ["nvidia-ctk", "--version"])
    assert "Authorization: Bearer REDACTED" in ctk["stderr"]


def test_every_redacted_file_parses_to_the_structure_the_original_had(bundle_dir):
    root = bundle_dir / "root"
    cfg = tomllib.loads((root / "etc/containerd/config.toml").read_text())
    cri = cfg["plugins"][CRI]
    assert cfg["version"] == 2
    assert cfg["imports"] == ["/etc/containerd/conf.d/*.toml", "/etc/gna-outside/extra.toml",
                              "/etc/containerd/linked.toml"]
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"},
    }
    configs = cri["registry"]["configs"]
    assert configs["r2.example"] == {"auth": {"password": "REDACTED"}}
    assert configs["r1.example"]["auth"] == {"username": "robot", "password": "REDACTED",
                                             "auth": "REDACTED", "identitytoken": "REDACTED"}
    assert configs["r4.example"]["auth"] == {"password": "REDACTED", "Password": "REDACTED"}
    assert cri["registry"]["headers"] == {"Authorization": ["REDACTED"]}
    assert cri["registry"]["mirrors"]["docker.io"] == {
        "endpoint": ["https://mirror-user:REDACTED@mirror.example"]}

    dropin = tomllib.loads((root / "etc/containerd/conf.d/50-registry.toml").read_text())
    assert dropin["plugins"][CRI]["registry"]["configs"] == {
        "r3.example": {"auth": {"username": "u3", "password": "REDACTED"}}}
    assert dropin["plugins"]["io.containerd.example.v1.ecr-credentials"] == {
        "aws_access_key_id": "REDACTED", "aws_secret_access_key": "REDACTED"}

    spec = yaml.safe_load((root / "var/run/cdi/nvidia.yaml").read_text())
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void", "FOO_TOKEN=REDACTED"]
    assert spec["annotations"]["session"] == "REDACTED"
    assert spec["annotations"]["tls.key"] == (
        "-----BEGIN RSA PRIVATE KEY-----\nREDACTED\n-----END RSA PRIVATE KEY-----\n")
    assert spec["devices"] == [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]

    vendor = json.loads((root / "etc/cdi/vendor.json").read_text())
    assert vendor["containerEdits"] == {"env": ["AWS_SESSION_TOKEN=REDACTED"]}
    assert vendor["annotations"]["tls"].startswith("-----BEGIN EC PRIVATE KEY-----\nREDACTED\n")
    assert vendor["annotations"]["blob"].startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----\n")

    keys = yaml.safe_load((root / "etc/cdi/keys.yaml").read_text())
    assert keys["annotations"] == {
        "data": "-----BEGIN PRIVATE KEY-----\nREDACTED\n-----END PRIVATE KEY-----\n",
        "other": "-----BEGIN OPENSSH PRIVATE KEY-----\nREDACTED\n-----END OPENSSH PRIVATE KEY-----\n",
    }
    checkpoint = json.loads((root / "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint").read_text())
    assert checkpoint == {"Data": {"PodDeviceEntries": None, "RegisteredDevices": {},
                                   "token": "REDACTED"}, "Checksum": 1}
    # Every TOML/YAML/JSON file in the bundle parses (the walk, for files not named above).
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_text()
        if path.suffix == ".toml":
            tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            list(yaml.safe_load_all(text))
        elif path.suffix == ".json" or text.lstrip()[:1] == "{":
            json.loads(text)


def test_links_are_resolved_inside_the_root_and_copied_only_into_declared_reads(bundle_dir):
    root = bundle_dir / "root"
    # Allowed: /etc/cdi/nvidia.yaml -> /var/run/cdi/nvidia.yaml, /var/run -> ../run (the
    # pattern /var/run/cdi/*.yaml resolves to /run/cdi); merged-/usr os-release.
    assert os.readlink(root / "etc/cdi/nvidia.yaml") == "/var/run/cdi/nvidia.yaml"
    assert (root / "var/run/cdi/nvidia.yaml").read_text().startswith("cdiVersion: 0.5.0")
    assert os.readlink(root / "etc/os-release") == "../usr/lib/os-release"
    assert "ID=ubuntu" in (root / "usr/lib/os-release").read_text()
    # Refused: links to /etc/shadow and, climbing, /etc/gshadow; imports outside
    # /etc/containerd. The link itself is recorded (a name, no content).
    assert os.readlink(root / "etc/cdi/shadow.yaml") == "/etc/shadow"
    assert os.readlink(root / "etc/cdi/climb.yaml") == "../../../../../../etc/gshadow"
    assert not (root / "etc/shadow").exists() and not (root / "etc/gshadow").exists()
    assert not (root / "etc/gna-outside").exists()
    assert os.readlink(root / "etc/containerd/linked.toml") == "/etc/gna-outside/linked.toml"
    # The drop-in inside /etc/containerd, found through the config's imports, is copied.
    assert (root / "etc/containerd/conf.d/50-registry.toml").is_file()
    skipped = yaml.safe_load((bundle_dir / "bundle.yaml").read_text())["collect_skipped"]
    assert sorted(skipped) == sorted([
        "/etc/cdi/shadow.yaml -> /etc/shadow: content not copied (not a declared read)",
        "/etc/cdi/climb.yaml -> /etc/gshadow: content not copied (not a declared read)",
        "/etc/gna-outside/extra.toml: content not copied (a containerd import is copied only "
        "as *.toml below /etc/containerd)",
        # Also matched by the declared read /etc/containerd/*.toml, whose rule applies first.
        "/etc/containerd/linked.toml -> /etc/gna-outside/linked.toml: content not copied (not "
        "a declared read)",
    ])


def test_bundle_files_are_0600_in_0700_directories(bundle_dir):
    assert stat.S_IMODE(bundle_dir.lstat().st_mode) == 0o700
    execs = {"root/usr/bin/nvidia-container-runtime", "root/usr/bin/nvidia-cdi-hook"}
    for path in bundle_dir.rglob("*"):
        st = path.lstat()
        rel = str(path.relative_to(bundle_dir))
        if stat.S_ISDIR(st.st_mode):
            assert stat.S_IMODE(st.st_mode) == 0o700, rel
        elif stat.S_ISREG(st.st_mode):
            assert stat.S_IMODE(st.st_mode) == (0o700 if rel in execs else 0o600), rel


def test_the_bundle_replays(bundle_dir):
    """The redacted bundle is still a bundle the checks read (containerd's view included)."""
    from agent.config import Config
    from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
    from checks.os_supported import OS_SUPPORTED
    from checks.policy import ResolvedPolicy, load_policy

    loaded = load_bundle(bundle_dir)
    try:
        policy = ResolvedPolicy(load_policy(1), "device-plugin", settings=Config().model_dump())
        assert OS_SUPPORTED.run(loaded.host, policy).status == "pass"
        out = CONTAINERD_NVIDIA_RUNTIME.run(loaded.host, policy)
        assert out.status == "pass", out.summary
    finally:
        loaded.close()


def test_cli_collect_host_root_to_a_tar_gz(host_root, planted, tmp_path, capsys):
    out = tmp_path / "out" / "b.tar.gz"
    assert main(["collect", "--host-root", str(host_root), "-o", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    # commands are not run under --host-root: only the file forms can be there.
    assert leaks(out, planted.canaries()) == {}
    with tarfile.open(out, "r:gz") as tar:
        for m in tar.getmembers():
            assert (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", ""), m.name
            if m.isdir():
                assert m.mode == 0o700, m.name
            elif m.isfile():
                assert m.mode in (0o600, 0o700), m.name
    names = {name for name, _ in bundle_bytes(out)}
    assert "root/etc/containerd/config.toml" in names and "commands.yaml" in names
    assert sorted(os.listdir(out.parent)) == ["b.tar.gz"]  # no temp file left behind


def test_the_archive_is_never_written_through_a_planted_partial_name(host_root, tmp_path):
    """The old code wrote `<out>.partial` then renamed: a link planted at that name sent the
    archive (and root's write) anywhere. Now the temp name is random and O_EXCL."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    out_dir = tmp_path / "o"
    out_dir.mkdir()
    os.symlink(victim, out_dir / "b.tar.gz.partial")
    assert main(["collect", "--host-root", str(host_root), "-o", str(out_dir / "b.tar.gz")]) == 0
    assert victim.read_text() == "keep me\n"
    assert os.readlink(out_dir / "b.tar.gz.partial") == str(victim)
    assert tarfile.is_tarfile(out_dir / "b.tar.gz")


def test_the_temp_archive_is_created_o_excl_mode_0600(host_root, tmp_path, monkeypatch):
    """Observe the temp file while tarfile writes it: random name in the target directory,
    0600 from the start (mkstemp: O_CREAT|O_EXCL, mode 0600)."""
    import agent.host.collect_write as collect_mod

    seen = {}
    real_open = collect_mod.tarfile.open

    def spy(*args, **kwargs):
        raw = kwargs["fileobj"]
        st = os.fstat(raw.fileno())
        seen["mode"] = stat.S_IMODE(st.st_mode)
        seen["names"] = sorted(os.listdir(tmp_path / "o"))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(collect_mod.tarfile, "open", spy)
    (tmp_path / "o").mkdir()
    collect(Host(host_root), ALL_CHECKS, str(tmp_path / "o" / "b.tar.gz"))
    assert seen["mode"] == 0o600
    partial = [n for n in seen["names"] if n.endswith(".partial")]
    assert len(partial) == 1 and partial[0].startswith(".gna-bundle-")
    assert partial[0] != "b.tar.gz.partial"


def test_collect_into_a_non_empty_directory_is_exit_2_with_one_line(host_root, tmp_path, capsys):
    target = tmp_path / "full"
    target.mkdir()
    (target / "mine.txt").write_text("x")
    rc = main(["collect", "--host-root", str(host_root), "-o", str(target)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and str(target) in err and "not empty" in err
    assert sorted(os.listdir(target)) == ["mine.txt"]
    assert sorted(os.listdir(tmp_path)) == ["full"]  # no staging directory left


def test_collect_onto_an_existing_archive_or_a_link_is_refused(host_root, tmp_path):
    existing = tmp_path / "b.tar.gz"
    existing.write_text("old")
    with pytest.raises(OutputError):
        collect(Host(host_root), ALL_CHECKS, str(existing))
    assert existing.read_text() == "old"
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    with pytest.raises(OutputError, match="not empty"):
        collect(Host(host_root), ALL_CHECKS, str(full))
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(OutputError):
        collect(Host(host_root), ALL_CHECKS, str(tmp_path / "link"))
    assert not (tmp_path / "elsewhere").exists()


def test_an_output_directory_that_cannot_be_written_is_an_output_error(host_root, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="cannot write the bundle there"):
        collect(Host(host_root), ALL_CHECKS, str(blocker / "sub" / "b.tar.gz"))


def test_collect_into_an_empty_directory_replaces_it_0700(host_root, tmp_path):
    target = tmp_path / "empty"
    target.mkdir(mode=0o755)
    out = collect(Host(host_root), ALL_CHECKS, str(target))
    assert out == target and (target / "bundle.yaml").is_file()
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_a_link_recorded_in_the_bundle_is_never_written_through(tmp_path):
    """A presence path that is a link to an absolute directory on the collecting machine, then
    a path below it: the placeholder must not be created through the recorded link."""
    victim = tmp_path / "victim"
    victim.mkdir()
    root = tmp_path / "host"
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [],
            "containerEdits": {"mounts": [{"hostPath": "/opt/nv", "containerPath": "/x"},
                                          {"hostPath": "/opt/nv/lib/libx.so", "containerPath": "/y"}]}}
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.json").write_text(json.dumps(spec))
    (root / "opt").mkdir()
    os.symlink(str(victim), root / "opt/nv")  # as written: an absolute path on this machine
    (root / str(victim).lstrip("/") / "lib").mkdir(parents=True)
    (root / str(victim).lstrip("/") / "lib/libx.so").write_text("")
    out = collect(Host(root), ALL_CHECKS, str(tmp_path / "b"))
    assert os.readlink(out / "root/opt/nv") == str(victim)
    assert os.listdir(victim) == []


def test_a_device_or_fifo_in_a_declared_path_is_never_read(tmp_path):
    root = tmp_path / "host"
    (root / "etc/cdi").mkdir(parents=True)
    os.mkfifo(root / "etc/cdi/fifo.yaml")  # would block a plain open forever
    os.symlink("/dev/zero", root / "etc/cdi/zero.yaml")  # resolves to <root>/dev/zero: absent
    out = collect(Host(root), ALL_CHECKS, str(tmp_path / "b"))
    assert not (out / "root/etc/cdi/fifo.yaml").exists()
    assert not (out / "root/etc/cdi/zero.yaml").exists()


def _can_unshare() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        res = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                             capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m (a private mount namespace)")
def test_collect_on_the_live_machine_leaks_nothing(tmp_path):
    """The live code path (root "/", real commands from PATH): in a private mount namespace
    /etc is an overlay and /run a tmpfs, so the planted files exist only there; a fake
    `containerd` on PATH prints a config dump with registry auth."""
    out = tmp_path / "live.tar.gz"
    res = run_live(tmp_path / "work", out)
    assert res.returncode == 0, res.stderr
    canaries = json.loads((tmp_path / "work" / "canaries.json").read_text())
    assert len(canaries) >= len(plan(live=True).canaries())
    assert leaks(out, canaries) == {}
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    files = dict(bundle_bytes(out))
    # The planted files were there to be collected (and were, redacted).
    for name in ("root/etc/containerd/conf.d/50-registry.toml", "root/etc/cdi/vendor.json",
                 "root/etc/cdi/keys.yaml", "root/var/run/cdi/nvidia.yaml"):
        assert b"REDACTED" in files[name], name
    assert b"password = \"REDACTED\"" in files["root/etc/containerd/config.toml"]
    records = yaml.safe_load(files["commands.yaml"])
    dump = next(r for r in records if r["argv"][-1] == "dump" and r["argv"][0] == "containerd")
    assert dump["rc"] == 0 and "REDACTED" in dump["stdout"]
    assert files["root/etc/cdi/shadow.yaml"] == b"/etc/shadow"  # the link, no content
    assert "root/etc/shadow" not in files


def test_the_resolver_never_leaves_the_root(tmp_path):
    """Absolute and climbing link targets resolve inside the root (chroot semantics), so a
    file that exists only outside it is never opened, whatever the allow-list says."""
    from agent.host.resolve import Resolver

    outside = tmp_path / "outside.yaml"
    outside.write_text("outside\n")
    root = tmp_path / "root"
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/real.yaml").write_text("inside\n")
    os.symlink(str(outside), root / "etc/cdi/abs.yaml")
    os.symlink("../../" * 12 + str(outside).lstrip("/"), root / "etc/cdi/climb.yaml")
    os.symlink("/etc/cdi/real.yaml", root / "etc/cdi/ok.yaml")
    os.symlink("loop.yaml", root / "etc/cdi/loop.yaml")
    resolver = Resolver(root)
    try:
        for name in ("abs.yaml", "climb.yaml", "loop.yaml"):
            with pytest.raises(OSError):
                resolver.open(f"/etc/cdi/{name}")
        fd, canonical = resolver.open("/etc/cdi/ok.yaml")
        try:
            assert canonical == "/etc/cdi/real.yaml"
            from agent.host.resolve import read_fd

            assert read_fd(fd, "/etc/cdi/ok.yaml") == b"inside\n"
        finally:
            os.close(fd)
    finally:
        resolver.close()
