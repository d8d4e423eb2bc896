"""containerd 2.x's migration of a version-2 config (the CRI plugin `io.containerd.grpc.v1.cri`)
to version 3, the part of it these checks read.

Sources (containerd/containerd 2.x): plugins/cri/runtime/plugin.go ``configMigration`` (every
key of the old CRI table but the image and stream-server keys moves to
``io.containerd.cri.v1.runtime``, a key the new table already has wins; ``cni.bin_dir``
becomes ``cni.bin_dirs``; ``containerd`` loses its snapshotter keys) and
plugins/cri/images/plugin.go ``configMigration`` (``sandbox_image`` becomes
``pinned_images.sandbox`` of ``io.containerd.cri.v1.images``; registry and pull settings and the
snapshotter keys move there). Held against the real containerd 2.1's `config dump` in
tests/integration/test_containerd_oracle.py.
"""
from typing import Any, Dict

CRI_V1 = "cri"
CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_V3_RUNTIME = "io.containerd.cri.v1.runtime"
CRI_V3_IMAGES = "io.containerd.cri.v1.images"

_IMAGE_KEYS = ("registry", "image_decryption", "max_concurrent_downloads",
               "image_pull_progress_timeout", "image_pull_with_sync_fs", "stats_collect_period")
_SNAPSHOT_KEYS = ("snapshotter", "disable_snapshot_annotations", "discard_unpacked_layers")
_SERVER_KEYS = ("disable_tcp_service", "stream_server_address", "stream_server_port",
                "stream_idle_timeout", "enable_tls_streaming", "x509_key_pair_streaming")


def _sub(parent: Dict[str, Any], key: str) -> Dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def _runtime(src: Dict[str, Any], dst: Dict[str, Any]) -> None:
    for key, value in src.items():
        if key in ("cni", "containerd", "sandbox_image") + _IMAGE_KEYS + _SERVER_KEYS:
            continue
        dst.setdefault(key, value)
    cni = src.get("cni")
    if isinstance(cni, dict):
        new = _sub(dst, "cni")
        for key, value in cni.items():
            if key == "bin_dir":
                if not new.get("bin_dirs"):
                    new["bin_dirs"] = [value]
            else:
                new.setdefault(key, value)
    old = src.get("containerd")
    if isinstance(old, dict):
        new = _sub(dst, "containerd")
        for key, value in old.items():
            if key not in _SNAPSHOT_KEYS:
                new.setdefault(key, value)


def _images(src: Dict[str, Any], dst: Dict[str, Any]) -> None:
    if "sandbox_image" in src:
        _sub(dst, "pinned_images")["sandbox"] = src["sandbox_image"]
    for key in _IMAGE_KEYS:
        if key in src:
            dst[key] = src[key]
    old = src.get("containerd")
    if isinstance(old, dict):
        for key in _SNAPSHOT_KEYS:
            if key in old:
                dst[key] = old[key]


def migrate_to_v3(data: Dict[str, Any]) -> None:
    """In place: the old CRI table's settings moved to their version-3 plugin tables (the
    old table itself stays, as containerd leaves it; nothing reads it under version 3)."""
    plugins = data.get("plugins")
    if isinstance(plugins, dict):
        old = plugins.get(CRI_V2, plugins.get(CRI_V1))
        if isinstance(old, dict):
            _runtime(old, _sub(plugins, CRI_V3_RUNTIME))
            _images(old, _sub(plugins, CRI_V3_IMAGES))
            for key in ("containerd", "enable_cdi", "cdi_spec_dirs", "cni", "sandbox_image"):
                old.pop(key, None)
    data["version"] = 3
