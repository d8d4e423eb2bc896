"""`gpu-node-agent explain ID`: every source a check reads, the values in force per path, and
the citation of each policy value.

The sources come from the check's own declaration (``reads``, ``presence``, ``runs``,
``facts``, ``uses_gpus``, ``uses_kmsg``, ``discover``), so what explain prints is what
`collect` captures and what the check may touch. Policy citations are the comment block above
each key in checks/policy_v<N>.yaml, where every default cites its source; a value a config
overrides says so instead.
"""
import importlib.resources
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.cli_explain_tables import (
    FACT_SOURCES,
    KERNEL_LOG,
    NVML_FIELDS,
    PATH_RULES,
    POLICY_KEYS,
    SETTING_KEYS,
)
from agent.model import PATHS, Check


def policy_citations(version: int = 1) -> Dict[str, str]:
    """Dotted key -> the comment lines written directly above it in policy_v<N>.yaml (the
    nearest enclosing key's comment when it has none of its own). A version that `extends`
    an earlier one has that one's citations under its own."""
    text = importlib.resources.files("checks").joinpath(f"policy_v{version}.yaml").read_text()
    base = re.search(r"^extends:\s*(\d+)\s*$", text, re.M)
    out: Dict[str, str] = policy_citations(int(base.group(1))) if base else {}
    stack: List[Tuple[int, str]] = []
    pending: List[str] = []
    last_child: Dict[str, str] = {}  # parent key -> the latest child citation written
    key_line = re.compile(r"^(\s*)([A-Za-z0-9_-]+):(?:\s|$)")
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        m = key_line.match(line)
        if not m:
            if not stripped:
                continue
            pending = []  # a list item or a value: its comment is not a key's
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        dotted = ".".join(k for _, k in stack)
        parent = ".".join(k for _, k in stack[:-1])
        # No comment of its own: the previous sibling's (os.deprecated shares the support
        # matrix's source written above os.supported), else the enclosing key's.
        if pending:
            out[dotted] = last_child[parent] = " ".join(pending)
        elif parent and last_child.get(parent):
            out[dotted] = last_child[parent]
        else:
            out[dotted] = out.get(parent, "")
        pending = []
    return out


def _lookup(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if hasattr(data, part):
            data = getattr(data, part)
        elif isinstance(data, Mapping) and part in data:
            data = data[part]
        else:
            return None
    return data


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _short(value: Any, limit: int = 300) -> str:
    text = str(_plain(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _wrap(prefix: str, text: str, width: int = 100) -> List[str]:
    words, lines, line = text.split(), [], prefix
    indent = " " * len(prefix)
    for word in words:
        if len(line) + len(word) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += word + " "
    lines.append(line.rstrip())
    return lines


def header_lines(check: Check) -> List[str]:
    """Title, severity, the gate on each path, interval, requirements and what it is about."""
    lines = [f"{check.id}: {check.title}"]
    lines.append(f"  severity:  {check.severity}")
    lines.append(f"  gates:     {', '.join(check.gates) or '(none)'}")
    lines.append(f"  interval:  {check.interval}")
    if check.requires:
        lines.append(f"  requires:  {', '.join(check.requires)}")
    if check.description:
        lines += _wrap("  about:     ", check.description)
    return lines


def source_lines(check: Check) -> List[str]:
    """Every source the check reads, from its own declaration (what `collect` captures)."""
    lines = ["  sources:"]
    for path in check.reads:
        lines.append(f"    file     {path}")
    for pattern in check.presence:
        lines.append(f"    exists   {pattern} (name, mode and link target; not the content)")
    if check.discover is not None:
        lines.append("    files    named inside the files above (imports, spec paths, the "
                     "library an ld.so.cache names), found at run time")
    for argv in check.runs:
        lines.append(f"    command  {' '.join(argv)}")
    for name in check.facts:
        lines.append(f"    fact     {name}: {FACT_SOURCES.get(name, name)}")
    if check.uses_kmsg:
        lines.append(f"    log      {KERNEL_LOG}")
    if check.uses_gpus:
        for field in NVML_FIELDS.get(check.id, ("the GPU snapshot (docs/gpu-snapshot.md)",)):
            lines.append(f"    NVML     {field}")
    if len(lines) == 1:
        lines.append("    (none)")
    return lines


def value_lines(
    check: Check,
    policy: Any,
    defaults: Any,
    settings: Mapping[str, Any],
    origin: Optional[str],
    citations: Mapping[str, str],
) -> List[str]:
    """The policy and config values the check decides with, per path, each with its source
    (empty when it reads none)."""
    lines: List[str] = []
    keys = POLICY_KEYS.get(check.id, ())
    rule = PATH_RULES.get(check.id)
    settings_keys = SETTING_KEYS.get(check.id, ())
    if keys or rule or settings_keys or check.id == "gpu-xid":
        lines.append("  values in force:")
    if rule is not None:
        label, fn = rule
        for path in PATHS:
            lines.append(f"    {path:<23} {label}: {fn(path)}")
    for key in keys:
        value = _lookup(policy, key)
        default = _lookup(defaults, key)
        plain = _plain(value)
        if key == "driver.branches" and isinstance(plain, Mapping):
            lines += _wrap(f"    policy.{key} = ", "; ".join(
                f"R{b} {i['kind']}"
                + (" ended" if i.get("ended") else f" until {i['end_of_life']}"
                   if i.get("end_of_life") else "")
                for b, i in sorted(plain.items())))
        elif isinstance(plain, Mapping) and set(plain) == set(PATHS):
            lines.append(f"    policy.{key}, per path:")
            for path in PATHS:
                shown = "none (not gated on this path)" if plain[path] is None else plain[path]
                lines.append(f"      {path:<23} {shown}")
        else:
            lines.append(f"    policy.{key} = {_short(value)}")
        if _plain(default) != plain:
            lines.append(f"      source: set in {origin or 'the config'} (default "
                         f"{_short(default, 120)})")
        else:
            cite = citations.get(key) or "(no citation recorded)"
            lines += _wrap("      source: ", cite)
    if check.id == "gpu-xid":
        codes = _lookup(policy, "xid.codes")
        count = f" ({len(codes)} codes)" if isinstance(codes, Mapping) else ""
        lines.append(f"    policy.xid: XID codes and their classes{count}, "
                     "checks/xid_policy_v1.yaml")
        lines += _wrap("      source: ", str(_lookup(policy, "xid.source") or "docs/xid.md"))
    for key, doc in settings_keys:
        value = _lookup(settings, key)
        shown = "unset" if value is None else value
        lines.append(f"    config {key} = {shown} ({origin or 'built-in default'}; {doc})")
    return lines


def failure_lines(check: Check) -> List[str]:
    """Each declared failure code (Check.failures): its status, what was found, the fix and
    the source of the rule; docs/checks.md prints the same list."""
    if not check.failures:
        return ["  failures:  (none declared)"]
    lines = ["  failures:"]
    for f in check.failures:
        lines.append(f"    {f.code} ({f.status})")
        lines += _wrap("      found:  ", f.means)
        lines += _wrap("      fix:    ", f.fix)
        lines += _wrap("      source: ", f.source)
    return lines


def explain_lines(
    check: Check,
    policy: Any,
    defaults: Any,
    settings: Mapping[str, Any],
    origin: Optional[str],
    citations: Mapping[str, str],
) -> List[str]:
    """The text of `explain ID`. ``policy`` is the effective Policy, ``defaults`` the
    built-in one (to tell a config override from a default), ``settings`` the config.
    scripts/gen-check-docs writes docs/checks.md from these same parts."""
    lines = header_lines(check)
    lines += source_lines(check)
    lines += value_lines(check, policy, defaults, settings, origin, citations)
    lines += failure_lines(check)
    lines += _wrap("  fix:       ", check.remediation)
    return lines


def list_lines(checks: Sequence[Check]) -> List[str]:
    return [f"{c.id:<28} {c.severity!s:<9} {c.title}" for c in checks]
