"""Patch semantics of the Kubernetes API double: RFC 7386 JSON merge patch, and the subset of
strategic merge patch Node objects need (k8s.io/apimachinery strategicpatch)."""

import copy
from typing import Any, Tuple

# strategic merge patch: lists merged by key (core/v1 types' patchMergeKey)
_MERGE_KEYS = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("spec", "taints"): "key",
}


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


def strategic_merge_patch(target: Any, patch: Any, path: Tuple[str, ...] = ()) -> Any:
    """The subset of strategic merge patch Node objects need: maps merge, null deletes, lists
    with a patchMergeKey merge element-wise by that key (`$patch: delete` removes one), other
    lists replace; `$setElementOrder/...` directives are accepted and ignored."""
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
            items = [copy.deepcopy(i) for i in (result.get(key) or [])]
            for element in value:
                if not isinstance(element, dict) or merge_key not in element:
                    raise ValueError(f"{key}: element without merge key {merge_key!r}")
                at = next(
                    (i for i, e in enumerate(items) if e.get(merge_key) == element[merge_key]), None
                )
                if element.get("$patch") == "delete":
                    if at is not None:
                        items.pop(at)
                elif at is None:
                    items.append({k: v for k, v in element.items() if not k.startswith("$")})
                else:
                    items[at] = strategic_merge_patch(items[at], element, path + (key,))
            result[key] = items
        else:
            result[key] = strategic_merge_patch(result.get(key), value, path + (key,))
    return result
