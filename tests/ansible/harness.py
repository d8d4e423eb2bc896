"""Runs the Ansible role under test: ansible-playbook from its own venv, results as JSON.

ansible-core, ansible-lint and pytest-testinfra come from .ci/setup.d/70-ansible.sh, which
installs them into their own venv (GNA_ANSIBLE_VENV, default .cache/ci/ansible) so the
project's test venvs keep their own pins. The role's record of each run comes from the
`gna_record` callback (tests/ansible/callback_plugins), not from parsing the console.
"""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

from tests.components import ansible_venv

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ROLE_DIR = REPO / "ansible" / "roles"
VENV = ansible_venv()  # GNA_ANSIBLE_VENV, default .cache/ci/ansible (tests/components.py)
PLAYBOOK_TIMEOUT_S = 240


def tool(name: str) -> Path:
    return VENV / "bin" / name


def available() -> Optional[str]:
    """None when the role can be run here, else why not (printed as the skip reason)."""
    for name in ("ansible-playbook", "ansible-lint"):
        if not tool(name).exists():
            return f"{tool(name)} missing: run .ci/setup.d/70-ansible.sh"
    if os.geteuid() != 0:
        return "the role writes root-owned files: run the tests as root (CI does)"
    return None


class Run(NamedTuple):
    rc: int
    output: str
    record: Dict[str, Any]

    @property
    def stats(self) -> Dict[str, int]:
        return self.record["stats"]["localhost"]

    def tasks(self, name_part: str) -> List[Dict[str, Any]]:
        return [t for t in self.record["tasks"] if name_part in t["task"]]

    def task(self, name_part: str) -> Dict[str, Any]:
        """The one task named like NAME_PART that ran; the gate's tasks are imported once per
        gate (provisioning, pre- and post-nodeadm-init), and those not in play are skipped."""
        found = self.tasks(name_part)
        if len(found) > 1:
            found = [t for t in found if t["status"] != "skipped"] or found[:1]
        assert len(found) == 1, f"expected one task named like {name_part!r}, got {found}"
        return found[0]


def playbook(tmp: Path, extra_vars: Dict[str, Any], *args: str) -> Run:
    """ansible-playbook tests/ansible/converge.yml with EXTRA_VARS (a JSON file) and ARGS."""
    tmp.mkdir(parents=True, exist_ok=True)
    n = len(list(tmp.glob("run-*.json")))
    record = tmp / f"record-{n}.json"
    vars_file = tmp / f"run-{n}.json"
    vars_file.write_text(json.dumps(extra_vars))
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(HERE / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROLE_DIR),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(tmp / "ansible-remote"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CALLBACK_PLUGINS": str(HERE / "callback_plugins"),
        "GNA_RECORD_FILE": str(record),
    })
    argv = [str(tool("ansible-playbook")), "-i", str(HERE / "inventory.ini"), str(HERE / "converge.yml"),
            "-e", f"ansible_python_interpreter={tool('python')}", "-e", f"@{vars_file}", *args]
    proc = subprocess.run(argv, cwd=str(HERE), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=PLAYBOOK_TIMEOUT_S)
    data = json.loads(record.read_text()) if record.exists() else {"tasks": [], "stats": {}}
    return Run(proc.returncode, proc.stdout, data)


def build_wheelhouse(dest: Path) -> Path:
    """The checkout's wheel plus its dependencies (PyPI or pip's cache), packed as the role takes
    it. Built with this interpreter, which is also the one the role makes the agent's venv from,
    so binary wheels match."""
    wheels = dest / "wheels"
    # Built from a copy of what the sdist holds, so the checkout gets no build/ or egg-info.
    src = dest / "src"
    src.mkdir(parents=True)
    for path in [REPO / "pyproject.toml", REPO / "README.md", *REPO.glob("LICENSE*")]:
        shutil.copy(path, src / path.name)
    for package in ("agent", "checks"):
        shutil.copytree(REPO / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", str(src), "-w", str(wheels)],
                   check=True, timeout=600)
    archive = dest / "wheelhouse.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for whl in sorted(wheels.glob("*.whl")):
            tar.add(whl, arcname=whl.name)
    return archive


def snapshot(root: Path) -> Dict[str, Any]:
    """Every path under ROOT with its type, mode, owner, size, mtime and content hash."""
    out: Dict[str, Any] = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        entry: Dict[str, Any] = {"mode": st.st_mode, "uid": st.st_uid, "mtime": st.st_mtime_ns}
        if stat.S_ISLNK(st.st_mode):
            entry["link"] = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        out[str(path.relative_to(root))] = entry
    return out
