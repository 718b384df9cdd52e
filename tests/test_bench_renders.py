"""The render code of the bench scripts whose prose lives in bench/sections/NAME.md (issue 38):
from a raw run rebuilt from the stored tables, a script's ``section`` gives back the tables and
``{{value NAME}}`` numbers that render the published section byte for byte. Nothing is
measured here."""

from __future__ import annotations

import re
from pathlib import Path

from bench_helpers import load_bench

from intentrank.report import sections

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = sections.docs_sections((ROOT / sections.DOCS_FILE).read_text(encoding="utf-8"))


def rendered(name: str, module, raw) -> str:
    """The section as ``module.section(raw)`` renders it with the stored header lines."""
    stored, template = sections.load(ROOT, name)
    module.header = lambda: "".join(f"- {k}: {v}\n" for k, v in stored["meta"][:3])
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
