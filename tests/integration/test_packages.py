"""packaging/: the .deb and .rpm that install offline on the distribution's own Python.

One build (packaging/build.sh, the command CI and the README document) into a temporary
directory, with pip's cache there too; then:
- the wheelhouse resolves offline for CPython 3.9-3.13 x x86_64/aarch64 (pip --dry-run
  --no-index), and really installs with --no-index on every CPython 3.9-3.13 found here;
- the .deb goes through dpkg for real on this machine (root, no systemd as PID 1): install,
  run the installed command, upgrade with a modified conffile, remove, purge; always purged
  in a finally, and it refuses to start if anything of the package is already on the machine;
- lintian --fail-on error,warning; shellcheck on every script;
- the .rpm's metadata, file list and scriptlets through `rpm -qp`, its boolean dependency
  through rpm's own resolver (`rpm --root --test` against stub interpreter packages).
"""
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename

from tests.components import SPECS, component, locate, missing
from tests.conftest import BUNDLES, REPO, run_cli

pytestmark = pytest.mark.integration

PYTHONS = ["3.9", "3.10", "3.11", "3.12", "3.13"]
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
PACKAGE = "gpu-node-agent"
# What the package puts outside dpkg's own database, and so what "clean" means.
FOOTPRINT = [Path("/opt/gpu-node-agent"), Path("/etc/gpu-node-agent"),
             Path("/var/lib/gpu-node-agent"), Path("/usr/bin/gpu-node-agent"),
             Path("/usr/lib/gpu-node-agent"), Path("/lib/systemd/system/gpu-node-agent.service")]
WANTS_LINK = Path("/etc/systemd/system/multi-user.target.wants/gpu-node-agent.service")


def _need(*tools: str) -> None:
    absent = [t for t in tools if (locate(t) if t in SPECS else shutil.which(t)) is None]
    if absent:
        missing("packaging", f"{', '.join(absent)} not installed (.ci/setup.d/60-packaging.sh provides them)")


def _run(argv: List[str], timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}")
    return proc


def _pyproject_version() -> str:
    text = (REPO / "pyproject.toml").read_text()
    project = text[text.index("[project]"):]
    match = re.search(r'^version\s*=\s*"([^"]+)"', project, re.M)
    assert match, "pyproject.toml has no [project] version"
    return match.group(1)


class Build:
    def __init__(self, out: Path, log: str, seconds: float):
        self.out, self.log, self.seconds = out, log, seconds
        self.wheel = next(out.glob("gpu_node_agent-*.whl"))

    def deb(self, arch: str) -> Path:
        return next(self.out.glob(f"gpu-node-agent_*-1_{ARCHES[arch]}.deb"))

    def rpm(self, arch: str) -> Path:
        return next(self.out.glob(f"gpu-node-agent-*-1.{arch}.rpm"))

    def wheelhouse(self, arch: str) -> Path:
        return self.out / "wheelhouse" / arch


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Build:
    """packaging/build.sh from this checkout, as CI and the README run it. While working on
    the tests, GNA_PACKAGES_DIR=<a build.sh --out directory> reuses an earlier build."""
    _need("git")
    reuse = os.environ.get("GNA_PACKAGES_DIR")
    if reuse:
        return Build(Path(reuse), "", 0.0)
    out = tmp_path_factory.mktemp("packages")
    env = dict(os.environ, PIP_CACHE_DIR=str(out / ".pip-cache"))
    started = time.monotonic()
    proc = _run(["bash", str(REPO / "packaging" / "build.sh"), "--out", str(out),
                 "--require-unit"], timeout=600, env=env)
    seconds = time.monotonic() - started
    print(f"\nbuild.sh: {seconds:.0f} s (cold pip cache)")
    for pkg in sorted(out.glob("*.deb")) + sorted(out.glob("*.rpm")):
        print(f"  {pkg.name}: {pkg.stat().st_size / 2**20:.1f} MiB")
    return Build(out, proc.stdout, seconds)


def _deb_field(deb: Path, field: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), field]).stdout.strip()


def _rpm_query(rpm: Path, fmt: str) -> str:
    return _run(["rpm", "-qp", "--qf", fmt, str(rpm)]).stdout


# --- versions and the wheelhouse ---------------------------------------------------------


def test_version_has_one_source(build):
    """pyproject.toml -> wheel metadata -> both packages (no pre-release here: equal as is)."""
    version = _pyproject_version()
    assert parse_wheel_filename(build.wheel.name)[1].public == version
    for arch in ARCHES:
        assert _deb_field(build.deb(arch), "Version") == f"{version}-1"
        assert _rpm_query(build.rpm(arch), "%{VERSION}-%{RELEASE} %{ARCH}") == f"{version}-1 {arch}"


def test_package_version_mapping_sorts_like_pep440():
    """pkgtool's PEP 440 -> dpkg/rpm mapping keeps PEP 440's order (checked with dpkg itself)."""
    _need("dpkg")
    sys.path.insert(0, str(REPO / "packaging"))
    try:
        import pkgtool
    finally:
        sys.path.pop(0)
    ordered = ["1.2.0.dev1", "1.2.0a1", "1.2.0b2", "1.2.0rc1.dev3", "1.2.0rc1", "1.2.0",
               "1.2.0.post1", "1.2.1"]
    mapped = [pkgtool.package_version(v) for v in ordered]
    for low, high in zip(mapped, mapped[1:]):
        assert _run(["dpkg", "--compare-versions", low, "lt", high], check=False).returncode == 0, \
            (low, high)
        if shutil.which("rpm"):  # rpm's own comparison (rpm.vercmp, rpm >= 4.14's Lua)
            lua = f"%{{lua: print(rpm.vercmp('{low}', '{high}'))}}"
            assert _run(["rpm", "--eval", lua]).stdout.strip() == "-1", (low, high)


def _interpreter(minor: str) -> Optional[str]:
    """A real CPython of that minor version on this machine (pyenv, PATH or /usr/bin)."""
    root = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"
    found = sorted(root.glob(f"{minor}.*/bin/python"), key=lambda p: [
        int(x) if x.isdigit() else 0 for x in p.parent.parent.name.split(".")])
    if found:
        return str(found[-1])
    return shutil.which(f"python{minor}")


def _target_env(minor: str, arch: str) -> Dict[str, str]:
    return {"python_version": minor, "python_full_version": f"{minor}.0",
            "platform_machine": arch, "sys_platform": "linux", "platform_system": "Linux",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "os_name": "posix", "extra": ""}


def _manylinux_ok(platform: str, arch: str) -> bool:
    if platform == "any":
        return True
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
    if m:
        return m.group(3) == arch and (int(m.group(1)), int(m.group(2))) <= (2, 28)
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    name, _, plat_arch = platform.partition("_")
    return name in legacy and plat_arch == arch


def test_wheelhouse_is_binary_only_and_per_arch(build):
    for arch in ARCHES:
        files = sorted(build.wheelhouse(arch).iterdir())
        assert files and all(f.suffix == ".whl" for f in files), "sdists or strays in the wheelhouse"
        for wheel in files:
            _, _, _, tags = parse_wheel_filename(wheel.name)
            # Compatible with some CPython 3.9-3.13 on a glibc 2.28 host of this arch.
            assert any(_manylinux_ok(t.platform, arch) and t.interpreter in (
                ["py3", "cp36", "cp37", "cp38"] + [f"cp3{p.split('.')[1]}" for p in PYTHONS])
                for t in tags), wheel.name


@pytest.mark.parametrize("arch", list(ARCHES))
@pytest.mark.parametrize("minor", PYTHONS)
def test_wheelhouse_resolves_offline(build, minor, arch, tmp_path):
    """pip install --dry-run --no-index for each target; run by that CPython where this machine
    has it, because pip evaluates markers for the interpreter running it (pypa/pip#11198)."""
    python: str = _interpreter(minor) or sys.executable
    report = tmp_path / "report.json"
    argv = [python, "-m", "pip", "install", "--dry-run", "--no-index", "--only-binary=:all:",
            "--implementation", "cp", "--python-version", minor, "--target", str(tmp_path / "t"),
            "--find-links", str(build.wheelhouse(arch)), "--report", str(report),
            "--disable-pip-version-check", "gpu-node-agent"]
    tags = ["manylinux_2_28", "manylinux_2_17", "manylinux2014"]
    tags += ["manylinux_2_12", "manylinux2010", "manylinux_2_5", "manylinux1"] if arch == "x86_64" else []
    for tag in tags:
        argv += ["--platform", f"{tag}_{arch}"]
    _run(argv, timeout=180, env=dict(os.environ, PIP_CONFIG_FILE=os.devnull))
    installed = {i["metadata"]["name"].lower().replace("_", "-")
                 for i in json.loads(report.read_text())["install"]}
    # Every direct dependency whose marker holds on the target is in the resolution.
    env = _target_env(minor, arch)
    with zipfile.ZipFile(build.wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or Marker(str(req.marker)).evaluate(env):
            assert req.name.lower().replace("_", "-") in installed, (req, minor, arch)
    assert "gpu-node-agent" in installed


@pytest.mark.parametrize("minor", ["3.9", "3.13"])
def test_wheelhouse_installs_with_no_index(build, minor, tmp_path):
    """What install-venv does, on the lowest and highest CPython: a venv without pip, the
    wheelhouse's own pip wheel installing with --no-index; the installed command runs."""
    python = _interpreter(minor)
    if python is None:
        pytest.skip(f"no CPython {minor} on this machine")
    assert python is not None
    wheelhouse = build.wheelhouse("x86_64")
    venv = tmp_path / "venv"
    _run([python, "-m", "venv", "--without-pip", str(venv)])
    pip_wheel = next(wheelhouse.glob("pip-*.whl"))
    _run([str(venv / "bin" / "python"), f"{pip_wheel}/pip", "install", "-q", "--no-index",
          "--only-binary=:all:", "--find-links", str(wheelhouse), "--no-cache-dir",
          "--disable-pip-version-check", str(next(wheelhouse.glob("gpu_node_agent-*.whl")))],
         timeout=300, env=dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=""))
    out = _run([str(venv / "bin" / "gpu-node-agent"), "version"]).stdout
    assert out.strip() == f"gpu-node-agent {_pyproject_version()}"


# --- lint ---------------------------------------------------------------------------------


def test_lintian(build):
    _need("lintian")
    for arch in ARCHES:
        proc = _run(["lintian", "--fail-on", "error,warning", "--no-tag-display-limit",
                     str(build.deb(arch))], timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout
    # Every override says why (the line before it is a comment).
    lines = (REPO / "packaging" / "files" / "lintian-overrides").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith("#"):
            assert i > 0 and lines[i - 1].startswith("#"), f"override without a reason: {line}"


def test_shellcheck():
    _need("shellcheck")
    pkg = REPO / "packaging"
    sh = [pkg / "files" / "install-venv", pkg / "files" / "gpu-node-agent"]
    sh += sorted((pkg / "scripts" / "deb").iterdir()) + sorted((pkg / "scripts" / "rpm").iterdir())
    _run([component("shellcheck"), "-s", "sh"] + [str(p) for p in sh])
    _run([component("shellcheck"), str(pkg / "build.sh")])


# --- the .rpm -----------------------------------------------------------------------------


def _deb_payload(deb: Path, dest: Path) -> Dict[str, str]:
    _run(["dpkg-deb", "-x", str(deb), str(dest)])
    return {"/" + str(p.relative_to(dest)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in dest.rglob("*") if p.is_file()}


@pytest.mark.parametrize("arch", list(ARCHES))
def test_rpm_metadata_and_files(build, arch, tmp_path):
    _need("rpm", "dpkg-deb")
    rpm = build.rpm(arch)
    assert _rpm_query(rpm, "%{NAME}|%{LICENSE}|%{ARCH}") == f"{PACKAGE}|Apache-2.0|{arch}"
    requires = _run(["rpm", "-qp", "--requires", str(rpm)]).stdout.splitlines()
    assert "(python3 >= 3.9 or python39 or python3.11 or python3.12)" in requires
    assert any(r.startswith("rpmlib(RichDependencies)") for r in requires)
    flags: Dict[str, str] = {}
    for line in _rpm_query(rpm, "[%{FILEFLAGS:fflags} %{FILENAMES}\n]").splitlines():
        flag, _, path = line.partition(" ")
        flags[path] = flag
    assert flags["/etc/gpu-node-agent/config.yaml"] == "cn"  # %config(noreplace)
    assert "/var/lib/gpu-node-agent" in flags and "/usr/lib/gpu-node-agent" in flags
    # Same files, same bytes as the .deb (one list in nfpm.yaml), but the unit's directory
    # and what only Debian has.
    dump = {}
    for line in _run(["rpm", "-qp", "--dump", str(rpm)]).stdout.splitlines():
        path, _size, _mtime, digest, mode = line.split(" ")[:5]
        if int(mode, 8) & 0o170000 == 0o100000:
            dump[path] = digest
    deb = _deb_payload(build.deb(arch), tmp_path / "deb")
    deb_only = {"/usr/share/doc/gpu-node-agent/changelog.Debian.gz",
                "/usr/share/lintian/overrides/gpu-node-agent"}
    rename = {"/lib/systemd/system/gpu-node-agent.service":
              "/usr/lib/systemd/system/gpu-node-agent.service"}
    expected = {rename.get(p, p): d for p, d in deb.items() if p not in deb_only}
    assert dump == expected
    # The rules and dashboards prometheus/README.md says the package carries, byte for byte.
    shipped = {"alerts.yml", "recording.yml", "dashboards/gpu-node-agent-fleet.json",
               "dashboards/gpu-node-agent-node.json"}
    for name in shipped:
        digest = hashlib.sha256((REPO / "prometheus" / name).read_bytes()).hexdigest()
        assert dump[f"/usr/share/gpu-node-agent/prometheus/{name}"] == digest, name
    wheels = [p for p in dump if p.startswith("/usr/lib/gpu-node-agent/wheelhouse/")]
    assert any(f"_{arch}." in p for p in wheels) and not any(
        f"_{other}." in p for p in wheels for other in ARCHES if other != arch)


def _scriptlets(rpm: Path) -> Dict[str, str]:
    text = _run(["rpm", "-qp", "--scripts", str(rpm)]).stdout
    parts = re.split(r"^(\w+) scriptlet \(using /bin/sh\):\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_rpm_scriptlets(build, tmp_path):
    _need("rpm")
    scripts = _scriptlets(build.rpm("x86_64"))
    assert set(scripts) == {"postinstall", "preuninstall", "postuninstall"}
    for body in scripts.values():
        _run(["sh", "-n", "-c", body])
    assert "/usr/lib/gpu-node-agent/install-venv" in scripts["postinstall"]
    # Run the erase-side scriptlet against a stub systemctl that records its calls.
    stub = tmp_path / "bin"
    stub.mkdir()
    log = tmp_path / "calls"
    (stub / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (stub / "systemctl").chmod(0o755)
    env = dict(os.environ, PATH=f"{stub}:/usr/bin:/bin")
    _run(["sh", "-c", scripts["preuninstall"], "preun", "1"], env=env)
    assert not log.exists(), "an upgrade must not disable the service"
    _run(["sh", "-c", scripts["preuninstall"], "preun", "0"], env=env)
    # Stopped only where systemd runs (not on this test machine, nor in a container).
    running = Path("/run/systemd/system").is_dir()
    assert log.read_text().splitlines() == ["--no-reload disable gpu-node-agent.service"] + (
        ["stop gpu-node-agent.service"] if running else [])
    # %postun on upgrade ($1 = 1) keeps /opt; only erase ($1 = 0) removes it: the branch is
    # asserted on the text, since running it would delete this machine's /opt/gpu-node-agent.
    erase = scripts["postuninstall"].split("else", 1)
    assert "rm -rf /opt/gpu-node-agent" in erase[1] and "rm -rf" not in erase[0]


def test_rpm_boolean_dependency_resolves_on_each_target(build, tmp_path):
    """rpm's own resolver: RHEL 8's python36 alone does not satisfy the package; python39
    does (RHEL 8), and so does a python3 3.9 (RHEL 9, AL2023). Stub packages built by nfpm."""
    _need("rpm")
    nfpm = build.out / ".tools" / "bin" / "nfpm"
    stubs = {}
    for name, version, provides in [("python36", "3.6.8", "python3 = 3.6.8"),
                                    ("python39", "3.9.20", ""), ("python3", "3.9.21", "")]:
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(f"name: {name}\narch: amd64\nversion: {version}\n"
                        "maintainer: stub <stub@example.com>\n"
                        + (f"provides:\n  - {provides}\n" if provides else ""))
        _run([str(nfpm), "package", "-f", str(spec), "-p", "rpm", "-t", str(tmp_path)],
             cwd=str(tmp_path))
        stubs[name] = str(next(tmp_path.glob(f"{name}-{version}-*.rpm")))
    root = tmp_path / "root"
    root.mkdir()
    _run(["rpm", "--root", str(root), "--initdb"])
    agent = str(build.rpm("x86_64"))

    def test_install(*extra: str) -> subprocess.CompletedProcess:
        return _run(["rpm", "--root", str(root), "-i", "--test", *extra, agent], check=False)

    for failing in [(), (stubs["python36"],)]:
        proc = test_install(*failing)
        assert proc.returncode != 0 and "python39" in proc.stdout, proc.stdout
    for passing in [(stubs["python36"], stubs["python39"]), (stubs["python3"],)]:
        proc = test_install(*passing)
        assert proc.returncode == 0, proc.stdout


# --- the .deb through dpkg ----------------------------------------------------------------


def _trigger_python3() -> None:
    _run(["dpkg-trigger", "--no-await", "/usr/bin/python3"])
    assert "/usr/bin/python3" in _run(
        ["dpkg-query", "-W", "-f", "${Triggers-Pending}", PACKAGE]).stdout
    _run(["dpkg", "--triggers-only", PACKAGE], timeout=120)
    assert _dpkg_status() == "ii"


def _dsh_state() -> List[str]:
    """deb-systemd-helper's records of the unit (enablement and mask state)."""
    base = Path("/var/lib/systemd")
    return [str(p) for d in ("deb-systemd-helper-enabled", "deb-systemd-helper-masked")
            for p in (base / d).rglob("gpu-node-agent.service*")]


def _dpkg_status() -> str:
    proc = _run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", PACKAGE], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _installed(*argv: str) -> subprocess.CompletedProcess:
    # The installed command by absolute path: never the developer's editable install on PATH.
    return _run(["/usr/bin/gpu-node-agent", *argv], check=False, cwd="/",
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"})


def _checks(report: dict) -> list:
    return [(c["id"], c["status"], c["summary"], c["details"]) for c in report["checks"]]


def _host_tree(tmp_path: Path) -> Path:
    tree = BUNDLES / "gpu-h100-snapshot-only" / "root"
    if tree.is_dir():
        return tree
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
    return tree


def test_deb_install_upgrade_remove_purge(build, tmp_path):
    _need("dpkg", "dpkg-query", "dpkg-deb")
    if os.geteuid() != 0:
        pytest.skip("dpkg -i needs root")
    present = [str(p) for p in FOOTPRINT if os.path.lexists(p)] + _dsh_state()
    assert not _dpkg_status() and not present, (
        f"{PACKAGE} is already on this machine ({_dpkg_status()} {present}); this test installs "
        "and purges it, so it will not touch an installation it did not make: dpkg --purge it first")
    version = _pyproject_version()
    try:
        started = time.monotonic()
        _run(["dpkg", "-i", str(build.deb("x86_64"))], timeout=300)
        print(f"\ndpkg -i: {time.monotonic() - started:.1f} s")
        assert _dpkg_status() == "ii"

        # The installed command: the package's venv, built with the system interpreter.
        assert _installed("version").stdout.strip() == f"gpu-node-agent {version}"
        venv = Path("/opt/gpu-node-agent/venv")
        cfg = (venv / "pyvenv.cfg").read_text()
        assert re.search(r"^home = /usr/bin$", cfg, re.M), cfg
        origin = _run([str(venv / "bin" / "python"), "-I", "-c", "import agent; print(agent.__file__)"],
                      cwd="/")
        assert origin.stdout.startswith(str(venv) + "/"), origin.stdout
        # A running agent stays on the venv it started from after an upgrade switches `venv`:
        # its entry point's interpreter is the versioned directory, not the symlink.
        shebang = (venv / "bin" / "gpu-node-agent").read_text().splitlines()[0]
        assert shebang == f"#!{venv.resolve()}/bin/python", shebang
        assert not (venv / "bin" / "pip").exists(), "the venv needs no pip"

        # check --host-root from the package == the checkout's, on the same tree and config.
        tree = _host_tree(tmp_path)
        config = tmp_path / "config.yaml"
        shutil.copy(REPO / "packaging" / "files" / "config.yaml", config)
        args = ["check", "--host-root", str(tree), "--config", str(config), "--format", "json"]
        proc = _installed(*args)
        assert proc.returncode in (0, 1), proc.stdout
        mine = run_cli(args)
        assert mine.rc == proc.returncode
        report = json.loads(proc.stdout)
        assert report["agent_version"] == version
        assert _checks(report) == _checks(mine.json()) and report["gate"] == mine.json()["gate"]

        # The default config is valid for the installed agent; it is a conffile.
        assert _installed("config", "validate", "/etc/gpu-node-agent/config.yaml").returncode == 0
        conffiles = _run(["dpkg-query", "-W", "-f", "${Conffiles}", PACKAGE]).stdout
        assert "/etc/gpu-node-agent/config.yaml" in conffiles
        assert Path("/var/lib/gpu-node-agent").is_dir()
        assert Path("/lib/systemd/system/gpu-node-agent.service").is_file()
        assert not WANTS_LINK.exists(), "a first install must not enable the service"
        if shutil.which("systemd-analyze"):  # the unit, with the package's real ExecStart
            _run(["systemd-analyze", "verify", "--man=no",
                  "/lib/systemd/system/gpu-node-agent.service"])

        # The dpkg file trigger on /usr/bin/python3 (what the python3 package's upgrade
        # activates), processed by dpkg: a no-op while the venv's Python is the interpreter's
        # minor version, a new venv when it is not (a release upgrade's new python3).
        before = os.readlink(venv)
        _trigger_python3()
        assert os.readlink(venv) == before, "rebuilt for an unchanged interpreter"
        cfg_path = venv / "pyvenv.cfg"
        cfg_path.write_text(re.sub(r"^version = .*$", "version = 3.8.18", cfg_path.read_text(),
                                   flags=re.M))
        _trigger_python3()
        first = os.readlink(venv)
        assert first != before and _installed("version").returncode == 0

        # The operator configures, enables, and the agent records state; then the package
        # is upgraded over itself (dpkg's upgrade path: old prerm upgrade, new postinst
        # configure <old version>).
        conf = Path("/etc/gpu-node-agent/config.yaml")
        edited = conf.read_text().replace("allocation_path: dra", "allocation_path: device-plugin")
        assert edited != conf.read_text()
        conf.write_text(edited + "expected_gpus: 8\n")
        state = Path("/var/lib/gpu-node-agent/sticky-test.json")
        state.write_text("{}")
        if shutil.which("systemctl"):  # offline enable: only symlinks, no running systemd
            _run(["systemctl", "enable", "gpu-node-agent.service"])
            assert WANTS_LINK.is_symlink()
        started = time.monotonic()
        upgrade = _run(["dpkg", "-i", str(build.deb("x86_64"))], timeout=300).stdout
        print(f"dpkg -i (upgrade): {time.monotonic() - started:.1f} s")
        assert "Preparing to unpack" in upgrade and f"over ({version}-1)" in upgrade, upgrade
        assert _dpkg_status() == "ii"
        assert conf.read_text() == edited + "expected_gpus: 8\n", "the conffile was replaced"
        shown = _installed("config", "show").stdout
        assert "allocation_path: device-plugin" in shown and "expected_gpus: 8" in shown
        assert state.exists()
        second = os.readlink(venv)
        assert second != first and (venv.parent / first).is_dir(), "previous venv kept"
        assert _installed("version").returncode == 0
        if shutil.which("systemctl"):
            assert WANTS_LINK.is_symlink(), "an upgrade must keep the operator's enablement"

        # Remove: program gone, service disabled, config and state kept.
        _run(["dpkg", "-r", PACKAGE], timeout=120)
        assert _dpkg_status() == "rc"
        assert not Path("/opt/gpu-node-agent").exists() and not Path("/usr/bin/gpu-node-agent").exists()
        assert not os.path.lexists(WANTS_LINK), "removal must disable the service"
        assert conf.read_text() == edited + "expected_gpus: 8\n" and state.exists()

        # Purge: nothing left.
        _run(["dpkg", "--purge", PACKAGE], timeout=120)
        assert not _dpkg_status()
        left = [str(p) for p in FOOTPRINT + [WANTS_LINK] if os.path.lexists(p)] + _dsh_state()
        assert not left, f"left behind after purge: {left}"
    finally:
        if _dpkg_status():
            _run(["dpkg", "--purge", PACKAGE], timeout=120, check=False)
        for path in FOOTPRINT[:3]:  # what a failed postinst may leave outside dpkg's list
            if path.exists() and not _dpkg_status():
                shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(WANTS_LINK) and not _dpkg_status():
            WANTS_LINK.unlink()


def test_deb_control(build):
    _need("dpkg-deb")
    deb = build.deb("x86_64")
    assert _deb_field(deb, "Depends") == "python3 (>= 3.9)"
    assert _deb_field(deb, "Architecture") == "amd64"
    assert _deb_field(build.deb("aarch64"), "Architecture") == "arm64"
    with tarfile.open(fileobj=_dpkg_deb_tar("--ctrl-tarfile", deb)) as tar:
        names = {m.name.lstrip("./") for m in tar.getmembers()}
        triggers = tar.extractfile("./triggers").read().decode()  # type: ignore[union-attr]
    assert {"postinst", "prerm", "postrm", "conffiles", "triggers"} <= names
    assert "interest-noawait /usr/bin/python3" in triggers
    with tarfile.open(fileobj=_dpkg_deb_tar("--fsys-tarfile", deb)) as tar:
        member = tar.extractfile("./usr/share/doc/gpu-node-agent/changelog.Debian.gz")
        first = gzip.decompress(member.read()).decode().splitlines()[0]  # type: ignore[union-attr]
    assert first.startswith(f"gpu-node-agent ({_pyproject_version()}-1)")


def _dpkg_deb_tar(what: str, deb: Path) -> io.BytesIO:
    return io.BytesIO(subprocess.run(["dpkg-deb", what, str(deb)], check=True,
                                     stdout=subprocess.PIPE, timeout=60).stdout)
