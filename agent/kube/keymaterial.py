"""Key material as file paths that ssl can open, kept off disk, and what a certificate says.

requests and ssl take only file *paths* for a client certificate, its key and a CA bundle, so
inline data (a kubeconfig's `*-data` fields, an exec plugin's certificate) goes into an
anonymous memory file (memfd_create(2)) and is handed over as ``/proc/self/fd/N``. Only where
memfd_create is unavailable (not Linux, a kernel before 3.17, a seccomp filter that refuses it)
does it go to a 0700 temporary directory. The kubeconfig (agent/kube/kubeconfig.py) releases
it on close(), when a load fails, and when it is garbage collected.
"""

import contextlib
import errno
import os
import ssl
import tempfile
import threading
from typing import Dict, List, Optional


class SecretFiles:
    """Key material as paths ssl can open, kept off disk (the module docstring says how).

    ``put`` returns a path; the newest ``KEEP`` versions under one name stay open (an exec
    credential refreshed on one thread while a request on another still opens the previous
    path), older ones are released; ``close`` releases everything and is idempotent.
    """

    KEEP = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memfd = hasattr(os, "memfd_create")
        self._fds: Dict[str, List[int]] = {}
        self._files: Dict[str, List[str]] = {}
        self._tmpdir: Optional[str] = None
        self._serial = 0

    @property
    def in_memory(self) -> bool:
        """True while nothing has gone to the temporary-directory fallback."""
        return self._tmpdir is None

    def put(self, name: str, content: bytes) -> str:
        with self._lock:
            if self._memfd:
                path = self._put_memfd(name, content)
                if path is not None:
                    return path
            return self._put_file(name, content)

    def _put_memfd(self, name: str, content: bytes) -> Optional[str]:
        flags = getattr(os, "MFD_CLOEXEC", 1) | getattr(os, "MFD_ALLOW_SEALING", 2)
        try:
            fd = os.memfd_create(f"gpu-node-agent-{name}", flags)
        except OSError:  # ENOSYS (kernel < 3.17), EPERM/EACCES (seccomp): the fallback
            self._memfd = False
            return None
        path = f"/proc/self/fd/{fd}"
        try:
            _write_all(fd, content)
            _seal(fd)
            # The path is how ssl reaches it: without procfs (a chroot) it is useless.
            os.close(os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        except OSError:
            os.close(fd)
            self._memfd = False
            return None
        except BaseException:
            os.close(fd)
            raise
        versions = self._fds.setdefault(name, [])
        versions.append(fd)
        while len(versions) > self.KEEP:
            with contextlib.suppress(OSError):
                os.close(versions.pop(0))
        return path

    def _put_file(self, name: str, content: bytes) -> str:
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="gpu-node-agent-kube-")  # mode 0700
        self._serial += 1
        target = os.path.join(self._tmpdir, f"{name}.{self._serial}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(target, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            _write_all(fd, content)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise
        os.close(fd)
        versions = self._files.setdefault(name, [])
        versions.append(target)
        while len(versions) > self.KEEP:
            with contextlib.suppress(OSError):
                os.unlink(versions.pop(0))
        return target

    def close(self) -> None:
        with self._lock:
            for versions in self._fds.values():
                for fd in versions:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._fds.clear()
            self._files.clear()
            if self._tmpdir is not None:
                for entry in os.listdir(self._tmpdir):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self._tmpdir, entry))
                with contextlib.suppress(OSError):
                    os.rmdir(self._tmpdir)
                self._tmpdir = None


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[written:]


def _seal(fd: int) -> None:
    """No further writes, growth or shrinking (fcntl(2) "File Sealing"); best effort."""
    try:
        import fcntl

        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except (ImportError, AttributeError, OSError):
        pass


def _refuse_password() -> bytes:
    # An encrypted key has no place in a kubeconfig (clientcmd cannot decrypt one either);
    # without this callback OpenSSL would prompt on the terminal.
    raise ValueError("the client key is encrypted")


def check_pair(cert: str, key: str) -> Optional[str]:
    """Why ssl cannot use this certificate and key (as requests will), or None."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, _refuse_password)
    except (ssl.SSLError, ValueError) as exc:
        return f"not a usable certificate and key ({getattr(exc, 'reason', None) or 'invalid'})"
    except OSError as exc:
        return f"cannot read it ({exc.__class__.__name__})"
    return None


def check_ca(path: str) -> Optional[str]:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        return f"no usable CA certificate ({exc.reason or 'invalid'})"
    except OSError as exc:
        return f"cannot read it ({exc.__class__.__name__})"
    return None


def client_cert_cn(pem: bytes) -> Optional[str]:
    """The subject CN of the first certificate in ``pem`` (kubelet: system:node:<name>).

    Uses `cryptography` when installed (it is not a dependency of the agent); otherwise the
    decoder CPython's own ssl tests use (`_ssl._test_decode_cert`, present 3.9-3.13), which
    needs a file. The kubelet's -current.pem holds the key too; only the certificate is kept.
    """
    start = pem.find(b"-----BEGIN CERTIFICATE-----")
    end = pem.find(b"-----END CERTIFICATE-----", start)
    if start < 0 or end < 0:
        return None
    cert_pem = pem[start : end + len(b"-----END CERTIFICATE-----")] + b"\n"
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID
    except ImportError:
        return _cn_with_ssl(cert_pem)
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except Exception:  # noqa: BLE001 - any bytes: a parse failure of any kind is "no CN"
        return None
    value = names[0].value if names else None
    return value if isinstance(value, str) else None


def _cn_with_ssl(cert_pem: bytes) -> Optional[str]:
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    files = SecretFiles()
    try:
        info = decode(files.put("cert.pem", cert_pem))
    except (OSError, ValueError, ssl.SSLError):
        return None
    finally:
        files.close()
    for rdn in info.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
