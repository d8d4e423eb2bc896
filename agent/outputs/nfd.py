"""The NFD feature file: the same labels for clusters that give the host no API credentials.

nfd-worker's `local` source reads every file in
/etc/kubernetes/node-feature-discovery/features.d/: one `name=value` per line, `#` comments,
and the `# +expiry-time=<RFC3339>` directive after which nfd-worker ignores the file's
features (NFD customization guide, "Local feature source / Feature files"). Labels outside
feature.node.kubernetes.io reach the Node only where nfd-master allows their namespace
(`extraLabelNs` / `denyLabelNs`; kubernetes.io namespaces are always denied).

The file is written atomically (fsync'd temp file, then rename), so nfd-worker never reads
half a file. The temp file lives in the parent of features.d (same filesystem) so that
nfd-worker, which reads every file in features.d, never sees it.
"""

import os
from typing import Dict, Mapping, Optional

from agent.outputs.node.reconcile import rfc3339
from agent.safeio.atomic import write_atomic

HEADER = "# written by gpu-node-agent: do not edit (docs/kubernetes.md)"


def render(labels: Mapping[str, Optional[str]], expires_at: float) -> str:
    lines = [HEADER, f"# +expiry-time={rfc3339(expires_at)}"]
    lines += [f"{k}={v}" for k, v in sorted(labels.items()) if v is not None]
    return "\n".join(lines) + "\n"


def parse(text: str) -> Dict[str, str]:
    """The labels in a feature file (comments and directives skipped)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def read_labels(path: str) -> Optional[Dict[str, str]]:
    """Our own file's labels; None when absent or not ours."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    if not text.startswith(HEADER):
        return None
    return parse(text)


def write(path: str, labels: Mapping[str, Optional[str]], expires_at: float) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # The temp file lives beside features.d, not in it: nfd-worker reads every file there.
    write_atomic(path, render(labels, expires_at).encode("utf-8"),
                 tmp_dir=os.path.dirname(directory))


def remove(path: str) -> bool:
    """Delete the file if it is ours (the NFD output was turned off)."""
    if read_labels(path) is None:
        return False
    os.unlink(path)
    return True
