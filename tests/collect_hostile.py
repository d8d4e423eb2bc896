"""A hostile host for `collect`: planted secrets in every form redaction must handle, each with
a unique canary, and symlinks/imports that lead out of what the checks declare.

Used on a tree under tmp (``--host-root``, or a Host with a fake command source) and, in a
private mount namespace, on the live machine (an overlay over /etc, a tmpfs over /run).
Private keys are generated per run (cryptography), never committed.
"""
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from agent.hostview import CommandResult


def canary(n: int) -> str:
    # Letters and digits only, so it fits base64 and header contexts; unique per form.
    return f"Cnry{n:02d}Zq7x"


def _pem_keys() -> Dict[str, str]:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ed_key = ed25519.Ed25519PrivateKey.generate()
    pem = serialization.Encoding.PEM
    trad = serialization.PrivateFormat.TraditionalOpenSSL
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()
    return {
        "rsa": rsa_key.private_bytes(pem, trad, none).decode(),  # BEGIN RSA PRIVATE KEY
        "ec": ec_key.private_bytes(pem, trad, none).decode(),  # BEGIN EC PRIVATE KEY
        "pkcs8": ec_key.private_bytes(pem, pkcs8, none).decode(),  # BEGIN PRIVATE KEY
        "openssh": ed_key.private_bytes(pem, serialization.PrivateFormat.OpenSSH, none).decode(),
        "encrypted": rsa_key.private_bytes(
            pem, pkcs8, serialization.BestAvailableEncryption(b"pw")
        ).decode(),  # BEGIN ENCRYPTED PRIVATE KEY
    }


def _body_line(pem: str) -> str:
    """A line of the key's base64 body: unique to this key, the string that must not leak."""
    body = [ln for ln in pem.splitlines() if ln and not ln.startswith("-----")]
    return max(body, key=len)


def _indent(text: str, pad: str) -> str:
    return "".join(pad + ln + "\n" for ln in text.splitlines())


class Planted:
    def __init__(self) -> None:
        self.files: Dict[str, str] = {}
        self.links: Dict[str, str] = {}
        self.forms: Dict[str, str] = {}  # form -> canary (must appear nowhere in a bundle)
        self.elsewhere: Dict[str, str] = {}  # canaries of files the checks never declared

    def canaries(self) -> Dict[str, str]:
        return {**self.forms, **self.elsewhere}


def plan(live: bool = False) -> Planted:
    """The hostile tree as host paths. ``live``: only paths under /etc and /run (the namespace
    test overlays those two and nothing else)."""
    p = Planted()
    keys = _pem_keys()
    f = p.forms
    f["toml password"] = canary(1)
    f["toml auth (base64 user:password)"] = canary(2)
    f["toml identitytoken"] = canary(3)
    f["toml dotted key configs.\"r\".auth.password"] = canary(4)
    f["toml nested inline table"] = canary(5)
    f["toml Authorization = [\"Basic ...\"] header list"] = canary(6)
    f["toml multi-line \"\"\" password"] = canary(7)
    f["toml Password (capitalised, literal string)"] = canary(8)
    f["cdi env FOO_TOKEN=..."] = canary(9)
    f["toml aws_access_key_id"] = canary(10)
    f["toml aws_secret_access_key"] = canary(11)
    f["cdi env AWS_SESSION_TOKEN=..."] = canary(12)
    f["yaml session blob"] = canary(13)
    f["RSA private key (yaml block scalar)"] = _body_line(keys["rsa"])
    f["EC private key (json string)"] = _body_line(keys["ec"])
    f["PKCS#8 BEGIN PRIVATE KEY (yaml, neutral key name)"] = _body_line(keys["pkcs8"])
    f["OPENSSH private key (yaml, neutral key name)"] = _body_line(keys["openssh"])
    f["ENCRYPTED private key (json, neutral key name)"] = _body_line(keys["encrypted"])
    f["mirror URL user:password@"] = canary(14)
    f["config dump: password"] = canary(15)
    f["config dump: auth"] = canary(16)
    f["config dump: identitytoken"] = canary(17)
    f["config dump: Authorization header"] = canary(18)
    f["command stderr: Bearer token"] = canary(19)
    if not live:
        f["text Password: (capitalised, dpkg status)"] = canary(20)
        f["json by content: token (kubelet checkpoint)"] = canary(21)
        f["kernel log: password="] = canary(22)
    e = p.elsewhere
    e["/etc/cdi/shadow.yaml -> /etc/shadow"] = "root:" + canary(30)
    e["/etc/cdi/climb.yaml -> ../../../../../../etc/gshadow"] = canary(31)
    e["import outside /etc/containerd"] = canary(32)
    e["import link /etc/containerd/linked.toml -> /etc/gna-outside/linked.toml"] = canary(33)

    p.files["/etc/containerd/config.toml"] = f'''version = 2
imports = ["/etc/containerd/conf.d/*.toml", "/etc/gna-outside/extra.toml", "/etc/containerd/linked.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"

[plugins."io.containerd.grpc.v1.cri".registry]
  configs."r2.example".auth.password = "{canary(4)}"

[plugins."io.containerd.grpc.v1.cri".registry.configs."r1.example".auth]
  username = "robot"
  password = "{canary(1)}"
  auth = "dXNlcjp{canary(2)}"
  identitytoken = "{canary(3)}"

[plugins."io.containerd.grpc.v1.cri".registry.configs."r4.example".auth]
  password = """
{canary(7)}
"""
  Password = '{canary(8)}'

[plugins."io.containerd.grpc.v1.cri".registry.headers]
  Authorization = ["Basic dXNlcjp{canary(6)}"]

[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://mirror-user:{canary(14)}@mirror.example"]
'''
    p.files["/etc/containerd/conf.d/50-registry.toml"] = f'''version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  configs = {{ "r3.example" = {{ auth = {{ username = "u3", password = "{canary(5)}" }} }} }}

[plugins."io.containerd.example.v1.ecr-credentials"]
  aws_access_key_id = "AKIA{canary(10)}"
  aws_secret_access_key = "{canary(11)}"
'''
    p.files["/etc/gna-outside/extra.toml"] = f'version = 2\n# {canary(32)}\n'
    p.files["/etc/gna-outside/linked.toml"] = f'version = 2\n# {canary(33)}\n'
    p.links["/etc/containerd/linked.toml"] = "/etc/gna-outside/linked.toml"

    # The NVIDIA spec lives in /run/cdi, reached as /var/run/cdi and through a link in /etc/cdi.
    p.files["/run/cdi/nvidia.yaml"] = (
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\nannotations:\n"
        f"  session: {canary(13)}\n  tls.key: |\n" + _indent(keys["rsa"], "    ")
        + "devices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
        "containerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n"
        f"  - FOO_TOKEN={canary(9)}\n"
        "  hooks:\n  - hookName: createContainer\n    path: /usr/bin/nvidia-cdi-hook\n"
    )
    if not live:
        p.links["/var/run"] = "../run"  # relative, as on Debian/Ubuntu (the live host has its own)
    p.links["/etc/cdi/nvidia.yaml"] = "/var/run/cdi/nvidia.yaml"
    ec_json = keys["ec"].replace("\n", "\\n")
    enc_json = keys["encrypted"].replace("\n", "\\n")
    p.files["/etc/cdi/vendor.json"] = (
        '{"cdiVersion": "0.6.0", "kind": "example.com/device",\n'
        ' "annotations": {"tls": "' + ec_json + '", "blob": "' + enc_json + '"},\n'
        ' "containerEdits": {"env": ["AWS_SESSION_TOKEN=' + canary(12) + '"]},\n'
        ' "devices": []}\n'
    )
    p.files["/etc/cdi/keys.yaml"] = (
        "cdiVersion: 0.6.0\nkind: example.com/keys\nannotations:\n  data: |\n"
        + _indent(keys["pkcs8"], "    ") + "  other: |\n" + _indent(keys["openssh"], "    ")
        + "devices: []\n"
    )
    p.files["/etc/shadow"] = f"root:{canary(30)}:19000:0:99999:7:::\n"
    p.files["/etc/gshadow"] = f"root:{canary(31)}::\n"
    p.links["/etc/cdi/shadow.yaml"] = "/etc/shadow"
    p.links["/etc/cdi/climb.yaml"] = "../../../../../../etc/gshadow"
    if not live:
        p.files["/usr/lib/os-release"] = 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu"\n'
        p.links["/etc/os-release"] = "../usr/lib/os-release"  # merged-/usr layout
        p.files["/var/lib/dpkg/status"] = (
            "Package: nvidia-container-toolkit\nStatus: install ok installed\n"
            f"Version: 1.17.8-1\nPassword: {canary(20)}\n\n"
        )
        p.files["/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"] = (
            '{"Data": {"PodDeviceEntries": null, "RegisteredDevices": {},'
            f' "token": "{canary(21)}"}}, "Checksum": 1}}\n'
        )
        p.files["/proc/driver/nvidia/version"] = (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n"
        )
    return p


def dump_output() -> str:
    """`containerd config dump` as containerd 1.7 prints it (indented tables), with the
    registry auth it carries."""
    return f'''version = 2
root = "/var/lib/containerd"

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    enable_cdi = true
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = ""

      [plugins."io.containerd.grpc.v1.cri".registry.configs]

        [plugins."io.containerd.grpc.v1.cri".registry.configs."r1.example"]

          [plugins."io.containerd.grpc.v1.cri".registry.configs."r1.example".auth]
            auth = "dXNlcjp{canary(16)}"
            identitytoken = "{canary(17)}"
            password = "{canary(15)}"
            username = "robot"

      [plugins."io.containerd.grpc.v1.cri".registry.headers]
        Authorization = ["Basic dXNlcjp{canary(18)}"]
'''


class FakeContainerd:
    """A command source answering the containerd argvs the checks run; the rest 'not
    installed' (rc 127). nvidia-ctk answers with a warning carrying a bearer token."""

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        key = tuple(argv)
        if key and key[0] == "containerd" and key[1:] == ("--version",):
            return CommandResult(key, 0, "containerd github.com/containerd/containerd 1.7.24 x\n")
        if key and key[0] == "containerd" and key[-2:] == ("config", "dump"):
            return CommandResult(key, 0, dump_output())
        if key[:1] == ("nvidia-ctk",):
            token = f"eyJhbGciOiJSUzI1NiJ9.{canary(19)}.c2ln"  # a JWT's shape
            err = f"level=warning msg=\"retrying\" header=\"Authorization: Bearer {token}\"\n"
            return CommandResult(key, 0, "NVIDIA Container Toolkit CLI version 1.17.8\n", err)
        return CommandResult(key, 127, "", f"{key[0]}: not found")


KMSG = [f"NVRM: GPU at PCI:0000:01:00: debug password={canary(22)}", "NVRM: loaded"]


def build(root: Path, planted: Planted) -> None:
    """Write the planted files and links under ``root`` (a tree, or "/" in the namespace)."""
    for path, text in planted.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(text)
    for path, link in planted.links.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        os.symlink(link, target)
    for exe in ("/usr/bin/nvidia-container-runtime", "/usr/bin/nvidia-cdi-hook"):
        if str(root) != "/":
            target = root / exe.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("")
            target.chmod(0o755)


def bundle_bytes(out: Path) -> List[Tuple[str, bytes]]:
    """Every file of a bundle (directory or .tar.gz) with its bytes; links as their target."""
    import tarfile

    items: List[Tuple[str, bytes]] = []
    if out.is_dir():
        for path in sorted(out.rglob("*")):
            rel = str(path.relative_to(out))
            if path.is_symlink():
                items.append((rel, os.readlink(path).encode()))
            elif path.is_file():
                items.append((rel, path.read_bytes()))
        return items
    with tarfile.open(out, "r:gz") as tar:
        for member in tar.getmembers():
            if member.issym():
                items.append((member.name, member.linkname.encode()))
            elif member.isfile():
                fh = tar.extractfile(member)
                items.append((member.name, fh.read() if fh else b""))
    return items


def leaks(out: Path, canaries: Dict[str, str]) -> Dict[str, List[str]]:
    """form -> bundle files that contain its canary (empty when nothing leaked)."""
    found: Dict[str, List[str]] = {}
    files = bundle_bytes(out)
    for form, value in canaries.items():
        hits = [name for name, data in files if value.encode() in data]
        if hits:
            found[form] = hits
    return found


# -- the live machine, inside a private mount namespace ---------------------------------------
FAKE_CONTAINERD = """#!/bin/sh
case "$*" in
  --version) echo "containerd github.com/containerd/containerd 1.7.24 x" ;;
  *"config dump") cat "$(dirname "$0")/dump.toml" ;;
  *) exit 1 ;;
esac
"""


def live_main(work: str, out: str) -> int:
    """Run inside `unshare -m --propagation private`: overlay /etc, tmpfs /run, plant, then
    `gpu-node-agent collect -o out` on the live host ("/"), a fake containerd on PATH."""
    w = Path(work)
    for d in ("upper", "ovlwork", "bin"):
        (w / d).mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir=/etc,upperdir={w / 'upper'},workdir={w / 'ovlwork'}", "/etc"],
                   check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run"], check=True)
    planted = plan(live=True)
    build(Path("/"), planted)
    # The keys are generated per run: the test reads this run's canaries from here.
    (w / "canaries.json").write_text(json.dumps(planted.canaries()))
    (w / "bin" / "dump.toml").write_text(dump_output())
    fake = w / "bin" / "containerd"
    fake.write_text(FAKE_CONTAINERD)
    fake.chmod(0o755)
    os.environ["PATH"] = f"{w / 'bin'}:{os.environ.get('PATH', '')}"
    from agent.cli import main

    return main(["collect", "-o", out])


def run_live(work: Path, out: Path, python: Optional[str] = None) -> subprocess.CompletedProcess:
    code = ("import sys; from tests.collect_hostile import live_main; "
            f"sys.exit(live_main({str(work)!r}, {str(out)!r}))")
    return subprocess.run(["unshare", "-m", "--propagation", "private", python or sys.executable,
                           "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=str(Path(__file__).resolve().parent.parent))
