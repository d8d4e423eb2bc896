"""Hostile bundles, built on the spot, for tests/test_bundle_hostile.py and
bench/bench_hostile.py. Each builder writes one bundle (a .tar.gz or a directory) under
``dest`` whose links point at ``canary`` (a directory outside the bundle holding
``target.txt``); nothing here is ever extracted by anything but the code under test."""
import io
import os
import tarfile
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

META = b"format_version: 1\nhostname: hostile\n"
CANARY_TEXT = b"format_version: 1\nhostname: canary-original\n"

Member = Tuple[tarfile.TarInfo, Optional[bytes]]


def reg(name: str, data: bytes = b"x") -> Member:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    return info, data


def sym(name: str, target: str) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


def dirm(name: str) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info, None


def write_tar(path: Path, members: List[Member], fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(path, "w:gz", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def make_canary(base: Path) -> Path:
    canary = base / "canary"
    canary.mkdir()
    (canary / "target.txt").write_bytes(CANARY_TEXT)
    return canary


def snapshot(tree: Path) -> Dict[str, bytes]:
    """Every entry under ``tree`` (names, link targets, contents), to assert nothing changed."""
    out: Dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(tree))
            if full.is_symlink():
                out[rel] = b"-> " + os.readlink(full).encode()
            elif full.is_file():
                out[rel] = full.read_bytes()
            else:
                out[rel] = b"<dir>"
    return out


# -- the archives ------------------------------------------------------------------------
def escape_dir_link(dest: Path, canary: Path) -> Path:
    """A symlink to a directory outside, then a file through it."""
    return write_tar(dest / "escape-dir.tar.gz", [
        reg("bundle.yaml", META), dirm("root"),
        sym("root/evil", str(canary)), reg("root/evil/x", b"written through the link\n"),
    ])


def escape_file_link(dest: Path, canary: Path) -> Path:
    """A symlink to a file outside, then a regular member of the same name."""
    return write_tar(dest / "escape-file.tar.gz", [
        reg("bundle.yaml", META), dirm("root"),
        sym("root/ow", str(canary / "target.txt")), reg("root/ow", b"overwritten\n"),
    ])


def escape_dotdot_chain(dest: Path, canary: Path) -> Path:
    """`l1 -> .`, `l1/l2 -> ..`, then `l1/l2/x`: each link stays inside on its own."""
    return write_tar(dest / "escape-chain.tar.gz", [
        reg("bundle.yaml", META),
        sym("l1", "."), sym("l1/l2", ".."), reg("l1/l2/x", b"above the bundle\n"),
    ])


def root_to_slash(dest: Path, canary: Path) -> Path:
    return write_tar(dest / "root-slash.tar.gz", [reg("bundle.yaml", META), sym("root", "/")])


def kmsg_to_dev_zero(dest: Path, canary: Path) -> Path:
    return write_tar(dest / "kmsg-zero.tar.gz", [
        reg("bundle.yaml", META), dirm("root"), sym("kmsg.log", "/dev/zero"),
    ])


def meta_outside(dest: Path, canary: Path) -> Path:
    return write_tar(dest / "meta-outside.tar.gz", [
        sym("bundle.yaml", str(canary / "target.txt")), dirm("root"),
    ])


def duplicate_member(dest: Path, canary: Path) -> Path:
    return write_tar(dest / "duplicate.tar.gz", [
        reg("bundle.yaml", META), dirm("root"),
        reg("root/etc/os-release", b"ID=ubuntu\n"), reg("root/etc/os-release", b"ID=evil\n"),
    ])


def pax_1mib(dest: Path, canary: Path) -> Path:
    """A 1 MiB PAX header of digits: tarfile before 3.9.20/3.11.10/3.12.6 searches it with a
    backtracking regex (CVE-2024-6232) for hours; compressed it is about a kilobyte."""
    info, data = reg("bundle.yaml", META)
    info.pax_headers = {"comment": "1" * (1024 * 1024)}
    return write_tar(dest / "pax-1mib.tar.gz", [(info, data), dirm("root")])


def alias_bomb(dest: Path, canary: Path) -> Path:
    """bundle.yaml with nine levels of nine aliases: 9**9 (387 million) nodes expanded."""
    lines = ["format_version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return write_tar(dest / "alias-bomb.tar.gz", [
        reg("bundle.yaml", ("\n".join(lines) + "\n").encode()), dirm("root"),
    ])


def gzip_bomb(dest: Path, canary: Path, size: int = 600 * 1024 * 1024) -> Path:
    """One member of ``size`` zero bytes: about 600 KB compressed for 600 MiB (written in
    pieces, never held in memory)."""
    path = dest / "gzip-bomb.tar.gz"
    header = tarfile.TarInfo("root/zeros")
    header.size = size
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    meta_info, meta = reg("bundle.yaml", META)
    with open(path, "wb") as out:
        out.write(comp.compress(meta_info.tobuf(tarfile.PAX_FORMAT)))
        out.write(comp.compress(meta + b"\0" * (-len(meta) % 512)))
        out.write(comp.compress(header.tobuf(tarfile.PAX_FORMAT)))
        chunk = b"\0" * (1024 * 1024)
        left = size
        while left:
            n = min(left, len(chunk))
            out.write(comp.compress(chunk[:n]))
            left -= n
        out.write(comp.compress(b"\0" * 1024))
        out.write(comp.flush())
    return path


ARCHIVES: Dict[str, Callable[[Path, Path], Path]] = {
    "escape-dir-link": escape_dir_link,
    "escape-file-link": escape_file_link,
    "escape-dotdot-chain": escape_dotdot_chain,
    "root-to-slash": root_to_slash,
    "kmsg-to-dev-zero": kmsg_to_dev_zero,
    "bundle-yaml-outside": meta_outside,
    "duplicate-member": duplicate_member,
    "pax-1mib": pax_1mib,
    "alias-bomb": alias_bomb,
    "gzip-bomb": gzip_bomb,
}


# -- the same hostility as directory bundles ---------------------------------------------
def dir_bundle(dest: Path, name: str) -> Path:
    bundle = dest / name
    (bundle / "root" / "etc").mkdir(parents=True)
    (bundle / "bundle.yaml").write_bytes(META)
    return bundle


def dir_root_to_slash(dest: Path, canary: Path) -> Path:
    bundle = dest / "dir-root-slash"
    bundle.mkdir()
    (bundle / "bundle.yaml").write_bytes(META)
    (bundle / "root").symlink_to("/")
    return bundle


def dir_kmsg_to_dev_zero(dest: Path, canary: Path) -> Path:
    bundle = dir_bundle(dest, "dir-kmsg-zero")
    (bundle / "kmsg.log").symlink_to("/dev/zero")
    return bundle


def dir_meta_outside(dest: Path, canary: Path) -> Path:
    bundle = dest / "dir-meta-outside"
    (bundle / "root").mkdir(parents=True)
    (bundle / "bundle.yaml").symlink_to(canary / "target.txt")
    return bundle


def dir_commands_fifo(dest: Path, canary: Path) -> Path:
    bundle = dir_bundle(dest, "dir-commands-fifo")
    os.mkfifo(bundle / "commands.yaml")
    return bundle


DIRECTORIES: Dict[str, Callable[[Path, Path], Path]] = {
    "dir-root-to-slash": dir_root_to_slash,
    "dir-kmsg-to-dev-zero": dir_kmsg_to_dev_zero,
    "dir-bundle-yaml-outside": dir_meta_outside,
    "dir-commands-fifo": dir_commands_fifo,
}
