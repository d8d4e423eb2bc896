"""containerd's *effective* configuration: the root file plus its imports, merged the way the
installed containerd merges them.

Sources (containerd/containerd, cmd/containerd/server/config/config.go, read 2026-11):
- Imports are loaded breadth first from the root file; an import is made absolute against the
  importing file's directory and globbed only when it contains ``*`` (filepath.Glob, sorted);
  a file already loaded is skipped; an explicit import that does not exist stops containerd.
- 1.x (``mergo.Merge(WithOverride, WithAppendSlice)`` over ``Plugins map[string]toml.Tree``):
  a plugin table defined in an imported file *replaces* the whole table of that plugin, so a
  drop-in that sets one CRI key drops every CRI setting made before it. Verified against
  Debian's containerd 1.6.20 and trixie's 1.7.24 ``config dump`` in tests/integration.
- 2.x (``Plugins map[string]interface{}``): plugin tables are merged key by key (deep merge;
  lists replaced); a file's non-zero ``version`` overrides the one merged so far, a version
  0/1 file is migrated to it first; the merged config is then migrated to version 3
  (checks/containerd/migrate.py). containerd's own test
  TestMergingPluginsWithTwoCriRuntimeDropInConfigs publishes the expected merge; Debian
  forky's containerd 2.1.9 ``config dump`` is the oracle in tests/integration.
- Layouts: version 2 keeps runtimes under ``plugins."io.containerd.grpc.v1.cri".containerd``;
  version 3 (containerd 2.x) under ``plugins."io.containerd.cri.v1.runtime".containerd``;
  version 1 (or none) in 1.x under ``plugins.cri``.
"""

import copy
import posixpath
import re
import sys
from typing import Any, Dict, List, Optional, Set, Tuple

from agent.records import field, record
from checks.base import HostView
from checks.containerd.migrate import CRI_V1 as CRI_V1  # re-exported: the checks use them
from checks.containerd.migrate import CRI_V2 as CRI_V2
from checks.containerd.migrate import CRI_V3_RUNTIME as CRI_V3_RUNTIME
from checks.containerd.migrate import migrate_to_v3
from checks.containerd.snap import snap_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the 3.9 unit run
    import tomli as tomllib

MAX_FILES = 64  # a loop of globbed imports must not run forever on a hostile tree
# Where drop-ins live on the hosts we support (nodeadm: config.d, nvidia-ctk >= 1.18.1
# and Canonical Kubernetes: conf.d); scanned to explain a handler that is defined but not
# imported.
DROPIN_GLOBS = ("/etc/containerd/conf.d/*.toml", "/etc/containerd/config.d/*.toml")
# 1.x sections that mergeConfig replaces per key, like plugins.
_REPLACED_SECTIONS = ("plugins", "stream_processors", "proxy_plugins", "timeouts")


# TOML items (keys, table headers, array items), counted from "=", "[" and "," before parsing
# (strings can only make the count larger). tomllib costs ~2 KiB per table: a 3.9 MB file of
# empty tables took `check --bundle` to 820 MiB and 39 s here (20,000 tables: 84 MiB); the
# unit's cap is 128 MiB.
# `containerd config default` has ~300 items; a config with many registries a few thousand.
MAX_TOML_ITEMS = 10_000


def parse_toml(text: str, path: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(data, None) or (None, "path: problem (at line L, column C)")."""
    items = text.count("=") + text.count("[") + text.count(",")
    if items > MAX_TOML_ITEMS:
        return None, f"{path}: invalid TOML: more than {MAX_TOML_ITEMS} keys, tables and items"
    try:
        return tomllib.loads(text), None
    except tomllib.TOMLDecodeError as exc:
        return None, f"{path}: invalid TOML: {exc}"
    except (RecursionError, ValueError) as exc:  # deeply nested arrays, odd input
        return None, f"{path}: invalid TOML: {type(exc).__name__}"


# Bundles collected before structural redaction hold `password = REDACTED` (bare, no longer
# TOML); quoting it back keeps such a config parseable (the value is gone anyway). Current
# bundles always hold valid TOML (docs/bundle-format.md).
_REDACTED = re.compile(r"(?m)^(\s*[\w.\"'-]+\s*=\s*)REDACTED(,?)\s*$")


def unredact(text: str) -> str:
    return _REDACTED.sub(r'\1"REDACTED"\2', text) if "REDACTED" in text else text


def read_config(host: HostView, path: str) -> Optional[str]:
    text = host.read_text_or_none(path)
    return unredact(text) if text is not None and not host.is_live else text


def table(data: Any, *keys: str) -> Dict[str, Any]:
    """The nested table at ``keys``, or {} when absent or not a table."""
    cur = data
    for key in keys:
        cur = cur.get(key) if isinstance(cur, dict) else None
    return cur if isinstance(cur, dict) else {}


def config_version(data: Dict[str, Any]) -> int:
    v = data.get("version", 0)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def resolve_imports(host: HostView, parent: str, imports: Any) -> List[str]:
    """containerd's resolveImports, against the host root."""
    out: List[str] = []
    if not isinstance(imports, list):
        return out
    for item in imports:
        if not isinstance(item, str) or not item:
            continue
        path = posixpath.normpath(item)
        if not path.startswith("/"):
            path = posixpath.normpath(posixpath.join(posixpath.dirname(parent), path))
        if "*" in path:
            try:
                out.extend(sorted(host.glob(path)))
            except ValueError:  # a wildcard in a directory component: not supported here
                continue
        else:
            out.append(path)
    return out


def _merge_1x(dst: Dict[str, Any], src: Dict[str, Any], owner: Dict[str, str], path: str) -> None:
    for key, value in src.items():
        if key in _REPLACED_SECTIONS and isinstance(value, dict):
            section = dst.get(key)
            if not isinstance(section, dict):
                section = dst[key] = {}
            for name, sub in value.items():
                section[name] = copy.deepcopy(sub)
                if key == "plugins":
                    owner[name] = path
        elif isinstance(value, list) and isinstance(dst.get(key), list):
            dst[key] = dst[key] + copy.deepcopy(value)  # WithAppendSlice
        elif isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge_1x(dst[key], value, {}, path)
        elif value not in ("", 0, False, [], {}) or key not in dst:  # mergo: empty never wins
            dst[key] = copy.deepcopy(value)


def deep_merge(dst: Dict[str, Any], src: Dict[str, Any]) -> None:
    """containerd 2.x: maps merged key by key, anything else replaced."""
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            deep_merge(dst[key], value)
        else:
            dst[key] = copy.deepcopy(value)


@record
class Effective:
    """The merged configuration and how it came to be."""

    major: int  # merge semantics used: 1 or 2
    version: int = 0  # the merged config's `version`
    merged: Dict[str, Any] = field(default_factory=dict)
    loaded: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)  # fatal to containerd: parse errors etc.
    plugin_owner: Dict[str, str] = field(default_factory=dict)  # 1.x: which file won a plugin
    files: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # parsed, as written
    root_missing: bool = False

    def cri_key(self) -> str:
        if self.version >= 3:
            return CRI_V3_RUNTIME
        if self.major == 1 and self.version <= 1:
            return CRI_V1
        return CRI_V2

    def cri(self) -> Dict[str, Any]:
        return table(self.merged, "plugins", self.cri_key())

    def runtimes(self) -> Dict[str, Any]:
        return table(self.cri(), "containerd", "runtimes")


def load_effective(host: HostView, root_path: str, major: int) -> Effective:
    eff = Effective(major=major)
    pending = [root_path]
    seen: Set[str] = set()
    while pending and len(seen) < MAX_FILES:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        text = read_config(host, path)
        if text is None:
            if path == root_path:
                eff.root_missing = True  # containerd then runs on built-in defaults
            else:
                eff.errors.append(f"{path}: imported but absent (containerd will not start)")
            break
        data, err = parse_toml(text, path)
        if data is None:
            eff.errors.append(err or path)
            break
        eff.files[path] = copy.deepcopy(data)
        version = config_version(data)
        if major >= 2:
            # containerd 2.x: a version 0/1 file is migrated to the version merged so far;
            # any other is merged as written, and its `version` overrides (mergo
            # WithOverride), so a version-3 drop-in under a version-2 root makes the whole
            # config version 3 and the root's version-2 CRI table is then ignored. Held
            # against 2.1's `config dump` in tests/integration/test_containerd_21.py.
            if version < 2 and eff.version >= 2:
                plugins = data.get("plugins")
                if isinstance(plugins, dict) and CRI_V1 in plugins:
                    plugins[CRI_V2] = plugins.pop(CRI_V1)
                data["version"] = 2
                if eff.version >= 3:
                    migrate_to_v3(data)
            deep_merge(eff.merged, data)
        else:
            _merge_1x(eff.merged, data, eff.plugin_owner, path)
        eff.version = config_version(eff.merged)
        eff.loaded.append(path)
        pending.extend(resolve_imports(host, path, data.get("imports")))
    if major >= 2 and eff.loaded and not eff.errors and eff.version < 3:
        # containerd 2.x migrates the merged config to version 3 when it loads it (and so
        # does its `config dump`): a version-2 root is read as version 3.
        migrate_to_v3(eff.merged)
        eff.version = 3
    return eff


def defines_handler(data: Dict[str, Any], handler: str) -> Optional[str]:
    """The plugin key under which a parsed file (as written) defines ``handler``."""
    for key in (CRI_V2, CRI_V3_RUNTIME, CRI_V1):
        if handler in table(data, "plugins", key, "containerd", "runtimes"):
            return key
    return None


def dropin_candidates(host: HostView, root_path: str) -> List[str]:
    base = posixpath.dirname(root_path)
    found: List[str] = []
    local = tuple(f"{base}/{d}*.toml" for d in ("conf.d/", "config.d/", ""))
    for pattern in local + DROPIN_GLOBS:
        try:
            found.extend(p for p in sorted(host.glob(pattern)) if p != root_path)
        except ValueError:
            continue
    return list(dict.fromkeys(found))


DEFAULT_CONFIG = "/etc/containerd/config.toml"


def binary_names(data: Dict[str, Any]) -> List[str]:
    names = []
    for key in (CRI_V2, CRI_V3_RUNTIME, CRI_V1):
        for rt in table(data, "plugins", key, "containerd", "runtimes").values():
            name = table(rt, "options").get("BinaryName")
            if isinstance(name, str) and name.startswith("/"):
                names.append(name)
    return names


def discover(host: HostView) -> Tuple[List[str], List[str]]:
    """For collect: every file the default config imports (recursively, under either merge
    semantics) and the runtime binaries those files name (presence only). The drop-in
    directories are static reads of the checks."""
    reads: List[str] = []
    presence: List[str] = []
    recorded, _ = snap_config(host)  # Canonical Kubernetes' own record of its config
    for root in dict.fromkeys([DEFAULT_CONFIG] + ([recorded] if recorded else [])):
        for major in (1, 2):
            eff = load_effective(host, root, major)
            reads.extend(eff.files)
            for data in eff.files.values():
                presence.extend(binary_names(data))
    for path in dropin_candidates(host, DEFAULT_CONFIG):
        parsed, _ = parse_toml(read_config(host, path) or "", path)
        presence.extend(binary_names(parsed or {}))
    return list(dict.fromkeys(reads)), list(dict.fromkeys(presence))
