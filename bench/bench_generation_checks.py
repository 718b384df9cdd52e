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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_generated import open_index
from report import ROOT, header, publish

MADE_UP = "The value is 42 kilograms per second, measured on Mars in 1850."
NONSENSE = ["What is the boiling point of water on Mars in winter?",
            "Who won the football world cup in 1954?",
            "How many legs does a spider have?"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", type=Path, default=ROOT / "runs" / "generated" / "cranfield")
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
    attempts = [json.loads(x) for x in (args.set / "attempts.jsonl").open(encoding="utf-8")]
    kept = [a for a in attempts if a["status"] == "kept"]
    single = [a for a in kept if a["kind"] == "single"]
    pairs = [a for a in kept if a["kind"] == "pair"]
    idx = open_index(args.set.name)
    text = {d: idx.doc_text(d)[:1500] for a in kept for d in a["documents"]}
    lines = [header()]
    for i, llm in enumerate(llms):
        if i:
            lines.append("")
        lines += check(llm, args.set, single, pairs, text)
    publish("generation-checks", "\n".join(lines), not args.no_write)


def check(llm, set_dir: Path, single: list[dict], pairs: list[dict], text: dict[str, str]
          ) -> list[str]:
    """One model's support and one-document checks, as two Markdown tables."""
    from intentrank.generate.filters import support_share
    from intentrank.llm.step import run_step

    cases = []  # (kind, document, question, answer)
    for i, a in enumerate(single):
        doc = text[a["documents"][0]]
        other = single[(i + 1) % len(single)]["answer"]
        cases += [("right", doc, a["question"], a["answer"]),
                  ("another question's answer", doc, a["question"], other),
                  ("made up", doc, a["question"], MADE_UP)]
    support = run_step(llm, "check_support",
                       [{"documents": f"Document:\n{d}", "question": q, "answer": ans}
                        for _, d, q, ans in cases],
                       fallback=lambda v: None, stage="check_support", structured=True)
    rows: dict[str, dict[str, list[float]]] = {}
    for (kind, doc, _, ans), r in zip(cases, support, strict=True):
        row = rows.setdefault(kind, {"yes": [], "share": []})
        row["yes"].append(float(isinstance(r.value, dict) and r.value.get("supported") is True))
        row["share"].append(support_share(ans, [doc]))

    alone = [("one document of a two-document question", text[d], a["question"])
             for a in pairs for d in a["documents"]]
    alone += [("nonsense question", text[a["documents"][0]], q)
              for a in single[:3] for q in NONSENSE]
    answerable = run_step(llm, "check_answerable",
                          [{"document": d, "question": q} for _, d, q in alone],
                          fallback=lambda v: None, stage="check_answerable", structured=True)
    arows: dict[str, list[float]] = {}
    for (kind, _, _), r in zip(alone, answerable, strict=True):
        arows.setdefault(kind, []).append(
            float(isinstance(r.value, dict) and r.value.get("answerable") is True))

    lines = [f"- model: {llm.model}; set: {set_dir.relative_to(ROOT)}", "",
             "| support check: answer | cases | LLM says supported | lexical share min-max "
             "| share >= 0.5 (kept by default) |", "|---|---|---|---|---|"]
    for kind, row in rows.items():
        n, share = len(row["yes"]), row["share"]
        lines.append(f"| {kind} | {n} | {int(sum(row['yes']))} | {min(share):.2f}-"
                     f"{max(share):.2f} | {sum(s >= 0.5 for s in share)} |")
    lines += ["", "| one-document check: question | cases | LLM says answerable alone |",
              "|---|---|---|"]
    for kind, ys in arows.items():
        lines.append(f"| {kind} | {len(ys)} | {int(sum(ys))} |")
    return lines


if __name__ == "__main__":
    main()
