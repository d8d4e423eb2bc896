"""The import arrows of docs/architecture.md, read from the code so the picture cannot rot.

The graph is derived with `ast` from every module under agent/ and checks/: each `import` and
`from ... import` at any depth (function-local ones and those under `if TYPE_CHECKING:`
included, relative ones resolved against their package), and `importlib.import_module` /
`__import__` called with a literal name. A `from P import n` is an arrow to P.n when that is a
module, else to P. Only arrows between our own modules count; the standard library and third
parties are another test's business (tests/unit/test_runtime_dependencies.py).

Asserted, each failure naming the importing file, the line and the arrow:
  (a) every import goes along an allowed arrow (ARROWS below, the list docs/architecture.md shows;
      a test holds the two equal);
  (b) no import circle between modules (a strongly connected component of more than one module);
  (c) nothing below the command line imports `checks`;
  (d) agent/'s top level holds only the core and the command-line modules (TOP_LEVEL);
  (e) no module is longer than LINE_BUDGET lines, but for the exceptions named with a reason.
The checker also runs on small synthetic trees, so a forbidden arrow is shown to be caught.
"""
import ast
import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

REPO = Path(__file__).resolve().parents[2]

# Wing -> what it may import besides its own wing: other wings, or single modules (dotted).
# Layers top to bottom; an arrow only ever points down (test_the_arrow_table_is_layered).
ARROWS: Dict[str, Tuple[str, ...]] = {
    "cli": ("checks", "daemon", "outputs", "kube", "host", "xid", "nvml", "safeio", "core"),
    "checks": ("xid", "safeio", "core"),
    "daemon": ("outputs", "safeio", "core"),
    "outputs": ("kube", "safeio", "core"),
    "kube": ("host", "safeio", "core"),
    "host": ("xid", "nvml", "safeio", "core"),
    "xid": ("nvml", "safeio", "core"),
    "nvml": ("safeio", "core"),
    # Three modules of the core that are types only: the errors, the seam's types
    # (CommandResult is the answer of the command runner in safeio),
    # and the record decorator every module's value classes use (agent/records.py).
    "safeio": ("agent.errors", "agent.hostview", "agent.records"),
    "core": (),
}

# The core: the package itself and the modules every wing may build on.
CORE = ("agent", "agent.model", "agent.engine", "agent.engine_replay", "agent.engine_result",
        "agent.report", "agent.errors", "agent.version", "agent.logs", "agent.snapshot",
        "agent.hostview", "agent.driver_layout", "agent.ldcache", "agent.gpu_health", "agent.records")
# The command line, the one composition root: agent.cli, agent.cli_*, the config and explain.
CLI = ("agent.cli", "agent.config", "agent.config_sections", "agent.explain")
CLI_PREFIX = "agent.cli_"
# Folders and the wing they hold (a folder's subfolders belong to it: agent/outputs/node/).
FOLDERS = {
    "agent.daemon": "daemon",
    "agent.outputs": "outputs",
    "agent.kube": "kube",
    "agent.host": "host",
    "agent.xid": "xid",
    "agent.nvml": "nvml",
    "agent.safeio": "safeio",
    "checks": "checks",
}

# (d) agent/'s top level, by name: the core, the command line and the wing folders. A new file
# here is a decision: put it in a wing, or name it here and in docs/architecture.md.
TOP_LEVEL = {
    "__init__.py", "py.typed",
    "model.py", "engine.py", "engine_replay.py", "engine_result.py", "report.py", "errors.py",
    "version.py", "logs.py", "snapshot.py", "hostview.py", "driver_layout.py",
    "ldcache.py", "gpu_health.py", "records.py",
    "cli.py", "cli_run.py", "cli_kube.py", "cli_parser.py", "cli_common.py", "cli_commands.py",
    "cli_explain_tables.py", "config_sections.py",
    "config.py", "explain.py",
    "daemon", "outputs", "kube", "host", "xid", "nvml", "safeio",
}

# (e) Lines per module (physical lines, as `wc -l` counts them). Past this a module holds more
# than one idea; split along a seam that explains itself. An exception names the module and why.
LINE_BUDGET = 300
LINE_BUDGET_EXCEPTIONS: Dict[str, str] = {}


class Arrow(NamedTuple):
    importer: str  # dotted module name
    path: str  # the importer's file, relative to the root
    line: int
    target: str  # the module imported (resolved)


def module_files(root: Path) -> Dict[str, Path]:
    """Every module under agent/ and checks/, by dotted name (a package by its folder's)."""
    found: Dict[str, Path] = {}
    for top in ("agent", "checks"):
        for f in sorted((root / top).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = f
    return found


def _resolve(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The module `name` lands in: itself, else the nearest enclosing package or module
    (`agent.safeio.jsonio.load_json` -> agent.safeio.jsonio); None outside our code."""
    if name.split(".")[0] not in ("agent", "checks"):
        return None
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _package(importer: str, path: Path) -> str:
    return importer if path.name == "__init__.py" else importer.rpartition(".")[0]


def _dynamic_name(node: ast.Call) -> Optional[str]:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def arrows(root: Path) -> Tuple[Dict[str, Path], List[Arrow]]:
    modules = module_files(root)
    found: List[Arrow] = []
    for importer, path in modules.items():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for node in ast.walk(tree):
            names: List[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = _package(importer, path).split(".")
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    names.append(sub if alias.name != "*" and sub in modules else base)
            elif isinstance(node, ast.Call):
                dynamic = _dynamic_name(node)
                names = [dynamic] if dynamic else []
            for name in names:
                target = _resolve(name, modules)
                arrow = Arrow(importer, rel, node.lineno, target or "")
                if target is not None and target != importer and arrow not in found:
                    found.append(arrow)
    return modules, found


def wing(module: str) -> Optional[str]:
    if module in CORE:
        return "core"
    if module in CLI or module.startswith(CLI_PREFIX):
        return "cli"
    for folder, name in FOLDERS.items():
        if module == folder or module.startswith(folder + "."):
            return name
    return None


def arrow_violations(root: Path) -> List[str]:
    """(a): each import along an allowed arrow; a module in no wing is a violation of its own."""
    modules, found = arrows(root)
    problems = [f"{modules[m].relative_to(root).as_posix()}:1: {m} belongs to no wing "
                "(docs/architecture.md, the rooms)" for m in modules if wing(m) is None]
    for a in found:
        source, dest = wing(a.importer), wing(a.target)
        if source is None or dest is None:
            continue  # reported above
        allowed = ARROWS[source]
        if dest == source or dest in allowed or a.target in allowed:
            continue
        problems.append(
            f"{a.path}:{a.line}: {a.importer} imports {a.target}: forbidden arrow "
            f"{source} -> {dest} ({source} may import: {', '.join(allowed) or 'its own wing only'})")
    return problems


def _components(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components (Tarjan, iterative so depth never matters)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    result: List[List[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(sorted(component))
    return result


def circles(root: Path) -> List[str]:
    """(b): import circles between modules, each with the arrows that close it."""
    modules, found = arrows(root)
    graph: Dict[str, Set[str]] = {m: set() for m in modules}
    for a in found:
        graph[a.importer].add(a.target)
    problems = []
    for component in _components(graph):
        if len(component) < 2:
            continue
        members = set(component)
        inside = sorted({f"{a.path}:{a.line}: {a.importer} -> {a.target}" for a in found
                         if a.importer in members and a.target in members})
        problems.append(f"import circle between {', '.join(component)}:\n    " + "\n    ".join(inside))
    return problems


def checks_importers(root: Path) -> List[str]:
    """(c): nothing below the command line imports `checks`."""
    _, found = arrows(root)
    return [f"{a.path}:{a.line}: {a.importer} imports {a.target}: forbidden arrow "
            f"{wing(a.importer)} -> checks (only the command line hands checks down)"
            for a in found
            if wing(a.target) == "checks" and wing(a.importer) not in ("cli", "checks")]


def top_level_strays(root: Path) -> List[str]:
    """(d): agent/'s top level holds only what TOP_LEVEL names."""
    return [f"agent/{p.name}: not the core nor the command line; move it into its wing or name "
            "it in TOP_LEVEL and docs/architecture.md"
            for p in sorted((root / "agent").iterdir())
            if p.name not in TOP_LEVEL and p.name != "__pycache__"]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def over_budget(root: Path, exceptions: Dict[str, str]) -> List[str]:
    """(e): no module over LINE_BUDGET lines, but for the named exceptions; an exception that
    no longer applies is reported too, so the list cannot outlive its reason."""
    modules = module_files(root)
    problems = []
    for path in modules.values():
        rel = path.relative_to(root).as_posix()
        count = _lines(path)
        if count > LINE_BUDGET and rel not in exceptions:
            problems.append(f"{rel}:{LINE_BUDGET + 1}: {count} lines, over the budget of {LINE_BUDGET}")
    paths = {p.relative_to(root).as_posix(): p for p in modules.values()}
    for rel in sorted(exceptions):
        if rel not in paths or _lines(paths[rel]) <= LINE_BUDGET:
            problems.append(f"{rel}: listed in LINE_BUDGET_EXCEPTIONS but not over the budget (any more)")
    return problems


def _report(problems: List[str]) -> str:
    return f"{len(problems)} problem(s):\n" + "\n".join(problems)


# --- the real tree ---------------------------------------------------------------------------


def test_the_scan_sees_the_whole_graph():
    """Not vacuous: the scan finds the modules and the arrows between every wing's modules."""
    modules, found = arrows(REPO)
    assert len(modules) >= 80, sorted(modules)
    assert len(found) >= 150, len(found)
    importing_wings = {wing(a.importer) for a in found}
    assert importing_wings >= {"cli", "checks", "daemon", "outputs", "kube", "host", "xid",
                               "core"}, importing_wings
    # one known arrow of each kind the scanner reads, written by hand from the code
    assert any(a.importer == "agent.cli_common" and a.target == "checks.registry" for a in found)


def test_every_import_goes_along_an_allowed_arrow():
    problems = arrow_violations(REPO)
    assert not problems, _report(problems)


def test_no_import_circle_between_modules():
    problems = circles(REPO)
    assert not problems, _report(problems)


def test_nothing_below_the_command_line_imports_checks():
    problems = checks_importers(REPO)
    assert not problems, _report(problems)


def test_agent_top_level_holds_only_the_core_and_the_command_line():
    problems = top_level_strays(REPO)
    assert not problems, _report(problems)
    for module in CORE[1:] + CLI:
        assert (REPO / (module.replace(".", "/") + ".py")).is_file(), module


def test_no_module_over_the_line_budget():
    problems = over_budget(REPO, LINE_BUDGET_EXCEPTIONS)
    assert not problems, _report(problems)
    for rel, reason in LINE_BUDGET_EXCEPTIONS.items():
        assert len(reason) > 20, f"{rel}: an exception needs its reason"


# --- the table itself and the document -------------------------------------------------------


def test_the_arrow_table_is_layered():
    """The table has no circle of its own: each wing imports only wings listed after it."""
    order = list(ARROWS)
    for source, allowed in ARROWS.items():
        for dest in allowed:
            dest_wing = dest if dest in ARROWS else wing(dest)
            assert dest_wing is not None, dest
            assert order.index(dest_wing) > order.index(source), f"{source} -> {dest} points up"
    assert set(FOLDERS.values()) | {"cli", "core"} == set(ARROWS)


def doc_arrows(text: str) -> Dict[str, Tuple[str, ...]]:
    """The arrow list of docs/architecture.md: the first ```text block under "## The allowed
    arrows", one `wing -> a, b, c` per line; a right side in parentheses means none."""
    assert "\n## The allowed arrows" in text, "no section ## The allowed arrows"
    section = text.split("\n## The allowed arrows", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```text\n(.*?)\n```", section, re.S)
    assert block, "no ```text block under ## The allowed arrows"
    table: Dict[str, Tuple[str, ...]] = {}
    for line in block.group(1).splitlines():
        source, _, rhs = line.partition("->")
        rhs = rhs.strip()
        table[source.strip()] = () if rhs.startswith("(") else tuple(
            part.strip() for part in rhs.split(","))
    return table


def test_the_document_shows_the_same_arrows():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert doc_arrows(text) == ARROWS
    assert f"{LINE_BUDGET} lines" in text


def doc_rooms(text: str) -> Dict[str, int]:
    """The module counts of docs/architecture.md's room table, by folder (`agent/x/`) or, for
    the two rooms on agent/'s top level, by room name."""
    assert "\n## The rooms" in text, "no section ## The rooms"
    section = text.split("\n## The rooms", 1)[1].split("\n## ", 1)[0]
    counts: Dict[str, int] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[3].isdigit():
            folder = cells[1].replace("`", "")
            counts[cells[0] if "top level" in folder else folder] = int(cells[3])
    return counts


def rooms(root: Path) -> Dict[str, int]:
    """Modules per room as the tree holds them (``__init__.py`` not counted)."""
    counts: Dict[str, int] = {}
    for name, path in module_files(root).items():
        if path.name == "__init__.py":
            continue
        folder = path.parent.relative_to(root).as_posix()
        key = {"core": "core", "cli": "command line"}.get(wing(name) or "", folder + "/")
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_the_document_counts_the_rooms_as_the_tree_holds_them():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert doc_rooms(text) == rooms(REPO)
    section = text.split("\n## The rooms", 1)[1].split("\n## ", 1)[0]
    for name in sorted(TOP_LEVEL):
        if name.endswith(".py") and name != "__init__.py":
            assert f"`{name[:-3]}`" in section, f"agent/{name} is not named in ## The rooms"


# --- the checker on synthetic trees: a forbidden arrow IS caught ----------------------------


def _tree(root: Path, files: Dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in ("agent", "checks"):
        (root / top).mkdir(exist_ok=True)
    return root


_CLEAN = {
    "agent/__init__.py": "",
    "agent/errors.py": "class ConfigError(Exception):\n    pass\n",
    "agent/model.py": "from agent.errors import ConfigError\n",
    "agent/cli.py": "import checks.registry\nfrom agent.daemon import service\n",
    "agent/safeio/__init__.py": "",
    "agent/safeio/jsonio.py": "from agent.errors import ConfigError\n",
    "agent/xid/__init__.py": "",
    "agent/xid/state.py": "from agent.safeio import jsonio\n",
    "agent/daemon/__init__.py": "",
    "agent/daemon/service.py": "from .. import model\nfrom ..outputs import render\n",
    "agent/outputs/__init__.py": "",
    "agent/outputs/render.py": "from agent.model import *\n",
    "checks/__init__.py": "",
    "checks/registry.py": "from agent.xid.state import x\nfrom checks import gpu\n",
    "checks/gpu.py": "from agent import model\n",
}


def test_a_clean_synthetic_tree_passes(tmp_path):
    root = _tree(tmp_path, _CLEAN)
    assert arrow_violations(root) == []
    assert circles(root) == []
    assert checks_importers(root) == []
    assert top_level_strays(root) == []
    assert over_budget(root, {}) == []
    _, found = arrows(root)
    # relative imports resolve against the package; `from P import n` lands on P.n if a module
    assert Arrow("agent.daemon.service", "agent/daemon/service.py", 1, "agent.model") in found
    assert Arrow("agent.daemon.service", "agent/daemon/service.py", 2, "agent.outputs.render") in found
    assert Arrow("checks.registry", "checks/registry.py", 1, "agent.xid.state") in found


def test_a_forbidden_arrow_is_caught_with_file_line_and_arrow(tmp_path):
    files = dict(_CLEAN)
    files["agent/xid/monitor.py"] = (
        "import os\n"
        "\n"
        "def main():\n"
        "    from checks.registry import ALL\n"  # function-local, line 4
        "    return ALL\n")
    files["agent/safeio/atomic.py"] = "import agent.model\n"  # safeio may use agent.errors only
    files["agent/outputs/nfd.py"] = (
        "import importlib\n"
        "HOST = importlib.import_module('agent.host.seam')\n")
    files["agent/host/__init__.py"] = ""
    files["agent/host/seam.py"] = "\n\nif True:\n    from agent.outputs import nfd\n"
    root = _tree(tmp_path, files)
    problems = arrow_violations(root)
    assert ("agent/xid/monitor.py:4: agent.xid.monitor imports checks.registry: forbidden arrow "
            "xid -> checks (xid may import: nvml, safeio, core)") in problems
    assert ("agent/safeio/atomic.py:1: agent.safeio.atomic imports agent.model: forbidden arrow "
            "safeio -> core (safeio may import: agent.errors, agent.hostview, agent.records)") in problems
    assert any(p.startswith("agent/outputs/nfd.py:2: agent.outputs.nfd imports agent.host.seam: "
                            "forbidden arrow outputs -> host") for p in problems), problems
    assert any(p.startswith("agent/host/seam.py:4: agent.host.seam imports agent.outputs.nfd: "
                            "forbidden arrow host -> outputs") for p in problems), problems
    assert len(problems) == 4, problems
    assert checks_importers(root) == [
        "agent/xid/monitor.py:4: agent.xid.monitor imports checks.registry: forbidden arrow "
        "xid -> checks (only the command line hands checks down)"]


def test_a_circle_is_caught_even_along_allowed_arrows(tmp_path):
    files = dict(_CLEAN)
    files["agent/outputs/render.py"] = "from agent.outputs import metrics\n"
    files["agent/outputs/metrics.py"] = "def f():\n    import agent.outputs.render\n"
    root = _tree(tmp_path, files)
    assert arrow_violations(root) == []
    assert circles(root) == [
        "import circle between agent.outputs.metrics, agent.outputs.render:\n"
        "    agent/outputs/metrics.py:2: agent.outputs.metrics -> agent.outputs.render\n"
        "    agent/outputs/render.py:1: agent.outputs.render -> agent.outputs.metrics"]


def test_a_stray_top_level_module_and_a_wingless_one_are_caught(tmp_path):
    files = dict(_CLEAN)
    files["agent/daemon_util.py"] = "from agent import model\n"
    root = _tree(tmp_path, files)
    assert top_level_strays(root) == [
        "agent/daemon_util.py: not the core nor the command line; move it into its wing or name "
        "it in TOP_LEVEL and docs/architecture.md"]
    assert arrow_violations(root) == [
        "agent/daemon_util.py:1: agent.daemon_util belongs to no wing (docs/architecture.md, the rooms)"]


def test_a_long_module_and_a_stale_exception_are_caught(tmp_path):
    files = dict(_CLEAN)
    files["agent/xid/state.py"] = "x = 1\n" * (LINE_BUDGET + 1)
    root = _tree(tmp_path, files)
    assert over_budget(root, {}) == [
        f"agent/xid/state.py:{LINE_BUDGET + 1}: {LINE_BUDGET + 1} lines, over the budget of {LINE_BUDGET}"]
    assert over_budget(root, {"agent/xid/state.py": "a reason long enough"}) == []
    assert over_budget(root, {"agent/model.py": "a reason long enough"}) == [
        f"agent/xid/state.py:{LINE_BUDGET + 1}: {LINE_BUDGET + 1} lines, over the budget of {LINE_BUDGET}",
        "agent/model.py: listed in LINE_BUDGET_EXCEPTIONS but not over the budget (any more)"]


def test_the_document_parser_reads_what_it_is_given():
    text = "x\n## The allowed arrows\n\n```text\ncli -> core\ncore -> (own wing only)\n```\n## Next\n"
    assert doc_arrows(text) == {"cli": ("core",), "core": ()}
