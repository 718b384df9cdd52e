"""Latency of one listwise LLM call vs the passage length it is shown (the cascade's lever):
embedded 0.5B on 2 threads, no reply cache, 8 SciFact test queries' BM25 top 5 per
``max_passage_chars`` after a warm-up call. Writes the ``listwise-latency`` section of
docs/benchmarks.md (its text: bench/sections/listwise-latency.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import DATA, ROOT, header, publish_tables, table

CHARS, CALLS = (600, 300, 150), 8


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.llm.base import ChatParams
    from intentrank.llm.embedded import LlamaCppLLM
    from intentrank.rerank.listwise import ListwiseReranker
    from intentrank.retrieve.retrievers import BM25Retriever

    queries = load_dataset(DATA / "scifact").split("test")[0][:CALLS + 1]
    index = Index.open(ROOT / "indexes" / "scifact")
    top5 = [r.doc_ids[:5] for r in BM25Retriever(index, 5).run(queries).rankings]
    llm = LlamaCppLLM()
    load = llm.load()
    rows = []
    for chars in CHARS:
        stage, calls = ListwiseReranker(index, llm, max_passage_chars=chars), []
        for q, ids in zip(queries, top5, strict=True):
            messages = stage.messages(q.text, [index.doc_text(d) for d in ids])
            start = time.perf_counter()
            reply = llm.chat(messages, ChatParams(max_tokens=stage.max_tokens))
            calls.append((time.perf_counter() - start, reply.prompt_tokens,
                          reply.completion_tokens))
        # the first call of a setting warms the KV cache
        s, p, g = (statistics.mean(column) for column in zip(*calls[1:], strict=True))
        rows.append([chars, f"{s:.2f}", f"{p:.0f}", f"{g:.0f}", f"{(p + g) / s:.0f}"])
    publish_tables("listwise-latency", header() + "\n" + table(
        ["chars/passage", "s/call", "prompt tokens", "generated tokens",
         "prompt + generated tok/s"], rows), {"load": f"{load:.1f}"})


if __name__ == "__main__":
    main()
