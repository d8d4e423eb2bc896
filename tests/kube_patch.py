"""Patch semantics of the Kubernetes API double: RFC 7386 JSON merge patch, and the subset of
strategic merge patch Node objects need (k8s.io/apimachinery/pkg/util/strategicpatch/patch.go).

Checked against a real kube-apiserver v1.34.9 (tests/fixtures/kube-apiserver/): a condition a
strategic-merge patch adds goes FIRST in the list, conditions it merges keep their place
(`normalizeElementOrder` / `mergeSortedSlice`: patch items before server-only items, each
pair ordered by the server's order where both are known); an element without the merge key
is an error the server answers 500 with `map: map[...] does not contain declared merge key`.
"""

import copy
import json
from typing import Any, Dict, List, Optional, Tuple

# strategic merge patch: lists merged by key (core/v1 types' patchMergeKey)
_MERGE_KEYS = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("spec", "taints"): "key",
}


class MergeKeyError(ValueError):
    """strategicpatch's `does not contain declared merge key` (the server answers 500)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes, anything else replaces (lists too)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def go_map(value: Dict[str, Any]) -> str:
    """How Go's fmt prints a map[string]interface{} (keys sorted): `map[status:True]`."""

    def one(v: Any) -> str:
        if isinstance(v, dict):
            return go_map(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + " ".join(one(i) for i in v) + "]"
        if v is None:
            return "<nil>"
        return str(v)

    return "map[" + " ".join(f"{k}:{one(value[k])}" for k in sorted(value)) + "]"


def _index(order: List[Dict[str, Any]], item: Dict[str, Any], key: str) -> int:
    for i, e in enumerate(order):
        if isinstance(e, dict) and e.get(key) == item.get(key):
            return i
    return -1


def _merge_sorted(
    left: List[Dict[str, Any]], right: List[Dict[str, Any]], server: List[Any], key: str
) -> List[Dict[str, Any]]:
    """strategicpatch mergeSortedSlice: left = items the patch names, right = server-only."""
    out: List[Dict[str, Any]] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li, ri = _index(server, left[i], key), _index(server, right[j], key)
            if li >= 0 and ri >= 0 and ri < li:
                out.append(right[j])
                j += 1
            else:  # left first when it is earlier, or when either is new to the server
                out.append(left[i])
                i += 1
    return out


def _merge_list(
    original: List[Any], patch: List[Any], key: str, path: Tuple[str, ...]
) -> List[Any]:
    items = [copy.deepcopy(i) for i in original]
    named: List[Any] = []
    for element in patch:
        if not isinstance(element, dict) or key not in element:
            shown = go_map(element) if isinstance(element, dict) else json.dumps(element)
            raise MergeKeyError(f"map: {shown} does not contain declared merge key: {key}")
        at: Optional[int] = next(
            (i for i, e in enumerate(items) if isinstance(e, dict) and e.get(key) == element[key]),
            None,
        )
        if element.get("$patch") == "delete":
            if at is not None:
                items.pop(at)
            continue
        named.append(element[key])
        if at is None:
            items.append({k: v for k, v in element.items() if not k.startswith("$")})
        else:
            items[at] = strategic_merge_patch(items[at], element, path)
    # normalizeElementOrder: the patch's items in patch order, then merged with the
    # server-only items in the server's order.
    patch_items = sorted(
        (e for e in items if isinstance(e, dict) and e.get(key) in named),
        key=lambda e: named.index(e.get(key)),
    )
    server_only = [e for e in items if not (isinstance(e, dict) and e.get(key) in named)]
    return _merge_sorted(patch_items, server_only, original, key)


def strategic_merge_patch(target: Any, patch: Any, path: Tuple[str, ...] = ()) -> Any:
    """Maps merge, null deletes, lists with a patchMergeKey merge element-wise by that key
    (`$patch: delete` removes one), other lists replace; `$setElementOrder/...` and
    `$retainKeys` directives are accepted and ignored (the agent sends neither)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if value is None:
            result.pop(key, None)
            continue
        merge_key = _MERGE_KEYS.get(path[-1:] + (key,)) if path else None
        if isinstance(value, list) and merge_key:
            original = result.get(key)
            result[key] = _merge_list(
                original if isinstance(original, list) else [], value, merge_key, path + (key,)
            )
        else:
            result[key] = strategic_merge_patch(result.get(key), value, path + (key,))
    return result
