"""docs/checks.md and the README's check table are generated from the check registry's metadata
(scripts/gen-check-docs); regenerating them in memory must give the committed files."""
import importlib.machinery
import importlib.util

from tests.conftest import REPO


def generator():
    loader = importlib.machinery.SourceFileLoader("gen_check_docs",
                                                  str(REPO / "scripts" / "gen-check-docs"))
    spec = importlib.util.spec_from_loader("gen_check_docs", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_generated_check_docs_match_the_registry():
    drifted = [str(path.relative_to(REPO)) for path, text in generator().generate().items()
               if not path.exists() or path.read_text(encoding="utf-8") != text]
    assert drifted == [], (f"{', '.join(drifted)} out of date: run "
                           ".venv-3.13/bin/python scripts/gen-check-docs")


def test_every_check_has_its_anchor_and_its_readme_row():
    from checks.registry import ALL_CHECKS

    doc = (REPO / "docs" / "checks.md").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    headings = [line[3:] for line in doc.splitlines() if line.startswith("## ")]
    # The alert rules link docs/checks.md#<check id> (prometheus/alerts.yml runbook): a
    # heading that is exactly the id is that anchor.
    assert headings == [c.id for c in ALL_CHECKS]
    for check in ALL_CHECKS:
        assert f"| [`{check.id}`](docs/checks.md#{check.id}) |" in readme
        for failure in check.failures:
            assert f"| `{failure.code}` | {failure.status} |" in doc, (check.id, failure.code)
    alerts = (REPO / "prometheus" / "alerts.yml").read_text(encoding="utf-8")
    assert "docs/checks.md#{{ $labels.check }}" in alerts


def test_the_check_flag_names_the_drifted_file(tmp_path, monkeypatch, capsys):
    mod = generator()
    readme = tmp_path / "README.md"
    doc = tmp_path / "checks.md"
    wanted = mod.generate()
    readme.write_text(wanted[REPO / "README.md"], encoding="utf-8")
    doc.write_text(wanted[REPO / "docs" / "checks.md"] + "hand edit\n", encoding="utf-8")
    monkeypatch.setattr(mod, "REPO", tmp_path)
    monkeypatch.setattr(mod, "generate", lambda: {readme: wanted[REPO / "README.md"],
                                                  doc: wanted[REPO / "docs" / "checks.md"]})
    assert mod.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "checks.md is out of date" in out and "README.md" not in out
    assert doc.read_text(encoding="utf-8").endswith("hand edit\n")  # --check writes nothing
