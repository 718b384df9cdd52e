"""Speed of the embedded LLM (Qwen2.5-Coder-0.5B through xllamacpp) and of the LLM client.

    .venv/bin/python bench/bench_llm.py                 # 1 and 2 threads, writes docs
    .venv/bin/python bench/bench_llm.py --threads 1 --no-write

Each thread count runs in its own process; token rates are llama.cpp's own timings; the HTTP
overhead is wall time minus llama.cpp's compute time per call (bench/sections/llm.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import header, publish_tables, run_each_in_subprocess, save_json, table

PROMPTS = [
    "A user searched for: boundary layer transition on a flat plate. Write 3 short follow-up "
    "questions the user might ask next, as a numbered list.",
    "Give five search keywords for 'heat transfer in hypersonic flow' as a JSON array of "
    "strings.",
    "Rewrite this search query to be more specific: 'wing flutter'. Answer with one line.",
    "Summarise in one sentence: the pressure distribution on a slender cone at Mach 6 was "
    "measured and compared with Newtonian theory, showing agreement within 5 percent.",
    "Query: shock wave boundary layer interaction\n\nPassage: measurements of separated flow "
    "ahead of a compression corner at Mach 3.\n\nIs this passage relevant to the query? "
    "Answer yes or no.",
    "List three possible intents behind the query 'jaguar speed' as a numbered list.",
    "Translate the query 'transonic buffet on supercritical airfoils' into a plain-English "
    "question a student might ask.",
    'Return a JSON object {"topic": ..., "aspects": [...]} for the query "creep of titanium '
    'alloys at high temperature".',
    "Explain in two sentences what a laminar separation bubble is.",
    "Write a numbered list of 4 sub-questions needed to answer: how do vortex generators "
    "delay stall?",
]
MAX_TOKENS = 64


def _compute_s(raw: dict) -> float:
    t = raw.get("timings") or {}
    return (t.get("prompt_ms", 0.0) + t.get("predicted_ms", 0.0)) / 1000


def run_one(n_threads: int) -> dict:
    from intentrank.llm import LlamaCppLLM, LLMClient, OpenAICompatibleLLM, gguf_path, user
    from intentrank.llm.base import ChatParams
    from intentrank.rerank.judge import judge_messages

    gguf_path()  # assembled (or trusted) before timing the load
    llm = LlamaCppLLM(n_threads=n_threads)
    load_s = llm.load()
    msgs = [user(p) for p in PROMPTS]
    with tempfile.TemporaryDirectory() as tmp:
        client = LLMClient(llm, cache=Path(tmp) / "cache.sqlite")
        start = time.perf_counter()
        replies = [client.chat(m, max_tokens=MAX_TOKENS) for m in msgs]
        cold = time.perf_counter() - start
        start = time.perf_counter()
        hits = [client.chat(m, max_tokens=MAX_TOKENS) for m in msgs]
        warm = time.perf_counter() - start
    assert all(h.cached for h in hits)
    tim = [r.raw["timings"] for r in replies]
    prompt_n, prompt_ms = sum(t["prompt_n"] for t in tim), sum(t["prompt_ms"] for t in tim)
    gen_n, gen_ms = sum(t["predicted_n"] for t in tim), sum(t["predicted_ms"] for t in tim)

    # judge: one query, 8 passages sharing the query prefix (llama.cpp reuses its KV cache)
    passage = ("measurements of surface heat transfer rates on a flat plate at mach 7 are "
               "compared with laminar boundary layer theory; agreement is within 10 percent. ")
    judge_msgs = [judge_messages("hypersonic heat transfer", f"[{i}] {passage * 2}")
                  for i in range(8)]
    start = time.perf_counter()
    judged = [llm.chat(m, ChatParams(max_tokens=2, logprobs=10)) for m in judge_msgs]
    judge_s = (time.perf_counter() - start) / len(judge_msgs)
    cached_frac = statistics.mean(
        (r.raw["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        / max(r.prompt_tokens, 1) for r in judged[1:])

    # overhead per call outside llama.cpp's compute: in-process vs HTTP (same short prompts)
    http = OpenAICompatibleLLM(llm.base_url, "qwen", timeout=120)
    over: dict[str, list[float]] = {"embedded": [], "http": []}
    for i in range(5):
        for name, backend in (("embedded", llm), ("http", http)):
            r = backend.chat(user(f"Say the number {i} {name}."), ChatParams(max_tokens=4))
            over[name].append(r.seconds - _compute_s(r.raw))
    return {"n_threads": n_threads, "load_s": load_s,
            "prompt_tok_s": prompt_n / (prompt_ms / 1000), "gen_tok_s": gen_n / (gen_ms / 1000),
            "prompt_tokens": prompt_n, "gen_tokens": gen_n, "n_prompts": len(msgs),
            "cold_s": cold, "warm_s": warm, "speedup": cold / warm,
            "judge_s_per_candidate": judge_s, "judge_cached_prefix": cached_frac,
            "overhead_ms": {k: 1000 * statistics.median(v) for k, v in over.items()},
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def section(results: list[dict]) -> tuple[str, dict[str, str]]:
    """The section's header lines and table, and the values bench/sections/llm.md reads."""
    rows = [[r["n_threads"], f"{r['load_s']:.1f}", f"{r['prompt_tok_s']:.0f}",
             f"{r['gen_tok_s']:.1f}", f"{r['cold_s']:.1f}", f"{r['warm_s'] * 1000:.1f} ms",
             f"{r['speedup']:,.0f}x", f"{r['judge_s_per_candidate']:.2f} "
             f"({100 * r['judge_cached_prefix']:.0f}% of prompt)",
             f"{r['overhead_ms']['embedded']:.1f} / {r['overhead_ms']['http']:.1f}",
             f"{r['peak_rss_mib']:.0f}"] for r in results]
    return header() + "\n" + table(
        ["threads", "load s", "prompt tok/s", "generation tok/s", "10 prompts cold s",
         "cache replay s", "cache speed-up", "judge s/candidate (KV-cached prefix)",
         "overhead ms/call in-process / HTTP", "peak RSS MiB"], rows), {
        "prompts": str(len(PROMPTS)), "max_tokens": str(MAX_TOKENS)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--json", type=Path, help="also save raw results here")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one)))
        return
    results = run_each_in_subprocess(__file__, args.threads.split(","), " thread(s)")
    publish_tables("llm", *section(results), write=not args.no_write)
    if args.json:
        save_json(args.json, results)


if __name__ == "__main__":
    main()
