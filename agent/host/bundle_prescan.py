"""The raw pre-scan of a bundle's .tar.gz: every tar header walked on the decompressed gzip
stream before tarfile parses any of them (agent/host/bundle_unpack.py then unpacks).

tarfile's own parsing is the attack surface: its PAX parser is quadratic in a run of digits
(CVE-2024-6232), and a gzip bomb or a million members costs memory and time before any member
check could run. So the stream is inflated in bounded pieces (a cap on the decompressed total),
and each header is checked here: checksum, type (regular file, directory, symlink, PAX, GNU long
name only), sizes, extended headers capped and well-formed, member count and data total capped.
Header layout: POSIX.1-2001 ustar and pax(1), GNU tar's 'L'/'K' long names.
"""
import re
import zlib
from pathlib import Path
from typing import BinaryIO

from agent.errors import BundleError

# Bounds on what a .tar.gz may hold. The pre-scan enforces them on the raw gzip stream before
# tarfile parses a single header; the member pass and the extraction enforce them again.
MAX_MEMBERS = 20000
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_STREAM_BYTES = MAX_UNPACKED_BYTES + 64 * 1024 * 1024  # decompressed bytes read at most
MAX_EXT_HEADER = 64 * 1024  # one PAX 'x'/'g' header (ours are < 1 KiB)
MAX_NAME_BYTES = 4096  # PATH_MAX (limits.h), longer names cannot be created anyway
MAX_COMPONENT_BYTES = 255  # NAME_MAX
MAX_EXT_CHAIN = 8  # extended headers in a row before a member (tarfile recurses once each)
# tarfile < 3.9.20/3.10.15/3.11.10/3.12.6 searches a PAX header with re.search(rb"\d+ hdrcharset=")
# (CVE-2024-6232, https://github.com/python/cpython/issues/121285): quadratic in the length of
# a run of digits. A run longer than this in a PAX header is refused (mtimes have 10 + 9).
MAX_PAX_DIGIT_RUN = 64
BLOCK = 512
READ_CHUNK = 64 * 1024  # compressed bytes read, decompressed bytes produced, per step
_DIGITS = re.compile(rb"[0-9]{%d,}" % (MAX_PAX_DIGIT_RUN + 1))

# tarfile type flags (POSIX.1-2001 ustar, GNU tar's 'L'/'K').
_REG, _AREG, _DIR, _SYM = b"0", b"\0", b"5", b"2"
_PAX, _PAX_GLOBAL, _LONGNAME, _LONGLINK = b"x", b"g", b"L", b"K"
_HARD, _DEVS = b"1", (b"3", b"4", b"6")


class _Inflater:
    """The decompressed gzip stream, read in bounded pieces: never more than ``cap`` bytes in
    all (a gzip bomb stops there), never more than one piece in memory."""

    def __init__(self, fh: BinaryIO, cap: int, archive: Path) -> None:
        self._fh = fh
        self._cap = cap
        self._archive = archive
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing (RFC 1952)
        self._buf = bytearray()
        self._eof = False
        self.total = 0

    def _more(self) -> None:
        if self._d.eof:  # a gzip member ended: another may follow (RFC 1952 section 2.2)
            rest = self._d.unused_data or self._fh.read(READ_CHUNK)
            if not rest:
                self._eof = True
                return
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            src = rest
        else:
            src = self._d.unconsumed_tail or self._fh.read(READ_CHUNK)
            if not src:
                raise BundleError(f"{self._archive}: the gzip stream is truncated")
        try:
            out = self._d.decompress(src, READ_CHUNK)
        except zlib.error as exc:
            raise BundleError(f"{self._archive}: not a readable .tar.gz ({exc})") from None
        self.total += len(out)
        if self.total > self._cap:
            raise BundleError(
                f"{self._archive}: decompresses to more than {self._cap} bytes (a gzip bomb?)"
            )
        self._buf += out

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and not self._eof:
            self._more()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            got = len(self.read(min(n, READ_CHUNK)))
            if got == 0:
                return  # truncated: tarfile reports it on the member pass
            n -= got


def _number(field: bytes) -> int:
    """A tar number field as tarfile's nti() reads it: octal text, or base-256 when the first
    byte is 0x80 (0xff, negative, is refused here)."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise ValueError("negative number")
    text = field.split(b"\0", 1)[0].strip()
    return int(text.decode("ascii"), 8) if text else 0


def _checksum_ok(block: bytes) -> bool:
    try:
        want = _number(block[148:156])
    except ValueError:
        return False
    unsigned = 256 + sum(block[:148]) + sum(block[156:])
    signed = 256 + sum(b - 256 if b > 127 else b for b in block[:148] + block[156:])
    return want in (unsigned, signed)


def _check_pax(body: bytes, padding: bytes, archive: Path) -> None:
    """A PAX extended header (POSIX.1-2001 pax(1), "pax Extended Header"): records
    ``"%d %s=%s\\n" % (length, keyword, value)`` that fill the body exactly, padding all NUL.
    That is the shape tarfile's regex walk reads in linear time; the keywords that would make
    tarfile's idea of the next member's data differ from ours are refused."""
    where = f"{archive}: PAX header"
    if padding.strip(b"\0"):
        raise BundleError(f"{where}: data after its records")
    run = _DIGITS.search(body)
    if run is not None:
        raise BundleError(f"{where}: a run of more than {MAX_PAX_DIGIT_RUN} digits")
    pos = 0
    while pos < len(body):
        space = body.find(b" ", pos, pos + 12)
        field = body[pos:space] if space > pos else b""
        if not field.isdigit():
            raise BundleError(f"{where}: malformed record at byte {pos}")
        length = int(field)
        record = body[space + 1:pos + length]
        if length <= len(field) + 1 or pos + length > len(body) or not record.endswith(b"\n"):
            raise BundleError(f"{where}: malformed record at byte {pos}")
        key, eq, value = record[:-1].partition(b"=")
        if not eq or not key:
            raise BundleError(f"{where}: malformed record at byte {pos}")
        if key == b"size" or key.startswith(b"GNU.sparse"):
            raise BundleError(f"{where}: keyword {key.decode('ascii', 'replace')!r} is refused")
        if key in (b"path", b"linkpath") and len(value) >= MAX_NAME_BYTES:
            raise BundleError(f"{where}: a {key.decode()} longer than {MAX_NAME_BYTES} bytes")
        pos += length


def prescan(fh: BinaryIO, archive: Path) -> None:
    """Walks every tar header in the gzip stream before tarfile sees any of them: checksum,
    type (regular file, directory, symlink, PAX, GNU long name only), sizes, extended headers
    capped, member count and data total capped. Stops where tarfile stops (the first all-zero
    block)."""
    src = _Inflater(fh, MAX_STREAM_BYTES, archive)
    members = 0
    data_total = 0
    chain = 0
    while True:
        block = src.read(BLOCK)
        if not block:
            if members == 0 and chain == 0:
                raise BundleError(f"{archive}: an empty archive")
            break  # no end-of-archive blocks: tarfile stops here too
        if len(block) < BLOCK:
            raise BundleError(f"{archive}: truncated tar header")
        if block.count(0) == BLOCK:
            if chain:
                raise BundleError(f"{archive}: an extended header without its member")
            break
        if not _checksum_ok(block):
            raise BundleError(f"{archive}: bad tar header checksum at member {members + 1}")
        kind = block[156:157]
        name = block[0:100].split(b"\0", 1)[0]
        try:
            size = _number(block[124:136])
        except ValueError:
            raise BundleError(f"{archive}: bad size field at member {members + 1}") from None
        shown = name.decode("utf-8", "replace")[:80]
        if kind in (_PAX, _PAX_GLOBAL, _LONGNAME, _LONGLINK):
            chain += 1
            if chain > MAX_EXT_CHAIN:
                raise BundleError(f"{archive}: more than {MAX_EXT_CHAIN} extended headers in a row")
            cap = MAX_EXT_HEADER if kind in (_PAX, _PAX_GLOBAL) else MAX_NAME_BYTES
            if size > cap:
                what = "PAX header" if kind in (_PAX, _PAX_GLOBAL) else "GNU long name"
                raise BundleError(f"{archive}: a {size}-byte {what} (at most {cap})")
            padded = -(-size // BLOCK) * BLOCK
            body = src.read(padded)
            if len(body) < padded:
                raise BundleError(f"{archive}: truncated extended header")
            if kind in (_PAX, _PAX_GLOBAL):
                _check_pax(body[:size], body[size:], archive)
            continue
        chain = 0
        members += 1
        if members > MAX_MEMBERS:
            raise BundleError(f"{archive}: more than {MAX_MEMBERS} members")
        if kind == _HARD:
            raise BundleError(f"{archive}: member {shown!r} is a hard link")
        if kind in _DEVS:
            raise BundleError(f"{archive}: member {shown!r} is a device or fifo")
        if kind == _AREG and name.endswith(b"/"):
            kind = _DIR  # old V7 directories, as tarfile reads them
        if kind in (_DIR, _SYM):
            if size:  # tarfile skips no data for these: a size would desynchronise us
                raise BundleError(f"{archive}: member {shown!r} has a size but no data")
            continue
        if kind not in (_REG, _AREG):
            raise BundleError(f"{archive}: member {shown!r} has an unsupported type {kind!r}")
        data_total += size
        if data_total > MAX_UNPACKED_BYTES:
            raise BundleError(f"{archive}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        src.skip(-(-size // BLOCK) * BLOCK)
