"""Every link in the README and docs/ resolves inside the repository: users clone only the
repository, so a link elsewhere is a dead end offline and a design that lives somewhere else.
Public sources are cited as text (a project and a path), never as a link."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# An inline link `[text](target)`, or an autolink `<scheme:...>` (CommonMark 6.5).
LINK = re.compile(r"\]\(([^)\s]+)\)|<([a-z][a-z0-9+.-]*:[^>\s]+)>")


def _links():
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for match in LINK.finditer(doc.read_text(encoding="utf-8")):
            yield doc, match.group(1) or match.group(2)


def test_no_link_leaves_the_repository():
    outside = [f"{doc.relative_to(REPO)}: {target}" for doc, target in _links()
               if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//")]
    assert outside == []


def test_every_relative_link_names_a_file_that_exists():
    missing = []
    for doc, target in _links():
        path = target.split("#", 1)[0]
        if path and not re.match(r"^[a-z][a-z0-9+.-]*:", path):
            resolved = (doc.parent / path).resolve()
            if REPO not in resolved.parents or not resolved.exists():
                missing.append(f"{doc.relative_to(REPO)}: {target}")
    assert missing == []


def test_the_checker_sees_a_markdown_link():
    found = [a or b for a, b in LINK.findall(
        "see [x](https://example.invalid/a), [y](../checks/b.yaml) and <https://example.invalid/c>")]
    assert found == ["https://example.invalid/a", "../checks/b.yaml", "https://example.invalid/c"]
