"""nodeadm's partial CRI table: a NodeConfig whose `spec.containerd.config` holds part of the CRI
plugin table (nodeadm writes it to /etc/containerd/config.d/00-nodeadm.toml, which its own
config.toml imports) takes the whole table under containerd 1.x import semantics, so the
settings nodeadm's config.toml made there are gone: its sandbox_image, runc's
SystemdCgroup = true, the registry config_path and the CNI directories.

Sources: containerd docs/man/containerd-config.toml.5.md ("imports": in 1.x an imported file's
plugin table replaces the whole table; containerd 2.x merges tables key by key, RELEASES.md,
config version 3); aws/eks-hybrid internal/containerd/config.template.toml (what nodeadm's
config.toml sets) and nodeadm's e2e cases (the user's config in config.d/00-nodeadm.toml).
Held against the real 1.6, 1.7 and 2.1 `config dump` in
tests/integration/test_containerd_nodeadm_table.py.
"""
from typing import Any, Dict, List, Optional, Tuple

from checks.containerd.config import CRI_V1, CRI_V2, table
from checks.containerd.effective import Context, View

NODEADM_DROPIN = "/etc/containerd/config.d/00-nodeadm.toml"
_MISSING = object()


def _leaves(data: Dict[str, Any], prefix: Tuple[str, ...] = ()) -> Dict[Tuple[str, ...], Any]:
    out: Dict[Tuple[str, ...], Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def partial_cri_table(ctx: Context, view: View) -> Optional[Dict[str, Any]]:
    """What 00-nodeadm.toml's CRI table takes away under 1.x semantics: the root's CRI settings
    (those the drop-in does not set itself) whose effective value is no longer the written
    one (containerd's dump prints its default instead; our own merge has none). None when
    there is nothing to say (no such drop-in, 2.x, or nothing lost)."""
    own = view.own
    if own is None or view.major != 1 or own.errors:
        return None
    # nodeadm's drop-in, by its name (a relocated root keeps it under config.d/)
    name = next((p for p in own.loaded if p.endswith(NODEADM_DROPIN[len("/etc/containerd"):])),
                None)
    dropin = own.files.get(name) if name else None
    key = next((k for k in (CRI_V2, CRI_V1) if table(dropin, "plugins", k)), None)
    if dropin is None or key is None or own.plugin_owner.get(key) != name:
        return None
    root = table(own.files.get(ctx.config_path), "plugins", key)
    theirs = _leaves(table(dropin, "plugins", key))
    effective = _leaves(view.cri)
    lost: List[Dict[str, Any]] = []
    for path, written in _leaves(root).items():
        now = effective.get(path, _MISSING)
        if path not in theirs and now != written:
            lost.append({"key": ".".join(path), "written": written,
                         "effective": None if now is _MISSING else now})
    if not lost:
        return None
    return {"file": name, "table": key, "table_from": ctx.config_path,
            "removes": [x["key"] for x in lost], "lost": lost, "source": view.source}


def describe(found: Dict[str, Any]) -> str:
    return (f"{found['file']} (nodeadm's NodeConfig spec.containerd.config) defines a partial "
            f"[plugins.\"{found['table']}\"] table and containerd 1.x replaces the whole table "
            f"per imported file: it removes {', '.join(found['removes'])} that "
            f"{found['table_from']} set")


FIX = ("Make the NodeConfig's spec.containerd.config a complete CRI table (carry over nodeadm's "
       "sandbox_image, the runc runtime with SystemdCgroup = true, registry config_path and the "
       "cni bin_dir/conf_dir), then re-run `nodeadm init`; or run containerd 2.x, which merges "
       "imported tables key by key.")
