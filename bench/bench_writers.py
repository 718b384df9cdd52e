"""Two LLM writers of the same generated question set compared (issue 13).

    .venv/bin/python bench/bench_writers.py cranfield runs/writers-0.5b/cranfield \
        runs/writers-1.5b/cranfield

Both sets are ``intentrank generate`` runs that differ only in ``--llm``, so attempt i draws
the same document for both; the measures and tests: bench/sections/writers.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_generated import generation_summary, open_index
from report import ROOT, header, publish, save_json, table

DEPTH = 100
MEASURES = ("bm25 R@10", "bm25 R@100", "dense R@10", "dense R@100", "copied pairs",
            "words in source")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("collection", help="the collection the sets were generated from "
                   "(its index: indexes/<collection>, built if missing)")
    p.add_argument("sets", nargs=2, type=Path, help="two generated set folders, same "
                   "settings, different --llm")
    return p.parse_args(argv)


def source_measures(idx: Any, kept: dict[int, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per measure of :data:`MEASURES`, per attempt number (as a string, the JSON key): 1/0
    recall of the source document, or the question's share of content-word pairs / content
    words found in the source."""
    from intentrank.generate.filters import content_words, copied_share

    order = sorted(kept)
    texts = [kept[i]["question"] for i in order]
    out: dict[str, dict[str, float]] = {m: {} for m in MEASURES}
    for leg, search in (("bm25", idx.search_bm25), ("dense", idx.search_dense)):
        for i, hits in zip(order, search(texts, DEPTH), strict=True):
            ranked = [idx.ids[r] for r in hits.rows]
            source = kept[i]["documents"][0]
            for k in (10, 100):
                out[f"{leg} R@{k}"][str(i)] = float(source in ranked[:k])
    for i in order:
        question, doc = kept[i]["question"], idx.doc_text(kept[i]["documents"][0])
        out["copied pairs"][str(i)] = copied_share(question, doc)
        words, known = content_words(question), set(content_words(doc))
        out["words in source"][str(i)] = sum(w in known for w in words) / max(1, len(words))
    return out


def compare(collection: str, roots: list[Path], samples: int = 6) -> dict[str, Any]:
    """Both writers' counts, speed and per-attempt measures over their kept
    single-document attempts, paired over the attempts both kept (``samples`` of them side
    by side)."""
    from intentrank.measures.significance import paired_test

    idx = open_index(collection)
    writers, kept = [], []
    for root in roots:
        if not (root / "attempts.jsonl").is_file() or not (root / "generation.json").is_file():
            raise SystemExit(f"{root}: not a generated set (attempts.jsonl and generation.json "
                             "from intentrank generate)")
        attempts = [json.loads(x) for x in (root / "attempts.jsonl").open(encoding="utf-8")]
        kept.append({a["attempt"]: a for a in attempts
                     if a["status"] == "kept" and len(a["documents"]) == 1})
        info = {k: v for k, v in generation_summary(root).items() if k != "samples"}
        minutes = sum(a["seconds"] for a in attempts) / 60
        measures = source_measures(idx, kept[-1])
        writers.append({"set": str(root), **info, "kept_single": len(kept[-1]),
                        "kept_per_minute": len(kept[-1]) / minutes if minutes else None,
                        "measures": measures, "means": {
                            m: sum(v.values()) / len(v) if v else None
                            for m, v in measures.items()}})
    a, b = writers
    if a["attempts"] != b["attempts"]:
        raise SystemExit(f"the sets ran {a['attempts']} and {b['attempts']} attempts: "
                         "compare sets of the same attempts (--max-attempts)")
    both = sorted(set(kept[0]) & set(kept[1]))
    paired = {}
    for m in MEASURES:
        x, y = ({str(i): w["measures"][m][str(i)] for i in both} for w in writers)
        paired[m] = {"a": sum(x.values()) / len(both) if both else None,
                     "b": sum(y.values()) / len(both) if both else None,
                     "p": paired_test(x, y, m).p_randomization if len(both) > 1 else None}
    side = [{"attempt": i, "document": kept[0][i]["documents"][0],
             "questions": [k[i]["question"] for k in kept]} for i in both[:samples]]
    return {"collection": collection, "writers": writers, "both_kept": len(both),
            "paired": paired, "side_by_side": side}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def markdown(res: dict[str, Any]) -> str:
    a, b = res["writers"]
    p = res["paired"]
    lines = [header(), "",
             f"Two writers of the same generated set on {res['collection']} (same taxonomy, "
             "seed and attempts, so attempt i draws the same document for both). Recall x100 "
             "of the source document among the collection's documents by BM25 and dense "
             "(MiniLM), depth 100; copied pairs = share x100 of the question's content-word "
             "pairs found in the source; words in source = share x100 of its content words "
             "found there. Lower = a question less like its source.", "",
             table(["writer", "attempts", "kept", "rejected", "s/attempt", "kept/min", *MEASURES],
                   [[w["model"], w["attempts"], w["kept_single"],
                     ", ".join(f"{k} {v}" for k, v in w["rejected"].items()) or "-",
                     f"{w['seconds_per_attempt']:.1f}", f"{w['kept_per_minute']:.2f}",
                     *(_x(w["means"][m]) for m in MEASURES)] for w in (a, b)]),
             "", f"Paired over the {res['both_kept']} attempts both writers kept (the same "
             f"source document), {a['model']} vs {b['model']}, p = paired randomization test:",
             "", table(["measure", a["model"], b["model"], "p"], [
                 [m, _x(p[m]["a"]), _x(p[m]["b"]), "-" if p[m]["p"] is None else f"{p[m]['p']:.3f}"]
                 for m in MEASURES]),
             "", f"<details><summary>The same documents, both writers' questions "
                 f"({a['model']} first)</summary>", "",
             *(f"- attempt {s['attempt']}, document {s['document']}: \"{s['questions'][0]}\" / "
               f"\"{s['questions'][1]}\"" for s in res["side_by_side"]), "", "</details>"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    res = compare(args.collection, list(args.sets))
    save_json(ROOT / "runs" / "bench_writers.json", res)
    publish("writers", markdown(res))


if __name__ == "__main__":
    main()
