"""Are the generator's LLM checks informative with the embedded model? (issue 13)

    .venv/bin/python bench/bench_generation_checks.py     # needs runs/generated/cranfield

Each model of ``--llm`` (default: the embedded 0.5B and the 1.5B) gets its own tables.

Support check (``check_support``) on the kept single-document questions, each with its own
answer, the next question's and a made-up one; one-document check (``check_answerable``) on
each document of the kept two-document questions and on nonsense questions; beside each
verdict, the lexical support share the default filter uses.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lib.results import ROOT, header, open_index, publish, table

SET = "runs/generated/cranfield"
MADE_UP = "The value is 42 kilograms per second, measured on Mars in 1850."
NONSENSE = ["What is the boiling point of water on Mars in winter?",
            "Who won the football world cup in 1954?",
            "How many legs does a spider have?"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llm", nargs="+", default=["embedded", "llamacpp:qwen2.5-coder-1.5b"],
                   help="models to check, each in its own tables")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)

    from intentrank.errors import IntentrankError
    from intentrank.llm.client import load_llm

    try:
        llms = [load_llm(spec) for spec in args.llm]
    except IntentrankError as exc:
        p.error(f"--llm: {exc}")
    kept = [a for a in map(json.loads, (ROOT / SET / "attempts.jsonl").open(encoding="utf-8"))
            if a["status"] == "kept"]
    idx = open_index("cranfield")
    text = {d: idx.doc_text(d)[:1500] for a in kept for d in a["documents"]}
    tables = [check(llm, [a for a in kept if a["kind"] == "single"],
                    [a for a in kept if a["kind"] == "pair"], text) for llm in llms]
    publish("generation-checks", header() + "\n" + "\n\n".join(tables), not args.no_write)


def check(llm: Any, single: list[dict], pairs: list[dict], text: dict[str, str]) -> str:
    """One model's support and one-document checks, as two Markdown tables."""
    from intentrank.generate.filters import support_share
    from intentrank.llm.step import run_step

    def verdicts(prompt: str, key: str, inputs: list[dict[str, str]]) -> list[float]:
        return [float(isinstance(r.value, dict) and r.value.get(key) is True)
                for r in run_step(llm, prompt, inputs, fallback=lambda v: None, stage=prompt,
                                  structured=True)]

    cases = [(kind, text[a["documents"][0]], a["question"], answer)
             for i, a in enumerate(single) for kind, answer in (
                 ("right", a["answer"]),
                 ("another question's answer", single[(i + 1) % len(single)]["answer"]),
                 ("made up", MADE_UP))]
    rows: dict[str, dict[str, list[float]]] = {}
    for (kind, doc, _, ans), yes in zip(cases, verdicts("check_support", "supported", [
            {"documents": f"Document:\n{d}", "question": q, "answer": ans}
            for _, d, q, ans in cases]), strict=True):
        row = rows.setdefault(kind, {"yes": [], "share": []})
        row["yes"].append(yes)
        row["share"].append(support_share(ans, [doc]))
    alone = [("one document of a two-document question", text[d], a["question"])
             for a in pairs for d in a["documents"]]
    alone += [("nonsense question", text[a["documents"][0]], q)
              for a in single[:3] for q in NONSENSE]
    arows: dict[str, list[float]] = {}
    for (kind, _, _), yes in zip(alone, verdicts("check_answerable", "answerable", [
            {"document": d, "question": q} for _, d, q in alone]), strict=True):
        arows.setdefault(kind, []).append(yes)
    return "\n\n".join([f"- model: {llm.model}; set: {SET}", table(
        ["support check: answer", "cases", "LLM says supported", "lexical share min-max",
         "share >= 0.5 (kept by default)"],
        [[kind, len(r["yes"]), int(sum(r["yes"])), f"{min(r['share']):.2f}-{max(r['share']):.2f}",
          sum(s >= 0.5 for s in r["share"])] for kind, r in rows.items()]), table(
        ["one-document check: question", "cases", "LLM says answerable alone"],
        [[kind, len(ys), int(sum(ys))] for kind, ys in arows.items()])])


if __name__ == "__main__":
    main()
