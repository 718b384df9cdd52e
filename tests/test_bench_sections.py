"""docs/benchmarks.md is rendered from stored results (issue 38): every ``<!-- NAME:start -->``
section comes from ``bench/results/NAME.json`` and the text of ``bench/sections/NAME.md``
through ``intentrank.report.sections``, byte for byte; a section whose raw run was not kept
says so (its provenance) in the published text. Nothing is measured here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.eval.bench_runs import Workspace, plan
from intentrank.eval.benchmarks import load_spec
from intentrank.report import sections

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / sections.DOCS_FILE).read_text(encoding="utf-8")
PUBLISHED = sections.docs_sections(DOCS)
STORED = sections.stored_sections(ROOT)


def test_every_published_section_has_stored_results_and_every_stored_result_a_section():
    assert set(PUBLISHED) == set(STORED), (set(PUBLISHED) ^ set(STORED))
    templates = {p.stem for p in (ROOT / sections.TEMPLATES_DIR).glob("*.md")}
    assert templates == set(STORED)


@pytest.mark.parametrize("name", STORED)
def test_the_stored_result_renders_the_published_section_byte_for_byte(name):
    result, _ = sections.load(ROOT, name)
    assert result["section"] == name
    assert sections.rendered(ROOT, name) == PUBLISHED[name], (
        f"docs/benchmarks.md#{name} differs from what bench/results/{name}.json renders: "
        f"run `intentrank bench --render` for its benchmark, or store the new numbers")


@pytest.mark.parametrize("name", STORED)
def test_a_recovered_section_says_so_and_names_the_command_that_rebuilds_it(name):
    result, _ = sections.load(ROOT, name)
    if result.get("provenance"):
        assert sections.provenance_line(result["provenance"]) in PUBLISHED[name]
        assert "intentrank bench " in result["provenance"]
    else:  # measured by today's scripts: the header names the command, machine and date
        keys = [k for k, _ in result["meta"]]
        assert {"command", "machine", "date"} <= set(keys) or name == "defaults", keys


def test_every_section_is_rendered_by_a_benchmark_of_the_spec():
    spec = load_spec()
    filled = {b.section.name for b in spec.benchmarks.values() if b.section}
    assert set(STORED) <= filled, set(STORED) - filled


# -- the format ---------------------------------------------------------------------------------

SAMPLE = """## A benchmark

- command: `python bench/x.py --n 3`
- machine: 2 cores
- date: 2026-11-26 10:00 UTC

Some prose, with a pipe | in it.

| system | nDCG@10 |
|---|---:|
| bm25 | 0.6863 |
| a \\| b |  |

```
| not | a table |
|---|---|
```

Reading: bm25 wins."""


def test_split_and_render_give_the_text_back():
    result, template = sections.split(SAMPLE, "x")
    assert [k for k, _ in result["meta"]] == ["command", "machine", "date"]
    assert result["tables"] == [{"header": ["system", "nDCG@10"], "rule": "|---|---:|",
                                 "rows": [["bm25", "0.6863"], ["a \\| b", ""]]}]
    assert "{{table 1}}" in template and "0.6863" not in template
    assert "| not | a table |" in template  # inside a code fence: text
    assert sections.render(result, template) == SAMPLE


def test_provenance_is_shown_when_there_is_one_and_leaves_no_gap_when_not():
    template = "## T\n\n{{provenance}}\n\n{{table 1}}"
    table = {"header": ["a"], "rule": "|---|", "rows": [["1"]]}
    plain = sections.render({"tables": [table]}, template)
    assert plain == "## T\n\n| a |\n|---|\n| 1 |"
    shown = sections.render({"tables": [table], "provenance": "recovered"}, template)
    assert shown == "## T\n\n> **Provenance:** recovered\n\n| a |\n|---|\n| 1 |"


def test_a_template_and_result_that_do_not_fit_are_refused():
    with pytest.raises(sections.SectionError, match="asks for table 2"):
        sections.render({"section": "x", "tables": []}, "{{table 2}}")
    table = {"header": ["a"], "rule": "|---|", "rows": []}
    with pytest.raises(sections.SectionError, match="places 0 of 1 stored tables"):
        sections.render({"section": "x", "tables": [table]}, "no placeholder")
    with pytest.raises(sections.SectionError, match="kept for the template's placeholders"):
        sections.split("a {{b}}", "x")


# -- storing and re-rendering through `intentrank bench` ----------------------------------------

SPEC = """benchmarks:
  x:
    description: A benchmark with stored results.
    steps:
      - command: python bench/x.py
        outputs: [bench/results/x.json]
    section: {name: x, render: stored}
"""


def _checkout(tmp_path: Path) -> Path:
    (tmp_path / "bench").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "benchmarks.md").write_text(
        "# Benchmarks\n\n<!-- x:start -->\nold\n<!-- x:end -->\n\nAfter.\n")
    return tmp_path


def test_store_writes_the_json_the_template_and_the_section(tmp_path):
    root = _checkout(tmp_path)
    assert sections.store(root, "x", SAMPLE + "\n") == ""
    stored = json.loads((root / "bench" / "results" / "x.json").read_text())
    assert stored["tables"][0]["rows"][0] == ["bm25", "0.6863"]
    docs = (root / "docs" / "benchmarks.md").read_text()
    assert f"<!-- x:start -->\n{SAMPLE}\n<!-- x:end -->\n\nAfter.\n" in docs
    # a rerun with new numbers keeps the text; changed text is reported
    assert sections.store(root, "x", SAMPLE.replace("0.6863", "0.7000")) == ""
    assert "bench/sections/x.md changed" in sections.store(root, "x", SAMPLE + "\n\nMore.")


def test_a_rerun_keeps_the_hand_written_reading_of_the_template(tmp_path):
    root = _checkout(tmp_path)
    sections.store(root, "x", SAMPLE)
    path = sections.template_path(root, "x")
    path.write_text(path.read_text() + "\n\n<!-- reading -->\nReading by hand.")
    assert sections.store(root, "x", SAMPLE.replace("0.6863", "0.7000")) == ""
    body = sections.docs_sections((root / "docs" / "benchmarks.md").read_text())["x"]
    assert body.endswith("0.7000 |\n| a \\| b |  |\n\n```\n| not | a table |\n|---|---|\n```"
                         "\n\nReading: bm25 wins.\n\n<!-- reading -->\nReading by hand.")


def test_bench_render_rewrites_a_stale_section_and_the_plan_sees_it(tmp_path):
    root = _checkout(tmp_path)
    result, template = sections.split(SAMPLE, "x")
    sections.save(root, "x", result, template)
    spec = load_spec(root / "spec.yaml")
    render_step = [p for p in plan(spec, ["x"], Workspace.at(root)) if p.step.stored_section]
    assert render_step[0].run and "differs from its stored result" in render_step[0].reason
    runner = CliRunner()
    args = ["bench", "x", "--render", "--spec", str(root / "spec.yaml"), "--root", str(root)]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "x: rendered into docs/benchmarks.md" in out.output
    assert sections.docs_sections((root / "docs" / "benchmarks.md").read_text())["x"] == SAMPLE
    assert "unchanged" in runner.invoke(app, args).output
    render_step = [p for p in plan(spec, ["x"], Workspace.at(root)) if p.step.stored_section]
    assert not render_step[0].run
    assert render_step[0].step.command == "intentrank bench x --render"


def test_bench_render_without_stored_results_says_what_to_do(tmp_path):
    root = _checkout(tmp_path)
    shutil.rmtree(root / "bench")
    (root / "bench").mkdir()
    out = CliRunner().invoke(app, ["bench", "x", "--render", "--spec", str(root / "spec.yaml"),
                                   "--root", str(root)])
    assert out.exit_code != 0 and "no stored results for x" in out.output


def test_a_script_whose_prose_is_in_the_template_stores_only_tables_and_values(tmp_path):
    root = _checkout(tmp_path)
    template = "Intro, {{value n}} queries.\n\n{{table 1}}\n\nReading: {{value best}} wins."
    sections.template_path(root, "x").parent.mkdir(parents=True)
    sections.template_path(root, "x").write_text(template)
    measured = "## Title\n\nprose the template has\n\n| a | b |\n|---|---|\n| bm25 | 1 |"
    body = sections.store_tables(root, "x", measured, {"n": "3", "best": "bm25"})
    assert body == "Intro, 3 queries.\n\n| a | b |\n|---|---|\n| bm25 | 1 |\n\nReading: bm25 wins."
    assert sections.template_path(root, "x").read_text() == template
    assert sections.rendered(root, "x") == body
    assert sections.docs_sections((root / "docs" / "benchmarks.md").read_text())["x"] == body
    with pytest.raises(sections.SectionError, match="asks for value 'best'"):
        sections.store_tables(root, "x", measured, {"n": "3"})
