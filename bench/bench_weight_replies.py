"""What LLMs answer when asked for per-query modality weights (issue 5, dynamic weights): the
shipped ``modality_weights`` prompt for 30 SciFact test queries (seed 1) through
:class:`DynamicWeightedFusion`, replies from the reply cache when there. Writes the
``weight-replies`` section of docs/benchmarks.md (its text: bench/sections/weight-replies.md).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import DATA, ROOT, header, publish_tables, table

LLMS, QUERIES, SEED = ("embedded", "llamacpp:qwen2.5-coder-1.5b"), 30, 1


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    from intentrank.data.dataset import load_dataset
    from intentrank.fuse.dynamic import DynamicWeightedFusion, validate_weights
    from intentrank.index import Index
    from intentrank.llm.client import load_llm
    from intentrank.retrieve.retrievers import DenseRetriever, GraphRetriever, sparse_retriever
    from intentrank.types import EventKind, Trace

    queries, _ = load_dataset(DATA / "scifact").sample("test", QUERIES, seed=SEED)
    index = Index.open(ROOT / "indexes" / "scifact")
    branches = [DenseRetriever(index), sparse_retriever(index), GraphRetriever(index)]
    rows = []
    for spec in LLMS:
        fusion, trace = DynamicWeightedFusion(branches, load_llm(spec)), Trace()
        examples = {validate_weights(json.loads(ex.reply)) for ex in fusion.contract.examples}
        for q in queries:
            fusion.weights_for(q.text, q.id, trace)
        weights = collections.Counter(tuple(e.details["weights"]) for e in trace.events
                                      if e.kind == EventKind.WEIGHTS
                                      and e.details["source"] == "llm")
        reasons = collections.Counter(e.details["detail"] or e.details["reason"]
                                      for e in trace.events if e.kind == EventKind.FALLBACK)
        why = "; ".join(f"{r}: {c}" for r, c in reasons.most_common(3)) or "-"
        counters = trace.stage(fusion.name).counters  # cached replies: the seconds they took
        cold = counters.get("llm_seconds", 0) + counters.get("llm_cached_seconds", 0)
        rows.append([spec, f"{weights.total()}/{len(queries)}",
                     f"{reasons.total()} ({why})", len(weights),
                     sum(c for w, c in weights.items() if w in examples),
                     ", ".join(f"{w} x{c}" for w, c in weights.most_common(2)) or "-",
                     f"{cold / len(queries):.2f}"])
    publish_tables("weight-replies", header() + "\n" + table(
        ["LLM", "valid", "fallbacks (reasons)", "distinct LLM weight vectors",
         "copies of a prompt example", "most common LLM reply", "s/query (cold)"], rows))


if __name__ == "__main__":
    main()
