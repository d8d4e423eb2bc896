"""Where Canonical Kubernetes (the k8s snap) keeps its containerd config, read from the snap's
own records rather than assumed.

canonical/k8s-snap records it twice (src/k8s/pkg/snap/snap.go: ContainerdConfigDir() is
`<containerd-base-dir>/etc/containerd`, the base dir "/" unless the bootstrap/join config's
`containerd-base-dir` names another):
- src/k8s/pkg/k8sd/setup/containerd.go writes `--config=<ContainerdConfigDir>/config.toml` into
  the containerd service's arguments file, `$SNAP_COMMON/args/containerd` (ServiceArgumentsDir,
  src/k8s/pkg/snap/util/arguments.go: one `--flag=value` a line), which the snap's containerd
  service is started with;
- src/k8s/pkg/snap/util/containerd.go keeps lock files under `$SNAP_COMMON/lock/` whose content is
  the directory they stand for, `containerd-config-dir` among them.
$SNAP_COMMON is /var/snap/k8s/common. The snap's own containerd is /snap/k8s/current/bin/containerd.
"""
import posixpath
from typing import List, Optional, Tuple

from checks.base import HostView

SNAP_ARGS = "/var/snap/k8s/common/args/containerd"
SNAP_CONFIG_DIR_LOCK = "/var/snap/k8s/common/lock/containerd-config-dir"
SNAP_BINARY = "/snap/k8s/current/bin/containerd"
RECORDS = (SNAP_ARGS, SNAP_CONFIG_DIR_LOCK)


def _arg(text: str, flag: str) -> Optional[str]:
    # utils.ParseArgumentLine: `--key=value`, the value possibly quoted; the last one wins
    # (UpdateServiceArguments keeps one line per key anyway).
    found = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(flag + "="):
            found = line[len(flag) + 1:].strip().strip("'\"") or None
    return found


def snap_config(host: HostView) -> Tuple[Optional[str], str]:
    """(the config path the snap recorded, which record said so), or (None, "")."""
    text = host.read_text_or_none(SNAP_ARGS)
    if text:
        path = _arg(text, "--config")
        if path and path.startswith("/"):
            return posixpath.normpath(path), f"{SNAP_ARGS} --config"
    text = host.read_text_or_none(SNAP_CONFIG_DIR_LOCK)
    if text and text.strip().startswith("/"):
        return (posixpath.join(posixpath.normpath(text.strip()), "config.toml"),
                f"{SNAP_CONFIG_DIR_LOCK}")
    return None, ""


def is_snap_host(host: HostView) -> bool:
    return any(host.exists(p) for p in RECORDS + (SNAP_BINARY,))


def looked_at(config_path: str, recorded_by: str) -> List[str]:
    return [config_path] + ([recorded_by] if recorded_by else list(RECORDS))
