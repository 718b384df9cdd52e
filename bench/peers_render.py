"""The tables of bench_peers.py's section "peers" from its results (runs/peers/results.json).

Ratios are intentrank / the row's system in speed (above 1: intentrank faster) and, for
memory, intentrank's peak RSS / the row's (below 1: intentrank smaller); an intentrank row's
ratio is against the fastest peer of its table and collection. "of limit" is the row's
speed as a fraction of the hardware limit of bench/peers_limits.py."""

from __future__ import annotations

import json
from typing import Any

import peers_service
from lib.results import table


def _f(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _ours(system: str) -> bool:
    return system.startswith("intentrank")


def _against(rows: list[dict], row: dict, key: str, best_ours: dict[str, float]) -> str:
    """intentrank / this row in ``key``; for an intentrank row, against the best peer."""
    same = [r for r in rows if r["collection"] == row["collection"]]
    if _ours(row["system"]):
        peers = [r[key] for r in same if not _ours(r["system"])]
        return _ratio(row[key], max(peers)) if peers else "-"
    return _ratio(best_ours[row["collection"]], row[key])


def _best(rows: list[dict], key: str, ours: tuple[str, ...] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        if _ours(r["system"]) and (ours is None or r["system"] in ours):
            out[r["collection"]] = max(out.get(r["collection"], 0.0), r[key])
    return out


def builds_table(rows: list[dict]) -> str:
    out = []
    for leg in ("BM25", "dense"):
        part = [r for r in rows if r["leg"] == leg and r["system"] != "intentrank lucene-like"]
        for r in part:
            r["speed"] = 1 / r["wall_s"]
        fast, small = _best(part, "speed"), {}
        for r in part:
            if _ours(r["system"]):
                small[r["collection"]] = r["rss_mib"]
        for r in part:
            same = [x for x in part if x["collection"] == r["collection"]
                    and not _ours(x["system"])]
            rss = (_ratio(r["rss_mib"], min(x["rss_mib"] for x in same)) if _ours(r["system"])
                   else _ratio(small[r["collection"]], r["rss_mib"]))
            out.append([r["collection"], leg, r["system"], f"{r['n']:,}", _f(r["wall_s"]),
                        _f(r["n"] / r["wall_s"], 0), _f(r["rss_mib"], 0),
                        _against(part, r, "speed", fast), rss])
    return table(["collection", "leg", "system", "documents", "wall s", "documents/s",
                  "peak RSS MiB", "speed intentrank / this", "RSS intentrank / this"], out)


def scaled(results: dict[str, Any]) -> dict[str, Any]:
    """The rows with their limits at the run's measured rates (stored at 1 GFLOP/s, 1 GB/s)."""
    lim = results["limits"]
    for r in results["bm25"]:
        r["bound_qps"] *= lim["gbps"]
    for part in ("dense", "rerank"):
        for r in results[part]:
            for key in ("bound_passages_s", "bound_qps", "bound_pairs_s"):
                if key in r:
                    r[key] *= lim["gflops"]
    return results


def bm25_table(rows: list[dict]) -> str:
    default = ("intentrank numpy", "intentrank numba")
    single, batched = _best(rows, "qps_single", default), _best(rows, "qps_batched", default)
    out = []
    for r in rows:
        b_single = _against(rows, r, "qps_single", single)
        b_batched = _against(rows, r, "qps_batched", batched)
        out.append([r["collection"], r["system"], f"{r['ndcg']:.4f}", _f(r["qps_single"], 0),
                    _f(r["qps_batched"], 0), b_single, b_batched, _f(r["bound_qps"], 0),
                    f"{r['qps_batched'] / r['bound_qps']:.3f}"])
    return table(["collection", "system", "nDCG@10", "q/s single", "q/s batched",
                  "intentrank / this, single", "batched", "limit q/s (bandwidth)",
                  "batched of limit"], out)


def dense_table(rows: list[dict]) -> str:
    ps_, single = _best(rows, "passages_s"), _best(rows, "qps_single")
    out = []
    for r in rows:
        out.append([r["collection"], r["system"], f"{r['pool']:,}", f"{r['ndcg']:.4f}",
                    _f(r["passages_s"]), _against(rows, r, "passages_s", ps_),
                    f"{r['passages_s'] / r['bound_passages_s']:.3f}", _f(r["qps_single"]),
                    _f(r["qps_batched"]), _against(rows, r, "qps_single", single),
                    f"{r['qps_single'] / r['bound_qps']:.3f}"])
    return table(["collection", "system", "pool", "nDCG@10 (pool)", "passages/s",
                  "intentrank / this", "of limit (fp32 GEMM)", "q/s single", "q/s batched",
                  "intentrank / this, single", "of limit"], out)


def rerank_table(rows: list[dict], bm25: dict[str, float]) -> str:
    best = _best(rows, "pairs_s")
    out = [[r["collection"], r["system"], f"{r['pairs']:,}", f"{bm25[r['collection']]:.4f}",
            f"{r['ndcg']:.4f}", _f(r["pairs_s"]), _against(rows, r, "pairs_s", best),
            _f(r["bound_pairs_s"], 0), f"{r['pairs_s'] / r['bound_pairs_s']:.3f}"]
           for r in rows]
    return table(["collection", "system", "pairs", "nDCG@10 BM25 top 30", "nDCG@10 reranked",
                  "pairs/s", "intentrank / this", "limit pairs/s (fp32 GEMM)", "of limit"],
                 out)


def e2e_table(rows: list[dict]) -> str:
    best = _best(rows, "qps")
    return table(["collection", "stack", "queries", "nDCG@10", "q/s", "intentrank / this"],
                 [[r["collection"], r["system"], r["queries"], f"{r['ndcg']:.4f}",
                   _f(r["qps"], 2), _against(rows, r, "qps", best)] for r in rows])


def rerank_quality_table(quality: dict[str, dict], max_diff: dict[str, float]) -> str:
    """nDCG@10 of BM25's top 30 reranked on every test query, at each precision."""
    rows = []
    for name, q in quality.items():
        n = q["ndcg"]
        rows.append([name, f"{q['queries']:,}", f"{q['bm25']:.4f}", f"{n['int8']:.4f}",
                     f"{n['fp32']:.4f}", f"{n['int8'] - n['fp32']:+.4f}",
                     f"{max_diff[name]:.1e}" if name in max_diff else "-"])
    return table(["collection", "test queries", "nDCG@10 BM25 top 30", "intentrank int8",
                  "intentrank fp32 (the peers' function)", "int8 - fp32",
                  "largest score difference fp32 / sentence-transformers (sample)"], rows)


def service_table(rows: list[dict]) -> str:
    """Requests/s and latency per endpoint, system and clients; intentrank rows against
    Infinity at the same endpoint and clients."""
    out = []
    for r in rows:
        peer = [x["rps"] for x in rows if x["endpoint"] == r["endpoint"]
                and x["clients"] == r["clients"] and not _ours(x["system"])]
        ratio = _ratio(r["rps"], max(peer)) if _ours(r["system"]) and peer else "-"
        quality = f"nDCG@10 {r['ndcg']:.4f}" if r["endpoint"] == "rerank" else \
            f"cosine {r['cosine_to_intentrank']:.4f}" if r.get("cosine_to_intentrank") \
            is not None else "-"
        path = "/v1/rerank" if r["endpoint"] == "rerank" else "/v1/embeddings"
        out.append([path, r["system"], r["clients"], r["requests"], _f(r["rps"], 2),
                    _f(r["p50"], 0), _f(r["p95"], 0), ratio, quality, r["errors"]])
    return table(["endpoint", "system", "clients", "requests", "req/s", "p50 ms", "p95 ms",
                  "intentrank / Infinity", "quality (rerank: nDCG@10 of the answers; "
                  "embeddings: mean cosine to intentrank's)", "errors"], out)


# the parts of the run each table comes from, in the template's table order
TABLE_PARTS = ("bm25", "bm25", "dense", "rerank", "e2e", "rerank", "service")


def tables(results: dict[str, Any]) -> list[str]:
    """The tables of the parts ``results`` measured, in bench/sections/peers.md's
    {{table N}} order (a run of every part: all seven)."""
    results = scaled(json.loads(json.dumps(results)))
    parts = set(results.get("parts", TABLE_PARTS))
    made = (lambda: builds_table(results["builds"]), lambda: bm25_table(results["bm25"]),
            lambda: dense_table(results["dense"]),
            lambda: rerank_table(results["rerank"], results["rerank_bm25"]),
            lambda: e2e_table(results["e2e"]),
            lambda: rerank_quality_table(results["rerank_all"],
                                         results.get("rerank_fp32_max_diff", {})),
            lambda: service_table(results["service"]))
    return [make() for make, part in zip(made, TABLE_PARTS, strict=True) if part in parts]


def section(results: dict[str, Any]) -> dict[str, str]:
    """The values the section's prose reads, from one run of every part."""
    results = scaled(json.loads(json.dumps(results)))
    lim, load = results["limits"], results["load"]
    skipped = results.get("service_skipped", {}).get("infinity")
    return {"sample": str(results["sample"]),
            "gflops": _f(lim["gflops"], 0), "gbps": _f(lim["gbps"], 1),
            "load": f"{min(load):.1f}-{max(load):.1f}",
            "infinity": f"not measured: {skipped}" if skipped else "measured",
            "service_rounds": results.get("service_rounds") or peers_service.rounds(),
            **bm25_values(results)}


def _span(ratios: list[float]) -> str:
    lo, hi = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
    return f"{lo}x" if lo == hi else f"{lo}-{hi}x"


def bm25_values(results: dict[str, Any]) -> dict[str, str]:
    """The ratios the prose of the BM25 rows quotes, as ranges over the collections: the
    numpy and numba backends against bm25s direct and against the fastest peer (single,
    batched); the BM25 build's speed and peak RSS against bm25s and tantivy; the batched
    rows' fractions of their limit (``results`` with its limits scaled: :func:`scaled`)."""
    rows = results["bm25"]
    builds = [b for b in results["builds"] if b["leg"] == "BM25"]
    names = list(dict.fromkeys(r["collection"] for r in rows))

    def of(table: list[dict], name: str, system: str, key: str) -> float:
        return next(r[key] for r in table if r["collection"] == name and r["system"] == system)

    def fastest_peer(name: str, key: str) -> float:
        return max(r[key] for r in rows if r["collection"] == name and not _ours(r["system"]))

    out = {}
    for key, mode in (("qps_single", "single"), ("qps_batched", "batched")):
        for backend in ("numpy", "numba"):
            ours = [of(rows, n, f"intentrank {backend}", key) for n in names]
            out[f"bm25_{backend}_bm25s_{mode}"] = _span(
                [o / of(rows, n, "bm25s", key) for o, n in zip(ours, names, strict=True)])
            out[f"bm25_{backend}_best_{mode}"] = _span(
                [o / fastest_peer(n, key) for o, n in zip(ours, names, strict=True)])
    for peer in ("bm25s", "tantivy"):
        out[f"bm25_build_{peer}"] = _span([of(builds, n, peer, "wall_s") /
                                           of(builds, n, "intentrank", "wall_s") for n in names])
        out[f"bm25_rss_{peer}"] = _span([of(builds, n, "intentrank", "rss_mib") /
                                         of(builds, n, peer, "rss_mib") for n in names])
    fractions = [r["qps_batched"] / r["bound_qps"] for r in rows if _ours(r["system"])]
    out["bm25_of_limit"] = f"{100 * min(fractions):.2f}-{100 * max(fractions):.2f}%"
    return out
