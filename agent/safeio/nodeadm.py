"""nodeadm's NodeConfig and the kubelet's flags as they lie on disk, read as hostile input.

Both the Node-name lookup (agent/kube/nodename.py) and the `registration-labels` check read
them, so the reading lives once, here (a check may not import agent.kube; both may import
safeio, and the YAML goes through the bounded loader beside this module).

How nodeadm reads its config (awslabs/amazon-eks-ami nodeadm/internal/configprovider):

- ``nodeadm init --config-source file://<path>``: ``file.go`` reads a file, or a directory's
  regular files whose names end in ``.yaml``, ``.yml`` or ``.json`` (case-insensitive), in
  ``os.ReadDir`` order (sorted by file name), and merges them in that order;
- each file goes through ``mime.go`` ``ParseMaybeMultipart``: MIME multi-part user data when
  the top-level Content-Type is ``multipart/*`` (the parts of type ``application/node.eks.aws``,
  base64 and gzip undone, merged in order), else the whole file as a NodeConfig;
- ``api/merge.go``: later documents override earlier ones, except ``spec.kubelet.flags``,
  which are *appended* ("for flags with multiple values like `--node-labels`, the values from
  every instance will be merged").

What nodeadm renders for the kubelet (aws/eks-hybrid and awslabs/amazon-eks-ami
internal/kubelet/environment.go ``writeKubeletEnvironment``): ``/etc/eks/kubelet/environment``
with ``NODEADM_KUBELET_ARGS="--flag=value ... <spec.kubelet.flags>"``, the user's flags last;
on hybrid nodes its own flags include ``--node-labels=eks.amazonaws.com/compute-type=hybrid``
(eks-hybrid internal/kubelet/config.go ``withHybridNodeLabels``).

Nothing here raises on a file's content: a problem is returned as a line naming the file.
"""
import base64
import binascii
import zlib
from typing import Any, Iterable, List, Mapping, Optional, Tuple

from agent.hostview import HostView
from agent.records import field, record

# The words of kubelet flags, read by the same checks and the Node-name lookup: re-exported.
from agent.safeio.kubelet_args import _split, args_words, flag_values, node_labels  # noqa: F401
from agent.safeio.yamlio import YamlError, safe_load_all

# Where a NodeConfig may lie (kube.nodeadm_config_paths overrides): nodeadm reads whatever
# `--config-source file://...` names. The first is where this project's Ansible role keeps it
# (gpu_node_agent_nodeadm_config_source); the others are common choices.
NODEADM_CONFIGS = (
    "/etc/eks/nodeadm.d",
    "/etc/eks/nodeadm/nodeConfig.yaml",
    "/etc/eks/nodeadm/config.yaml",
    "/etc/nodeadm/nodeConfig.yaml",
)
# nodeadm's rendered kubelet flags (module docstring).
NODEADM_KUBELET_ENV = "/etc/eks/kubelet/environment"
# Where kubelet flags live: nodeadm's environment file; kubeadm's flags file
# (KUBELET_KUBEADM_ARGS, kubeadm's kubelet drop-in 10-kubeadm.conf); the distro defaults files
# the same drop-in reads (KUBELET_EXTRA_ARGS); Canonical Kubernetes' args file (one flag a line).
KUBELET_ARGS_FILES = (
    NODEADM_KUBELET_ENV,
    "/var/lib/kubelet/kubeadm-flags.env",
    "/etc/default/kubelet",
    "/etc/sysconfig/kubelet",
    "/var/snap/k8s/common/args/kubelet",
)
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")  # configprovider/file.go isConfigFile
NODE_CONFIG_MEDIA_TYPE = "application/node.eks.aws"  # configprovider (nodeConfigMediaType)
NODE_CONFIG_KIND = "NodeConfig"
# A gzip-compressed part is inflated to at most this (a NodeConfig is a few KiB).
MAX_INFLATED = 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


@record(frozen=True)
class ConfigFile:
    """One file of a config source: its NodeConfig documents in merge order, or why none."""

    path: str
    configs: Tuple[Mapping[str, Any], ...] = ()
    problem: Optional[str] = None


@record
class ConfigSource:
    """One configured source (a file or a directory) and the files nodeadm would read there."""

    source: str
    files: List[ConfigFile] = field(default_factory=list)


def source_files(host: HostView, source: str) -> List[str]:
    """The files nodeadm reads for ``source``: a directory's config files by name, else it."""
    entries = host.listdir(source)
    if entries:
        base = source.rstrip("/")
        return [f"{base}/{e}" for e in sorted(entries) if e.lower().endswith(CONFIG_SUFFIXES)]
    return [source]


def _inflate(data: bytes) -> bytes:
    if not data.startswith(_GZIP_MAGIC):
        return data
    inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    try:
        out = inflater.decompress(data, MAX_INFLATED)
    except zlib.error as exc:  # nodeadm: "failed to read from GZIP reader"
        raise ValueError(f"a gzip part that does not inflate ({exc})") from None
    if inflater.unconsumed_tail:
        raise ValueError(f"a gzip part inflates past {MAX_INFLATED} bytes")
    if not inflater.eof:
        raise ValueError("a gzip part cut short")
    return out


def _maybe_base64(data: bytes) -> bytes:
    # configprovider/encoding.go decodeIfBase64: standard base64 (Go's decoder skips CR and
    # LF) decodes, else the part is taken as it is.
    compact = data.replace(b"\r", b"").replace(b"\n", b"")
    if not compact:
        return data
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return data


def _mime_parts(text: str) -> Optional[List[str]]:
    """The NodeConfig parts of MIME multi-part user data; None when ``text`` is not
    multi-part (nodeadm then reads the whole file as a NodeConfig)."""
    if "content-type" not in text[:4096].lower():
        return None
    # email (and the urllib, calendar, ipaddress it brings) only for MIME user data: a host
    # without it does not pay for the import at start-up (bench/bench_footprint.py).
    import email
    import email.policy
    from email.message import Message

    try:
        msg = email.message_from_string(text, policy=email.policy.compat32)
        if not msg.is_multipart():
            return None
        payload = msg.get_payload()
    except (RecursionError, ValueError, TypeError, LookupError, IndexError):
        return None
    parts = []
    total = 0
    # Top-level parts only, as configprovider's multipart.Reader walks them.
    for part in payload if isinstance(payload, list) else []:
        if not isinstance(part, Message) or part.get_content_type() != NODE_CONFIG_MEDIA_TYPE:
            continue
        raw = part.get_payload(decode=True)
        data = raw if isinstance(raw, bytes) else str(part.get_payload()).encode()
        data = _inflate(_maybe_base64(data))
        # The cap is on all parts together: a ~1 KiB gzip part inflates to MAX_INFLATED, so
        # a 4 MiB file of such parts would otherwise hold gigabytes.
        total += len(data)
        if total > MAX_INFLATED:
            raise ValueError(f"the {NODE_CONFIG_MEDIA_TYPE} parts decode past {MAX_INFLATED} "
                             "bytes together")
        parts.append(data.decode("utf-8", "replace"))
    return parts


def node_configs(text: str) -> Tuple[Tuple[Mapping[str, Any], ...], Optional[str]]:
    """(the NodeConfig documents of one file in order, problem). A YAML stream may hold other
    kinds beside it; a file with none is a problem."""
    try:
        parts = _mime_parts(text)
    except ValueError as exc:  # a gzip bomb
        return (), str(exc)
    if parts is not None and not parts:
        return (), f"MIME user data without a {NODE_CONFIG_MEDIA_TYPE} part"
    docs: List[Mapping[str, Any]] = []
    for part in [text] if parts is None else parts:
        try:
            loaded = list(safe_load_all(part))  # bounded: depth, alias expansion, integers
        except YamlError as exc:
            return (), f"not YAML ({exc})"
        docs.extend(d for d in loaded if isinstance(d, Mapping)
                    and d.get("kind") == NODE_CONFIG_KIND)
    if not docs:
        return (), f"no document of kind {NODE_CONFIG_KIND}"
    return tuple(docs), None


def read_sources(host: HostView, sources: Iterable[str],
                 unreadable: bool = False) -> List[ConfigSource]:
    """Every configured source with the files nodeadm would read there; a file that does not
    exist is left out; with ``unreadable``, one that exists and cannot be read is kept with
    the problem (the Node-name lookup passes over it; a check reports it)."""
    out = []
    for source in sources:
        found = ConfigSource(source)
        for path in source_files(host, source):
            text = host.read_text_or_none(path)
            if text is None:
                if unreadable and host.is_file(path):
                    found.files.append(ConfigFile(path, problem="could not be read"))
                continue
            configs, problem = node_configs(text)
            found.files.append(ConfigFile(path, configs, problem))
        out.append(found)
    return out


def _spec(doc: Mapping[str, Any], *keys: str) -> Any:
    node: Any = doc.get("spec")
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def hybrid_node_name(doc: Mapping[str, Any]) -> Optional[str]:
    """spec.hybrid.nodeName, stripped; None when absent or not a string."""
    name = _spec(doc, "hybrid", "nodeName")
    return name.strip() if isinstance(name, str) and name.strip() else None


def kubelet_flags(doc: Mapping[str, Any]) -> List[str]:
    """spec.kubelet.flags (a list of strings in NodeConfig); other shapes hold none."""
    flags = _spec(doc, "kubelet", "flags")
    return [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []
