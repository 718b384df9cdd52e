"""The render code of the bench scripts whose prose lives in bench/sections/NAME.md (issue 38):
from a raw run rebuilt from the stored tables, a script's ``section`` gives back the tables and
``{{value NAME}}`` numbers that render the published section byte for byte. Nothing is
measured here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_helpers import load_bench

from intentrank.report import sections

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = sections.docs_sections((ROOT / sections.DOCS_FILE).read_text(encoding="utf-8"))


def rendered(name: str, module, raw) -> str:
    """The section as ``module.section(raw)`` renders it with the stored header lines."""
    stored, template = sections.load(ROOT, name)
    module.header = lambda: "".join(f"- {k}: {v}\n" for k, v in stored["meta"][:3])
    module.machine = lambda: stored["meta"][0][1].split(", no GPU")[0]
    markdown, values = module.section(raw)
    result = {**sections.split(markdown.strip(), name)[0], "values": values,
              "provenance": stored.get("provenance")}
    assert result["tables"] == stored["tables"]
    return sections.render(result, template)


def number(cell: str) -> float:
    return float(cell.strip("()"))


def test_ce_fusion():
    rows = sections.load(ROOT, "ce-fusion")[0]["tables"][0]["rows"]
    setting = re.search(r"depth (\d+), w ([\d.]+), k (\d+)", rows[-1][0])
    raw = {"n_queries": 300, "rows": {n: number(v) for n, v in rows[:-2]},
           "cv": number(rows[-2][1]),
           "cv_choices": [[30, .75, 60], [50, 1, 10], [100, .75, 10], [100, .75, 10],
                          [20, 1, 10]],
           "best_on_test": {"setting": [int(setting[1]), float(setting[2]), int(setting[3])],
                            "nDCG@10": number(rows[-1][1])}}
    assert rendered("ce-fusion", load_bench("bench_ce_fusion"), raw) == PUBLISHED["ce-fusion"]


def test_adapted_dense():
    stored = sections.load(ROOT, "adapted-dense")[0]
    values, raw, name = stored["values"], {}, ""
    for row in stored["tables"][0]["rows"]:
        if row[0]:
            name, key = row[0], load_bench("bench_adapted_dense").slug(row[0])
            t = re.match(r"(.*): (\d+) examples, (\d+) steps \(([\d.]+) of (\d+) epochs planned, "
                         r"stopped by (.*)\), ([\d.]+) min \+ ([\d.]+) min", row[7])
            run = re.match(r"`(.*)` \((.*)\)$", values[f"{key}.run"])
            raw[name] = {"rows": {}, "run": {"command": run[1], "date": run[2]}, "training": {
                "sources": t[1].split("; "), "rows_trained": int(t[2]), "steps": int(t[3]),
                "rows_per_epoch": int(t[2]) / float(t[4]), "epochs": int(t[5]),
                "stopped_by": t[6], "minutes": float(t[7]), "index_minutes": float(t[8]),
                "queries": values[f"{key}.queries"]}}
        zero, tuned = (number(x) / 100 for x in row[6].split(" / "))
        raw[name]["rows"][row[1]] = {
            "zero-shot": {"nDCG@10": number(row[2]) / 100, "Recall@100": zero},
            "fine-tuned": {"nDCG@10": number(row[3]) / 100, "Recall@100": tuned},
            "delta": number(row[4].rstrip("†")) / 100, "p": number(row[5])}
    assert (rendered("adapted-dense", load_bench("bench_adapted_dense"), raw)
            == PUBLISHED["adapted-dense"])


def test_models():
    """tests/bench_runs/models.json: the published run rebuilt from the section's text."""
    raw = json.loads((Path(__file__).parent / "bench_runs" / "models.json").read_text())
    assert rendered("models", load_bench("bench_models"), raw) == PUBLISHED["models"]


def test_bad_inputs_of_the_answers_and_generation_checks_benchmarks(tmp_path, capsys):
    """A --set that is not a generated question set, an unknown --llm: one error line and
    exit 2 before any work, not a traceback."""
    with pytest.raises(SystemExit) as exc:
        load_bench("bench_answers").main(["measure", "--set", str(tmp_path)])
    assert exc.value.code == 2 and "not a generated question set" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        load_bench("bench_generation_checks").main(["--no-write", "--llm", "llamacpp:nope"])
    assert exc.value.code == 2 and "--llm: unknown LLM model 'nope'" in capsys.readouterr().err
