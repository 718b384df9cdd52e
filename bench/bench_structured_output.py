"""Free text versus JSON-schema constrained decoding for the ``modality_weights`` prompt
(issue 12, prompts as contracts), with the embedded LLM on one llama.cpp thread.

Both modes run the contract through :func:`intentrank.llm.step.run_step` with the stage's
validation and fallback; replies go to a scratch reply cache (``--cache``) so the first run is
cold. What is reported: bench/sections/structured-output.md.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from report import DATA, header, publish_tables, table

MODES, SEED, TOLERANCE, REPAIR = ("free", "schema"), 1, 0.01, (0.8, 1.2)
INVALID = {"sum to": "sum != 1", "outside": "outside [0, 1]", "missing": "missing modality",
           "not a number": "not a number"}  # a validation error -> what the table calls it


def raw_vector(result: Any) -> tuple[float, ...] | None:
    """The three numbers the model wrote (valid or not), rounded; None if it wrote none."""
    from intentrank.fuse.dynamic import MODALITIES
    from intentrank.llm.parsing import read_json_object

    try:
        obj = read_json_object(result.reply.text)
        return tuple(round(float(obj[m]), 3) for m in MODALITIES)
    except (AttributeError, ValueError, KeyError, TypeError):  # no reply, or not 3 numbers
        return None


def run_mode(client: Any, queries: list[Any], mode: str) -> dict[str, Any]:
    from intentrank.fuse.dynamic import rule_weights, validate_weights
    from intentrank.llm.parsing import Repaired, read_json_object
    from intentrank.llm.step import FallbackReason, run_step
    from intentrank.types import Trace

    trace = Trace()
    results = run_step(
        client, "modality_weights", [{"query": q.text.strip()} for q in queries],
        validate=lambda obj, item: validate_weights(obj, TOLERANCE),
        fallback=lambda item: rule_weights(item["query"]), trace=trace, stage=mode,
        query_ids=[q.id for q in queries], structured=mode == "schema")
    counters = trace.stage(mode).counters
    invalid = [r for r in results if r.reason is FallbackReason.INVALID]
    repaired = 0  # what the documented repair rescues: renormalise a sum within REPAIR
    for r in invalid:
        if "sum to" in r.detail and r.reply is not None:
            try:
                got = validate_weights(read_json_object(r.reply.text), TOLERANCE, REPAIR)
            except ValueError:  # the sum is outside the repair range too
                continue
            repaired += isinstance(got, Repaired)
    per_query = [raw_vector(r) for r in results]
    replies = [r.reply for r in results if r.reply is not None]
    requests = counters.get("llm_calls", 0) + counters.get("llm_cache_hits", 0)
    cold = counters.get("llm_seconds", 0) + counters.get("llm_cached_seconds", 0)
    fallbacks = int(counters.get("fallbacks", 0))
    vectors = collections.Counter(v for v in per_query if v is not None)
    return {"mode": mode, "n": len(queries), "per_query": per_query, "fallbacks": fallbacks,
            "reasons": {r.value: int(counters.get(f"fallback.{r.value}", 0))
                        for r in FallbackReason},
            "invalid": collections.Counter(next((v for k, v in INVALID.items() if k in r.detail),
                                                r.detail) for r in invalid),
            "repaired": repaired, "with_repair": fallbacks - repaired,
            "distinct": len(vectors), "common": vectors.most_common(3),
            "fenced": sum("```" in r.text for r in replies),
            "s_per_call": cold / requests if requests else 0.0,
            "tokens_per_call": sum(r.completion_tokens for r in replies) / max(len(replies), 1)}


def row(r: dict[str, Any]) -> list[Any]:
    n = r["n"]
    return [r["mode"], f"{r['fallbacks']}/{n} ({100 * r['fallbacks'] / n:.0f}%)",
            "; ".join(f"{k}: {v}" for k, v in r["reasons"].items() if v) or "-",
            "; ".join(f"{k}: {v}" for k, v in r["invalid"].items()) or "-",
            f"{r['with_repair']}/{n} ({100 * r['with_repair'] / n:.0f}%)", r["distinct"],
            ", ".join(f"{list(v)} x{c}" for v, c in r["common"]) or "-",
            f"{r['s_per_call']:.2f}", f"{r['tokens_per_call']:.1f}", r["fenced"]]


def reading(r: dict[str, Any]) -> str:
    return (f"`{r['mode']}`: {r['fallbacks']} of {r['n']} replies fall back, "
            f"{r['invalid'].get('sum != 1', 0)} of them only because the weights do not sum to "
            f"1; with the sum repair {r['with_repair']} fall back ({r['repaired']} repaired); "
            f"the model wrote {r['distinct']} distinct weight triples for {r['n']} queries, the "
            f"most common one {r['common'][0][1] if r['common'] else 0} times.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=0, help="sample size (0: all 300)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="reply cache file (default: a new one, so the run is cold)")
    ap.add_argument("--no-write", action="store_true", help="print, do not edit the docs")
    args = ap.parse_args()
    from intentrank.data.dataset import load_dataset
    from intentrank.llm.client import LLMClient, make_backend

    cache = args.cache or Path(tempfile.mkdtemp(prefix="structured-")) / "llm_cache.sqlite"
    dataset = load_dataset(DATA / "scifact")
    queries, _ = dataset.sample("test", args.queries, seed=SEED)
    client = LLMClient(make_backend("embedded", n_threads=1), cache=cache)
    client.llm.load()  # not timed as part of the first call
    results = [run_mode(client, queries, mode) for mode in MODES]
    total = len(dataset.split("test")[0])
    a, b = (r["per_query"] for r in results)
    agree = sum(x is not None and x == y for x, y in zip(a, b, strict=True))
    values = {"which": f"all {total}" if len(queries) == total else
              f"a fixed-seed sample (seed {SEED}) of {len(queries)} of the {total}",
              "same": f" The two modes wrote the same (dense, sparse, graph) triple for {agree} "
                      f"of the {len(a)} queries.", "reading": " ".join(map(reading, results))}
    publish_tables("structured-output", header() + "\n" + table(
        ["mode", "fallbacks", "by kind", "invalid: what", "fallbacks with the sum repair",
         "distinct weight vectors written", "most common (dense, sparse, graph)",
         "s/call (cold)", "tokens/call", "replies in a code fence"], map(row, results)),
        values, write=not args.no_write)


if __name__ == "__main__":
    main()
