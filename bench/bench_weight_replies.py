"""What LLMs answer when asked for per-query modality weights (issue 5, dynamic weights).

For each LLM spec, the shipped ``modality_weights`` prompt for ``--queries`` SciFact test
queries through :class:`DynamicWeightedFusion`; replies come from the reply cache when there.
Writes the ``weight-replies`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import DATA, ROOT, header, write_section


def prompt_examples(contract) -> set[tuple[float, ...]]:
    """The few-shot answers of the prompt contract, as weight tuples."""
    from intentrank.fuse.dynamic import validate_weights

    return {validate_weights(json.loads(ex.reply)) for ex in contract.examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--llm", action="append",
                    help="LLM specs (default: embedded 0.5B and llamacpp:qwen2.5-coder-1.5b)")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from intentrank.data.dataset import load_dataset
    from intentrank.fuse.dynamic import DynamicWeightedFusion
    from intentrank.index import Index
    from intentrank.llm.client import load_llm
    from intentrank.retrieve.retrievers import DenseRetriever, GraphRetriever, sparse_retriever
    from intentrank.types import EventKind, Trace

    queries, _ = load_dataset(DATA / "scifact").sample("test", args.queries, seed=args.seed)
    index = Index.open(ROOT / "indexes" / "scifact")
    branches = [DenseRetriever(index), sparse_retriever(index), GraphRetriever(index)]
    rows = ["| LLM | valid | fallbacks (reasons) | distinct LLM weight vectors | copies of a "
            "prompt example | most common LLM reply | s/query (cold) |",
            "|---|---|---|---|---|---|---|"]
    for spec in args.llm or ["embedded", "llamacpp:qwen2.5-coder-1.5b"]:
        fusion = DynamicWeightedFusion(branches, load_llm(spec))
        examples, trace = prompt_examples(fusion.contract), Trace()
        for q in queries:
            fusion.weights_for(q.text, q.id, trace)
        events = [e.details for e in trace.events if e.kind == EventKind.WEIGHTS]
        llm_ws = collections.Counter(tuple(e["weights"]) for e in events if e["source"] == "llm")
        reasons = collections.Counter(e.details["detail"] or e.details["reason"]
                                      for e in trace.events if e.kind == EventKind.FALLBACK)
        why = "; ".join(f"{r}: {c}" for r, c in reasons.most_common(3)) or "-"
        counters = trace.stage(fusion.name).counters
        cold = (counters.get("llm_seconds", 0) + counters.get("llm_cached_seconds", 0)) / len(
            queries)  # cached replies count the seconds they took when generated
        common = ", ".join(f"{w} x{c}" for w, c in llm_ws.most_common(2)) or "-"
        rows.append(f"| {spec} | {sum(llm_ws.values())}/{len(queries)} | "
                    f"{sum(reasons.values())} ({why}) | "
                    f"{len(llm_ws)} | {sum(c for w, c in llm_ws.items() if w in examples)} | "
                    f"{common} | {cold:.2f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    write_section("weight-replies", "### LLM-assigned modality weights: what the models answer "
                  "(issue 5)\n\n" + header() + f"\n{args.queries} SciFact test queries (seed "
                  f"{args.seed}), the shipped `modality_weights` prompt, greedy decoding; a reply "
                  "counts as valid when it parses, every weight is in [0, 1] and they sum to 1 "
                  "(±0.01).\n\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
