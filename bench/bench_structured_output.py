"""Free text versus JSON-schema constrained decoding for the ``modality_weights`` prompt
(issue 12, prompts as contracts).

Both modes run the contract through :func:`intentrank.llm.step.run_step` with the stage's
validation and fallback; replies go to a scratch reply cache (``--cache``) so the first run is
cold. What is reported: bench/sections/structured-output.md.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from report import DATA, header, publish_tables

MODES = ("free", "schema")


def raw_vector(result: Any) -> tuple[float, ...] | None:
    """The three numbers the model wrote (valid or not), rounded; None if it wrote none."""
    from intentrank.fuse.dynamic import MODALITIES
    from intentrank.llm.parsing import read_json_object

    if result.reply is None:
        return None
    try:
        obj = read_json_object(result.reply.text)
        return tuple(round(float(obj[m]), 3) for m in MODALITIES)
    except (ValueError, KeyError, TypeError):
        return None


def run_mode(client: Any, queries: list[Any], mode: str, tolerance: float,
             repair_range: tuple[float, float]) -> dict[str, Any]:
    from intentrank.fuse.dynamic import rule_weights, validate_weights
    from intentrank.llm.parsing import Repaired, read_json_object
    from intentrank.llm.step import FallbackReason, run_step
    from intentrank.types import Trace

    trace, start = Trace(), time.perf_counter()
    results = run_step(
        client, "modality_weights", [{"query": q.text.strip()} for q in queries],
        validate=lambda obj, item: validate_weights(obj, tolerance),
        fallback=lambda item: rule_weights(item["query"]),
        trace=trace, stage=mode, query_ids=[q.id for q in queries],
        structured=mode == "schema")
    wall = time.perf_counter() - start
    counters = trace.stage(mode).counters
    reasons = {r.value: int(counters.get(f"fallback.{r.value}", 0)) for r in FallbackReason}
    invalid = collections.Counter()
    for r in results:
        if r.reason is FallbackReason.INVALID:
            d = r.detail
            invalid["sum != 1" if "sum to" in d else "outside [0, 1]" if "outside" in d
                    else "missing modality" if "missing" in d else "not a number"
                    if "not a number" in d else d] += 1
    # what the documented repair rescues: renormalise a sum within repair_range
    repaired = 0
    for r in results:
        if r.reason is FallbackReason.INVALID and "sum to" in r.detail and r.reply is not None:
            try:
                got = validate_weights(read_json_object(r.reply.text), tolerance,
                                       repair_range=repair_range)
            except ValueError:  # the sum is outside the repair range too
                continue
            repaired += isinstance(got, Repaired)
    per_query = [raw_vector(r) for r in results]
    vectors = collections.Counter(v for v in per_query if v is not None)
    requests = counters.get("llm_calls", 0) + counters.get("llm_cache_hits", 0)
    cold = counters.get("llm_seconds", 0) + counters.get("llm_cached_seconds", 0)
    fallbacks = int(counters.get("fallbacks", 0))
    return {"mode": mode, "n": len(queries), "per_query": per_query, "fallbacks": fallbacks,
            "reasons": reasons,
            "invalid": dict(invalid), "repaired": repaired,
            "with_repair": fallbacks - repaired, "distinct": len(vectors),
            "common": vectors.most_common(3), "fenced": sum(
                r.reply is not None and "```" in r.reply.text for r in results),
            "s_per_call": cold / requests if requests else 0.0,
            "tokens_per_call": sum(r.reply.completion_tokens for r in results if r.reply)
            / max(sum(r.reply is not None for r in results), 1),
            "cache_hits": int(counters.get("llm_cache_hits", 0)), "wall": wall}


def row(r: dict[str, Any]) -> str:
    kinds = "; ".join(f"{k}: {v}" for k, v in r["reasons"].items() if v) or "-"
    why = "; ".join(f"{k}: {v}" for k, v in r["invalid"].items()) or "-"
    common = ", ".join(f"{list(v)} x{c}" for v, c in r["common"]) or "-"
    n = r["n"]
    return (f"| {r['mode']} | {r['fallbacks']}/{n} ({100 * r['fallbacks'] / n:.0f}%) | {kinds} "
            f"| {why} | {r['with_repair']}/{n} ({100 * r['with_repair'] / n:.0f}%) "
            f"| {r['distinct']} | {common} | {r['s_per_call']:.2f} "
            f"| {r['tokens_per_call']:.1f} | {r['fenced']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--llm", default="embedded")
    ap.add_argument("--queries", type=int, default=0, help="sample size (0: all 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--repair-range", type=float, nargs=2, default=(0.8, 1.2))
    ap.add_argument("--threads", type=int, default=1,
                    help="llama.cpp threads (1: steadier than 2 on a shared 2-core machine)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="reply cache file (default: a new one, so the run is cold)")
    ap.add_argument("--no-write", action="store_true", help="print, do not edit the docs")
    args = ap.parse_args()
    from intentrank.data.dataset import load_dataset
    from intentrank.llm.client import LLMClient, make_backend

    cache = args.cache or Path(tempfile.mkdtemp(prefix="structured-")) / "llm_cache.sqlite"
    queries, _ = load_dataset(DATA / "scifact").sample("test", args.queries, seed=args.seed)
    backend = {} if args.llm.startswith("openai:") else {"n_threads": args.threads}
    client = LLMClient(make_backend(args.llm, **backend), cache=cache)
    load = getattr(client.llm, "load", None)
    if callable(load):
        load()  # not timed as part of the first call
    print(f"{len(queries)} queries, reply cache {cache}", file=sys.stderr, flush=True)
    rows = ["| mode | fallbacks | by kind | invalid: what | fallbacks with the sum repair "
            "| distinct weight vectors written | most common (dense, sparse, graph) "
            "| s/call (cold) | tokens/call | replies in a code fence |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    results = []
    for mode in args.modes.split(","):
        results.append(run_mode(client, queries, mode, args.tolerance,
                                tuple(args.repair_range)))
        rows.append(row(results[-1]))
        print(rows[-1], f"(wall {results[-1]['wall']:.0f} s, "
                        f"{results[-1]['cache_hits']} cached)", file=sys.stderr, flush=True)
    total = len(load_dataset(DATA / "scifact").split("test")[0])
    which = (f"all {total}" if len(queries) == total else
             f"a fixed-seed sample (seed {args.seed}) of {len(queries)} of the {total}")
    lo, hi = args.repair_range
    same = ""
    if len(results) == 2:
        a, b = (r["per_query"] for r in results)
        agree = sum(x is not None and x == y for x, y in zip(a, b, strict=True))
        same = (f" The two modes wrote the same (dense, sparse, graph) triple for {agree} of "
                f"the {len(a)} queries.")
    reading = []
    for r in results:
        sums = r["invalid"].get("sum != 1", 0)
        reading.append(
            f"`{r['mode']}`: {r['fallbacks']} of {r['n']} replies fall back, {sums} of them "
            f"only because the weights do not sum to 1; with the sum repair "
            f"{r['with_repair']} fall back ({r['repaired']} repaired); the model wrote "
            f"{r['distinct']} distinct weight triples for {r['n']} queries, the most common "
            f"one {r['common'][0][1] if r['common'] else 0} times.")
    values = {"which": which, "llm": args.llm, "threads": str(args.threads),
              "tolerance": f"{args.tolerance:g}", "repair_lo": f"{lo:g}",
              "repair_hi": f"{hi:g}", "same": same, "reading": " ".join(reading)}
    # the prose that reads these values: bench/sections/structured-output.md
    publish_tables("structured-output", header() + "\n" + "\n".join(rows), values,
                   write=not args.no_write)


if __name__ == "__main__":
    main()
