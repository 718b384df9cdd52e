"""Latency of one listwise LLM call vs the passage length it is shown (the cascade's lever).

Embedded 0.5B on 2 threads, no reply cache, ``--calls`` prompts per ``max_passage_chars``
(the first a warm-up). Writes the ``listwise-latency`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import DATA, ROOT, header, write_section


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chars", type=int, action="append", help="passage lengths (600/300/150)")
    ap.add_argument("--calls", type=int, default=8, help="timed calls per setting")
    args = ap.parse_args()
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index
    from intentrank.llm.base import ChatParams
    from intentrank.llm.embedded import LlamaCppLLM
    from intentrank.rerank.listwise import ListwiseReranker
    from intentrank.retrieve.retrievers import BM25Retriever

    queries, _ = load_dataset(DATA / "scifact").split("test")
    queries = queries[: args.calls + 1]
    index = Index.open(ROOT / "indexes" / "scifact")
    top5 = [r.doc_ids[:5] for r in BM25Retriever(index, 5).run(queries).rankings]
    llm = LlamaCppLLM()
    load = llm.load()
    rows = ["| chars/passage | s/call | prompt tokens | generated tokens | prompt + generated "
            "tok/s |", "|---|---|---|---|---|"]
    for chars in args.chars or [600, 300, 150]:
        stage = ListwiseReranker(index, llm, max_passage_chars=chars)
        secs, prompt, gen = [], [], []
        for i, (q, ids) in enumerate(zip(queries, top5, strict=True)):
            messages = stage.messages(q.text, [index.doc_text(d) for d in ids])
            start = time.perf_counter()
            reply = llm.chat(messages, ChatParams(max_tokens=stage.max_tokens))
            if i:  # the first call of a setting warms the KV cache
                secs.append(time.perf_counter() - start)
                prompt.append(reply.prompt_tokens)
                gen.append(reply.completion_tokens)
        s, p, g = statistics.mean(secs), statistics.mean(prompt), statistics.mean(gen)
        rows.append(f"| {chars} | {s:.2f} | {p:.0f} | {g:.0f} | {(p + g) / s:.0f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    write_section("listwise-latency", "### Listwise LLM call vs passage length (issue 5)\n\n"
                  + header() + f"\nEmbedded Qwen2.5-Coder-0.5B Q4_K_M, 2 threads, model load "
                  f"{load:.1f} s (not counted); {args.calls} SciFact test queries, BM25 top-5 "
                  "candidates, no reply cache.\n\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
