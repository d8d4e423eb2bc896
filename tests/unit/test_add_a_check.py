"""docs/adding-a-check.md's three steps are enough: its worked example, applied to a copy of the
repository (the module, the registry line, the fixtures), then the generator, gives a tree where
the contract test and the docs drift test pass, and the files that changed are exactly those
three places plus the two generated files."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import yaml

from tests.conftest import REPO

DOC = REPO / "docs" / "adding-a-check.md"
CHECK_ID = "nvidia-uvm-loaded"
MODULE = "checks/nvidia_uvm_loaded.py"
BUNDLES = ("nvidia-uvm-loaded-ok", "nvidia-uvm-loaded-not-loaded")
TESTS = ("tests/checks/test_contract.py", "tests/unit/test_check_docs_drift.py")
TIMEOUT_S = 300  # each pytest run over the copy; the contract test runs every bundle once


def _blocks():
    """The doc's fenced blocks whose info string names a file: {path: text}."""
    found = re.findall(r"^```\w+ (\S+)\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.M | re.S)
    return dict(found)


def _files(root):
    """path -> sha256 of every file (and symlink target) under root, skipping caches."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = "link:" + os.readlink(p)
                continue
            with open(p, "rb") as f:
                out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def _copy_repo(dest):
    """The working tree as git sees it (tracked and untracked, not ignored) into dest."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
        capture_output=True, check=True, timeout=60,
    ).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if not os.path.lexists(src):
            continue  # deleted in the working tree, still in the index
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)


def _pytest(root, junit):
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
         *TESTS],
        cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        bad = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        outcomes[name] = "failed" if bad else "skipped" if skipped else "passed"
    return res, outcomes


def _apply_recipe(root, blocks):
    # 1. The module.
    (root / MODULE).write_text(blocks[MODULE], encoding="utf-8")
    # 2. The registry line: the import after the last check import, the entry last in order.
    registry = root / "checks" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    import_line, entry = [line for line in blocks["checks/registry.py"].splitlines() if line]
    lines = text.splitlines(keepends=True)
    last_import = max(i for i, line in enumerate(lines) if line.startswith("from checks."))
    lines.insert(last_import + 1, import_line + "\n")
    text = "".join(lines)
    start = text.index("ALL_CHECKS: ")
    close = text.index("\n)", start)
    registry.write_text(text[:close] + "\n" + entry + text[close:], encoding="utf-8")
    # 3. The fixtures: copies of the nearest bundle with the one file changed.
    for name in BUNDLES:
        dest = root / "tests" / "fixtures" / "bundles" / name
        shutil.copytree(root / "tests" / "fixtures" / "bundles" / "host-os-debian12", dest,
                        symlinks=True)
        modules = f"tests/fixtures/bundles/{name}/root/proc/modules"
        (root / modules).write_text(blocks[modules], encoding="utf-8")
        meta = yaml.safe_load((dest / "bundle.yaml").read_text(encoding="utf-8"))
        meta["hostname"] = name
        meta["description"] = f"{CHECK_ID}: {name[len(CHECK_ID) + 1:]} (synthetic)"
        meta["provenance"].append({"file": "root/proc/modules", "source":
                                   "synthetic: /proc/modules lines in the format proc(5) "
                                   "describes"})
        (dest / "bundle.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    provenance = root / "tests" / "fixtures" / "PROVENANCE.md"
    body = provenance.read_text(encoding="utf-8")
    provenance.write_text(body.rstrip("\n") + "\n" + blocks["tests/fixtures/PROVENANCE.md"],
                          encoding="utf-8")


def test_a_check_added_by_the_recipe_passes_the_contract_and_touches_three_places(tmp_path):
    blocks = _blocks()
    assert {MODULE, "checks/registry.py", "tests/fixtures/PROVENANCE.md"} <= set(blocks)
    assert all(f"tests/fixtures/bundles/{b}/root/proc/modules" in blocks for b in BUNDLES)
    root = tmp_path / "repo"
    _copy_repo(root)
    assert (root / "checks" / "registry.py").is_file()
    # What the checkout's own tests say before the change: the copy must not do worse.
    _, before = _pytest(REPO, tmp_path / "before.xml")
    assert before, "the contract and drift tests did not run in the checkout"
    pristine = _files(root)

    _apply_recipe(root, blocks)
    gen = subprocess.run([sys.executable, "scripts/gen-check-docs"], cwd=root,
                         capture_output=True, text=True, timeout=TIMEOUT_S,
                         env={**os.environ, "PYTHONPATH": str(root),
                              "PYTHONDONTWRITEBYTECODE": "1"})
    assert gen.returncode == 0, gen.stdout + gen.stderr

    changed = {p for p, h in _files(root).items() if pristine.get(p) != h}
    changed |= {p for p in pristine if not (root / p).exists() and not (root / p).is_symlink()}
    places = {
        "module": {MODULE},
        "registry": {"checks/registry.py"},
        "fixtures": {p for p in changed if p.startswith("tests/fixtures/bundles/nvidia-uvm-loaded-")}
        | {"tests/fixtures/PROVENANCE.md"},
        "generated": {"docs/checks.md", "README.md"},
    }
    assert changed == set().union(*places.values()), sorted(changed)
    assert all(changed & files for files in places.values())

    res, after = _pytest(root, tmp_path / "after.xml")
    new_check = {name: o for name, o in after.items() if CHECK_ID in name}
    # The contract's per-check tests ran for the new check (pass, codes, declared codes).
    assert len(new_check) >= 4 and set(new_check.values()) == {"passed"}, new_check
    drift = {name: o for name, o in after.items() if "test_check_docs_drift" in name}
    assert drift and set(drift.values()) == {"passed"}, drift
    # Anything that fails in the copy already fails in the checkout (a family's codes still
    # missing): the new check breaks nothing.
    newly_failing = [n for n, o in after.items() if o != "passed" and before.get(n) == "passed"]
    assert newly_failing == [], res.stdout[-3000:]
    assert set(before) - set(after) == set()

    doc = (root / "docs" / "checks.md").read_text(encoding="utf-8")
    section = doc.split(f"\n## {CHECK_ID}\n", 1)[1].split("\n## ", 1)[0]
    assert "| `uvm-not-loaded` | fail |" in section and "`nvidia-uvm-loaded-not-loaded`" in section
    unreadable = next(line for line in section.splitlines()
                      if line.startswith("| `modules-unreadable` | unknown |"))
    # Every bundle but the two new ones lacks /proc/modules: six named, the rest counted.
    others = len(list((root / "tests" / "fixtures" / "bundles").glob("*/bundle.yaml"))) - 2
    assert unreadable.endswith(f" and {others - 6} more |"), unreadable
    assert f"| [`{CHECK_ID}`](docs/checks.md#{CHECK_ID}) |" in (root / "README.md").read_text()
