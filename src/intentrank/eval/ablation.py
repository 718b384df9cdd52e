"""The ablation harness of the cascaded tri-modal pipeline (method 3).

Five configurations run on the same queries, each a pipeline of existing stages:

* **Dense only**: dense top-100;
* **Bi-modal**: weighted min-max fusion of dense and sparse (0.5 minmax(BM25) + 0.5
  minmax(TF-IDF)), the static dense/sparse weights renormalised to sum to 1
  (0.50/0.35 -> 0.588/0.412);
* **Tri-modal**: weighted min-max fusion of dense/sparse/graph (static 0.50/0.35/0.15), top-100;
* **Tri-modal + CE**: Tri-modal top-100 -> cross-encoder -> top-10;
* **Full pipeline**: Tri-modal + CE -> LLM listwise over the top-5 (top-10 kept).

With ``dynamic=True`` the last three also run with per-query LLM weights
(:class:`~intentrank.fuse.dynamic.DynamicWeightedFusion`). Every leg, fusion,
cross-encoder and listwise stage is wrapped in :class:`~intentrank.core.cache.Cached`,
so configurations share stage outputs: each is computed once per distinct input, and the
replayed time and counters still show in each configuration's trace (latency "as if run
alone"). LLM replies are reused through the client's reply cache when it has one.

The report mirrors the paper's tables: main metrics, static vs dynamic weights, swap metrics
and error analysis per reranking stage, per-stage latency and paired significance against a
baseline (``Tri-modal`` by default). Markdown and JSON come from :class:`AblationReport`; the
HTML page from :mod:`intentrank.report.html`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from intentrank.core.cache import Cached
from intentrank.core.stage import Stage
from intentrank.data.trec import Qrels
from intentrank.errors import ConfigError, DataError
from intentrank.eval.error_analysis import Degradation, degraded_queries
from intentrank.eval.metrics import EvalResult, evaluate
from intentrank.eval.significance import PairedTest, paired_test
from intentrank.eval.swaps import SwapStats, swap_stats
from intentrank.fuse.weighted import WeightedFusion
from intentrank.types import Query, Ranking, Trace

STATIC_WEIGHTS = (0.50, 0.35, 0.15)
CUTOFFS = (1, 5, 10)
MEASURES = ("nDCG", "MRR", "MAP", "Recall", "P")
DEFAULT_METRICS = tuple(f"{m}@{k}" for m in MEASURES for k in CUTOFFS)
TEST_METRICS = ("nDCG@10", "MRR@10", "MAP@10", "Recall@10", "P@10")

DENSE, BIMODAL, TRIMODAL, TRI_CE, FULL = (
    "Dense only", "Bi-modal", "Tri-modal", "Tri-modal + CE", "Full pipeline")
DYNAMIC = " (dynamic)"
LEGS = ("dense", "bm25", "tfidf", "graph")

# Trace stages summed into each latency column (dynamic fusion's LLM time is split out).
LATENCY_GROUPS: dict[str, tuple[str, ...]] = {
    "dense": ("dense",),
    "sparse": ("bm25", "tfidf", "sparse"),
    "graph": ("graph",),
    "fusion": ("bimodal", "trimodal", "weighted", "dynamic", "ce_rrf"),
    "LLM weights": (),
    "cross-encoder": ("cross_encoder",),
    "listwise LLM": ("listwise",),
}
COUNTERS = ("llm_calls", "llm_cache_hits", "llm_failed", "fallbacks", "repairs", "replayed")

Weights = Sequence[float]
WeightSpec = Weights | Mapping[str, Weights]


# -- configurations ------------------------------------------------------------------------
@dataclass
class AblationConfig:
    """One configuration: its pipeline and, for a reranking configuration, the configuration
    whose output is the reranker's input (``parent``) and the stage it adds (``stage``)."""

    name: str
    pipeline: Stage
    weights: str = "static"
    parent: str | None = None
    stage: str | None = None
    description: str = ""


def bimodal_weights(weights: Weights) -> tuple[float, float]:
    """The dense/sparse part of tri-modal weights renormalised to sum to 1 (0.5/0.5 if 0)."""
    d, s = float(weights[0]), float(weights[1])
    return (d / (d + s), s / (d + s)) if d + s > 0 else (0.5, 0.5)


def _check_weights(weights: Weights) -> tuple[float, float, float]:
    if len(weights) != 3 or any(w < 0 for w in weights) or abs(sum(weights) - 1) > 1e-6:
        raise ConfigError(f"tri-modal weights must be three non-negative numbers summing to 1 "
                          f"(dense, sparse, graph), got {list(weights)}")
    return (float(weights[0]), float(weights[1]), float(weights[2]))


def _fusion(branches: list[Stage], weights: WeightSpec, name: str, bimodal: bool) -> Stage:
    """Weighted min-max fusion with fixed weights, or per-query weights from a mapping."""
    if isinstance(weights, Mapping):
        from intentrank.tune.modality import PerQueryWeightedFusion

        table = {q: bimodal_weights(w) if bimodal else _check_weights(w)
                 for q, w in weights.items()}
        default = bimodal_weights(STATIC_WEIGHTS) if bimodal else STATIC_WEIGHTS
        fusion: WeightedFusion = PerQueryWeightedFusion(branches, table, default)
    else:
        w = _check_weights(weights)
        fusion = WeightedFusion(branches, bimodal_weights(w) if bimodal else w)
    fusion.name = name
    return fusion


def _cross_encoder_stage(index: Any, cross_encoder: Any, k: int) -> Stage | None:
    """A stage from a reranker stage, a pair scorer, or a model directory (int8 ONNX, 128
    tokens: the paper's setting)."""
    if cross_encoder is None or isinstance(cross_encoder, Stage):
        return cross_encoder
    from intentrank.rerank.cross_encoder import CrossEncoderReranker

    if hasattr(cross_encoder, "predict"):
        return CrossEncoderReranker(index, cross_encoder, k=k)
    return CrossEncoderReranker(index, cross_encoder, k=k, backend="onnx", max_length=128)


def _llm_client(llm: Any) -> Any:
    """An :class:`LLMClient` as is; a bare backend wrapped without a reply cache."""
    if llm is None or hasattr(llm, "complete_or_none"):
        return llm
    from intentrank.llm.client import LLMClient

    return LLMClient(llm, cache=None)


def _weights_text(weights: WeightSpec) -> str:
    if isinstance(weights, Mapping):
        return f"per-query weights for {len(weights)} queries (cross-validated)"
    return "/".join(f"{w:.2f}" for w in weights)


def build_configs(
    index: Any, llm: Any = None, cross_encoder: Any = None, *, dynamic: bool = True,
    weights: WeightSpec = STATIC_WEIGHTS, k: int = 100, final_k: int = 10,
    listwise_depth: int = 5, ce_depth: int | None = None, listwise_chars: int = 600,
    ce_rrf: bool = False,
) -> tuple[list[AblationConfig], list[str]]:
    """The configurations over ``index`` and notes on what was skipped and why.

    ``cross_encoder``: a reranker stage, a pair scorer (``predict(pairs, batch_size)``) or a
    model directory; None skips the CE and Full configurations. ``llm``: an ``LLMClient``
    (or a bare backend); None skips Full and every dynamic configuration. ``weights``: the
    static dense/sparse/graph weights, or ``{query_id: weights}`` (e.g. cross-validated).
    ``ce_depth``: fused candidates the cross-encoder scores (default ``k``, the paper's 100);
    ``listwise_chars``: characters of each passage shown to the listwise LLM; ``ce_rrf``:
    the CE step outputs RRF(first-stage ranks, CE ranks) over the candidates it scored
    instead of the CE order alone (keeps the fusion's evidence when the CE is weaker).
    """
    ce_depth = ce_depth or k
    if not final_k <= ce_depth <= k:
        raise ConfigError(f"ce_depth must lie between final_k ({final_k}) and k ({k}), "
                          f"got {ce_depth}")
    from intentrank.fuse.dynamic import DynamicWeightedFusion
    from intentrank.fuse.rrf_with_input import RRFWithInput
    from intentrank.rerank.listwise import ListwiseReranker
    from intentrank.retrieve.retrievers import DenseRetriever, GraphRetriever, sparse_retriever

    missing = [leg for leg in LEGS if hasattr(index, "has") and not index.has(leg)]
    if missing:
        raise ConfigError(f"the ablation needs every index leg; {getattr(index, 'path', '')} "
                          f"lacks {', '.join(missing)} (rebuild with --legs {','.join(LEGS)})")
    llm = _llm_client(llm)
    ce = _cross_encoder_stage(index, cross_encoder, k)
    sparse_leg = sparse_retriever(index, k)
    sparse_leg.name = "sparse"  # names the cache's replay counter
    dense, sparse, graph = (Cached(DenseRetriever(index, k)), Cached(sparse_leg),
                            Cached(GraphRetriever(index, k)))
    bi = _fusion([dense, sparse], weights, "bimodal", bimodal=True)
    tri = Cached(_fusion([dense, sparse, graph], weights, "trimodal", bimodal=False))
    notes = [f"Static weights dense/sparse/graph = {_weights_text(weights)}; Bi-modal uses the "
             f"dense/sparse weights renormalised to sum to 1"
             + ("" if isinstance(weights, Mapping) else
                " ({:.3f}/{:.3f}).".format(*bimodal_weights(weights)))]
    configs = [
        AblationConfig(DENSE, dense, "-", description=f"dense top-{k}"),
        AblationConfig(BIMODAL, bi % k, "static", description=f"dense + sparse, top-{k}"),
    ]
    fusions = [("static", "", tri)]
    if dynamic and llm is not None:
        fusions.append(("dynamic", DYNAMIC, Cached(DynamicWeightedFusion(
            [dense, sparse, graph], llm))))
    elif dynamic:
        notes.append("Dynamic-weight configurations skipped: no LLM given.")
    ce_c = Cached(ce) if ce is not None else None
    lw_c = (Cached(ListwiseReranker(index, llm, depth=listwise_depth,
                                    max_passage_chars=listwise_chars))
            if llm is not None else None)
    if ce_c is None:
        notes.append(f"{TRI_CE} and {FULL} skipped: no cross-encoder given.")
    elif lw_c is None:
        notes.append(f"{FULL} skipped: no LLM given.")
    for kind, suffix, fusion in fusions:
        configs.append(AblationConfig(TRIMODAL + suffix, fusion % k, kind,
                                      description=f"dense + sparse + graph, top-{k}"))
        if ce_c is None:
            continue
        head = fusion % ce_depth
        if ce_rrf:
            with_ce = head >> RRFWithInput(ce_c, name="ce_rrf") % final_k
            step = f"RRF(fusion, CE) -> top-{final_k}"
        else:
            with_ce, step = head >> ce_c % final_k, f"CE -> top-{final_k}"
        configs.append(AblationConfig(TRI_CE + suffix, with_ce, kind, TRIMODAL + suffix,
                                      "cross-encoder", f"top-{ce_depth} -> {step}"))
        if lw_c is not None:
            configs.append(AblationConfig(
                FULL + suffix, with_ce >> lw_c, kind, TRI_CE + suffix, "listwise",
                f"CE top-{final_k} -> LLM listwise over top-{listwise_depth} "
                f"({listwise_chars} chars/passage)"))
    return configs, notes


# -- results -------------------------------------------------------------------------------
@dataclass
class ConfigResult:
    """One configuration's rankings, trace, scores, latency (ms/query) and counters."""

    name: str
    weights: str
    parent: str | None
    stage: str | None
    description: str
    rankings: list[Ranking]
    trace: Trace
    scores: EvalResult
    latency: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return sum(self.latency.values())


@dataclass
class Table:
    """A titled table of strings (``**x**`` marks bold) with an optional note below."""

    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""

    def to_markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.header) + " |",
                 "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
                  for row in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


def latency_ms(trace: Trace, n_queries: int) -> dict[str, float]:
    """Cold-run milliseconds per query in each :data:`LATENCY_GROUPS` column (others in
    "other"): LLM replies replayed from the on-disk cache are charged the seconds they took
    when generated (``llm_cached_seconds``), so a rerun reports what a first run costs."""
    out = dict.fromkeys(LATENCY_GROUPS, 0.0)
    n = max(n_queries, 1)
    for name, st in trace.stages.items():
        group = next((g for g, names in LATENCY_GROUPS.items() if name in names), "other")
        cached = st.counters.get("llm_cached_seconds", 0.0)
        seconds = st.seconds + cached
        if name == "dynamic":
            llm = min(st.counters.get("llm_seconds", 0.0) + cached, seconds)
            out["LLM weights"] += 1000 * llm / n
            seconds -= llm
        out[group] = out.get(group, 0.0) + 1000 * seconds / n
    return out


def trace_counters(trace: Trace) -> dict[str, float]:
    """:data:`COUNTERS` summed over the trace's stages."""
    totals = dict.fromkeys(COUNTERS, 0.0)
    for st in trace.stages.values():
        for c in COUNTERS:
            totals[c] += st.counters.get(c, 0.0)
    return totals


def _signed(x: float) -> str:
    """``+0.0123`` / ``-0.0123``, with no negative zero."""
    return f"{round(x, 4) + 0.0:+.4f}"


def fallback_kind(reason: str, detail: str = "") -> str:
    """A short class of a dynamic-weight fallback: its ``reason`` (a ``FallbackReason``
    value) and ``detail`` (what the validator refused)."""
    by_reason = {"llm_failed": "LLM call failed", "unparseable": "malformed JSON",
                 "empty_reply": "malformed JSON", "truncated": "malformed JSON"}
    if reason in by_reason:
        return by_reason[reason]
    text = f"{reason}: {detail}"
    checks = (("llm call failed", "LLM call failed"), ("no JSON", "malformed JSON"),
              ("outside", "out of range"), ("sum to", "not normalised"),
              ("missing", "missing modality"), ("not a number", "not a number"))
    return next((label for key, label in checks if key in text), "other")


def dynamic_summary(results: Sequence[ConfigResult]) -> dict[str, Any]:
    """Weights the dynamic fusion assigned (one per query), their source and fallback kinds,
    from the trace events of the runs that computed them."""
    weights: dict[str, dict[str, Any]] = {}
    kinds: dict[str, str] = {}
    for r in results:
        for ev in r.trace.events:
            if ev.get("stage") != "dynamic":
                continue
            if ev.get("event") == "weights":
                weights[ev["query_id"]] = ev
            elif ev.get("event") == "fallback":
                kinds[ev["query_id"]] = fallback_kind(str(ev.get("reason", "")),
                                                      str(ev.get("detail", "")))
    if not weights:
        return {}
    n = len(weights)
    mean = [sum(ev["weights"][i] for ev in weights.values()) / n for i in range(3)]
    return {"queries": n, "mean_weights": dict(zip(("dense", "sparse", "graph"), mean,
                                                   strict=True)),
            "llm_share": sum(ev["source"] == "llm" for ev in weights.values()) / n,
            "fallbacks": dict(Counter(kinds.values()))}


@dataclass
class AblationReport:
    """Everything the ablation measured; ``to_markdown`` / ``to_json`` / ``tables``."""

    results: list[ConfigResult]
    metrics: list[str]
    test_metrics: list[str]
    baseline: str
    seed: int
    n_queries: int
    error_metric: str = "nDCG@10"
    swap_depth: int = 10
    alpha: float = 0.05
    notes: list[str] = field(default_factory=list)
    swaps: dict[str, SwapStats] = field(default_factory=dict)
    degradations: dict[str, Degradation] = field(default_factory=dict)
    tests: dict[str, dict[str, PairedTest]] = field(default_factory=dict)
    dynamic_tests: dict[str, PairedTest] = field(default_factory=dict)
    dynamic: dict[str, Any] = field(default_factory=dict)
    title: str = "Ablation of the cascaded tri-modal pipeline"
    # {config: {metric or "s/query": value}}: published numbers shown beside ours
    references: dict[str, dict[str, float]] = field(default_factory=dict)
    reference_source: str = ""

    def result(self, name: str) -> ConfigResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"no configuration {name!r}; ran {[r.name for r in self.results]}")

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.results]

    # -- tables --------------------------------------------------------------------------
    def tables(self) -> list[Table]:
        """Tables I-VII (plus the reference numbers when given), in report order."""
        tables = [self._main_table(), self._dynamic_table(), self._swap_table(),
                  self._error_table(), self._worst_table(), self._latency_table(),
                  self._significance_table(), self._reference_table()]
        return [t for t in tables if t is not None]

    def _mark(self, name: str, metric: str, value: float, best: float) -> str:
        cell = f"{value:.4f}"
        test = self.tests.get(name, {}).get(metric)
        if test is not None and test.significant(self.alpha):
            cell += "†"
        return f"**{cell}**" if abs(value - best) < 1e-12 else cell

    def _main_table(self) -> Table:
        rows_of = [r for r in self.results if r.weights != "dynamic"]
        best = {m: max(r.scores.aggregate[m] for r in rows_of) for m in self.metrics}
        rows = [[r.name + (" (baseline)" if r.name == self.baseline else ""),
                 *(self._mark(r.name, m, r.scores.aggregate[m], best[m]) for m in self.metrics),
                 f"{r.total_ms:.1f}"] for r in rows_of]
        return Table("Table I. Retrieval quality of the five configurations (static weights)",
                     ["configuration", *self.metrics, "ms/query"], rows,
                     f"Best per column in bold; † p < {self.alpha} against {self.baseline} "
                     f"(paired randomization test, seed {self.seed}); n = {self.n_queries} "
                     f"queries.")

    def _dynamic_table(self) -> Table | None:
        dyn = [r for r in self.results if r.weights == "dynamic"]
        if not dyn:
            return None
        m, cols = self.error_metric, [c for c in ("MRR@10", "Recall@10") if c in self.metrics]
        rows = []
        for r in dyn:
            static = self.result(r.name.removesuffix(DYNAMIC))
            test = self.dynamic_tests.get(r.name)
            for res, is_dyn in ((static, False), (r, True)):
                rows.append([res.name.removesuffix(DYNAMIC), res.weights,
                             *(f"{res.scores.aggregate[c]:.4f}" for c in (m, *cols)),
                             _signed(test.delta) if is_dyn and test else "",
                             f"{test.p_randomization:.4f}" if is_dyn and test else "",
                             f"{res.counters.get('fallbacks', 0):.0f}" if is_dyn else ""])
        s = self.dynamic
        note = ""
        if s:
            w = s["mean_weights"]
            fb = ", ".join(f"{k}: {v}" for k, v in sorted(s["fallbacks"].items())) or "none"
            note = (f"Dynamic weights over {s['queries']} queries: mean dense/sparse/graph "
                    f"{w['dense']:.2f}/{w['sparse']:.2f}/{w['graph']:.2f}; "
                    f"{100 * s['llm_share']:.0f}% from the LLM, the rest from the rule "
                    f"fallback ({fb}). Δ and p: dynamic against static on {m}.")
        return Table("Table II. Static vs dynamic (LLM-assigned) modality weights",
                     ["configuration", "weights", m, *cols, f"Δ {m}", "p", "fallbacks"],
                     rows, note)

    def _swap_table(self) -> Table | None:
        if not self.swaps:
            return None
        m = self.error_metric
        rows = []
        for name, st in self.swaps.items():
            r = self.result(name)
            delta = r.scores.aggregate[m] - self.result(r.parent or "").scores.aggregate[m]
            rows.append([str(r.stage), name, str(r.parent), f"{st.mean_swaps:.2f}",
                         f"{100 * st.top1_changed:.1f}%", str(st.queries), _signed(delta)])
        return Table("Table III. Swap metrics per reranking stage",
                     ["stage", "configuration", "input", f"mean swaps@{self.swap_depth}",
                      "top-1 changed", "queries", f"Δ {m}"], rows,
                     f"Mean swaps: adjacent swaps (Kendall inversions) turning the input order "
                     f"of the output's top {self.swap_depth} into the output order, per query.")

    def _error_table(self) -> Table | None:
        if not self.degradations:
            return None
        rows = [[str(self.result(n).stage), n, str(d.count), f"{100 * d.share:.1f}%",
                 f"{100 * d.share_with_numbers:.1f}%",
                 f"{100 * d.overall_share_with_numbers:.1f}%", f"{d.mean_length:.1f}",
                 f"{d.overall_mean_length:.1f}"] for n, d in self.degradations.items()]
        return Table(f"Table IV. Queries each reranking stage degraded ({self.error_metric})",
                     ["stage", "configuration", "degraded", "share", "with numbers",
                      "with numbers (all)", "mean words", "mean words (all)"], rows,
                     "A query is degraded when its score after the stage is lower than before.")

    def _worst_table(self) -> Table | None:
        rows = []
        for name, d in self.degradations.items():
            for w in d.worst:
                text = str(w["query"])
                text = text if len(text) <= 90 else text[:87] + "..."
                rows.append([name, str(w["query_id"]), text, f"{w['before']:.4f}",
                             f"{w['after']:.4f}"])
        if not rows:
            return None
        return Table(f"Table V. Worst degraded queries per reranking stage ({self.error_metric})",
                     ["configuration", "query id", "query", "before", "after"], rows)

    def _latency_table(self) -> Table:
        groups = [g for g in (*LATENCY_GROUPS, "other")
                  if any(r.latency.get(g, 0) > 0 for r in self.results)]
        rows = [[r.name, *(f"{r.latency.get(g, 0.0):.1f}" for g in groups),
                 f"{r.total_ms:.1f}", f"{r.counters.get('llm_calls', 0):.0f}",
                 f"{r.counters.get('llm_cache_hits', 0):.0f}"] for r in self.results]
        return Table("Table VI. Mean latency per stage (ms/query)",
                     ["configuration", *groups, "total", "LLM calls", "LLM cache hits"], rows,
                     "Each configuration is charged the full cost of every stage it runs, "
                     "including stage outputs replayed from another configuration's run, and "
                     "LLM replies replayed from the on-disk cache at the time they took when "
                     "generated (cold-run latency).")

    def _significance_table(self) -> Table | None:
        if not self.tests:
            return None
        rows = []
        for name, tests in self.tests.items():
            cells = []
            for m in self.test_metrics:
                t = tests[m]
                mark = "†" if t.significant(self.alpha) else ""
                cells.append(f"{_signed(t.delta)} (p={t.p_randomization:.3f}){mark}")
            rows.append([name, *cells])
        return Table(f"Table VII. Paired significance against {self.baseline}",
                     ["configuration", *(f"Δ {m}" for m in self.test_metrics)], rows,
                     f"Δ = configuration - baseline; p from a paired randomization test "
                     f"(sign flips, seed {self.seed}); † p < {self.alpha}.")

    def _reference_table(self) -> Table | None:
        if not self.references:
            return None
        keys = sorted({k for v in self.references.values() for k in v})
        rows = []
        for name, ref in self.references.items():
            ours = next((r for r in self.results if r.name == name), None)
            row = [name]
            for k in keys:
                mine = (ours.total_ms / 1000 if k == "s/query" else ours.scores.aggregate.get(k)
                        ) if ours else None
                row += [f"{mine:.4f}" if mine is not None else "-",
                        f"{ref[k]:.4f}" if k in ref else "-"]
            rows.append(row)
        header = ["configuration"] + [c for k in keys for c in (f"{k} (ours)", f"{k} (paper)")]
        return Table("Reference: published numbers beside ours", header, rows,
                     self.reference_source)

    # -- output --------------------------------------------------------------------------
    def to_markdown(self) -> str:
        head = [f"# {self.title}", "",
                f"- queries: {self.n_queries}; seed: {self.seed}; baseline: {self.baseline}",
                f"- configurations: {', '.join(self.names)}"]
        head += [f"- {n}" for n in self.notes]
        body = [t.to_markdown() for t in self.tables()]
        return "\n".join(head) + "\n\n" + "\n\n".join(body) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title, "n_queries": self.n_queries, "seed": self.seed,
            "baseline": self.baseline, "metrics": self.metrics, "notes": self.notes,
            "configs": [{"name": r.name, "weights": r.weights, "parent": r.parent,
                         "stage": r.stage, "description": r.description,
                         "aggregate": r.scores.aggregate, "latency_ms": r.latency,
                         "counters": r.counters, "per_query": r.scores.per_query}
                        for r in self.results],
            "swaps": {n: asdict(s) for n, s in self.swaps.items()},
            "degradations": {n: asdict(d) for n, d in self.degradations.items()},
            "significance": {n: {m: {**asdict(t), "delta": t.delta} for m, t in ts.items()}
                             for n, ts in self.tests.items()},
            "dynamic_vs_static": {n: {**asdict(t), "delta": t.delta}
                                  for n, t in self.dynamic_tests.items()},
            "dynamic_weights": self.dynamic,
            "references": self.references,
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)


# -- running -------------------------------------------------------------------------------
def _judged(queries: Sequence[Query], qrels: Qrels) -> tuple[list[Query], Qrels]:
    ids = [q.id for q in queries]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:3]
        raise DataError(f"duplicate query ids in the ablation queries (e.g. {dup})")
    sub = {q.id: qrels[q.id] for q in queries if qrels.get(q.id)}
    if not sub:
        raise DataError("none of the ablation queries has relevance judgments")
    return list(queries), sub


def _run_config(cfg: AblationConfig, queries: list[Query], qrels: Qrels,
                metrics: Sequence[str]) -> ConfigResult:
    run = cfg.pipeline.run(queries)
    return ConfigResult(cfg.name, cfg.weights, cfg.parent, cfg.stage, cfg.description,
                        run.rankings, run.trace, evaluate(run.to_run(), qrels, metrics),
                        latency_ms(run.trace, len(queries)), trace_counters(run.trace))


def warm_up(index: Any, llm: Any = None, cross_encoder: Stage | None = None) -> float:
    """Load what loads lazily (index legs, query encoder, cross-encoder session, local LLM)
    so model loading is not charged to the first query's latency; returns the seconds."""
    start = time.perf_counter()
    for leg in LEGS:
        search = getattr(index, f"search_{leg}", None)
        if search is not None:
            search(["warm up"], 1)
    scorer = getattr(cross_encoder, "scorer", None)
    if scorer is not None:
        scorer.predict([("warm up", "warm up")], 1)
    backend = getattr(llm, "llm", llm)
    if hasattr(backend, "load"):
        backend.load()
    return time.perf_counter() - start


def run_ablation(
    index: Any, queries: Sequence[Query], qrels: Qrels, llm: Any = None,
    cross_encoder: Any = None, *, dynamic: bool = True, baseline: str = TRIMODAL,
    metrics: Sequence[str] = DEFAULT_METRICS, test_metrics: Sequence[str] = TEST_METRICS,
    seed: int = 0, weights: WeightSpec = STATIC_WEIGHTS, k: int = 100, final_k: int = 10,
    listwise_depth: int = 5, ce_depth: int | None = None, listwise_chars: int = 600,
    ce_rrf: bool = False, swap_depth: int = 10, error_metric: str = "nDCG@10",
    worst: int = 5, alpha: float = 0.05, n_permutations: int = 10_000,
    configs: Sequence[AblationConfig] | None = None, warm: bool = True,
    log: Callable[[str], None] | None = None,
) -> AblationReport:
    """Run every configuration on the same ``queries`` and measure it (see module doc).

    ``llm`` / ``cross_encoder`` as in :func:`build_configs` (None skips the configurations
    that need them, with a note). ``seed`` fixes the permutation tests; ``configs`` replaces
    the built configurations (e.g. to reuse their caches across calls); ``warm`` loads models
    before timing (:func:`warm_up`).
    """
    missing = [m for m in (*test_metrics, error_metric) if m not in metrics]
    if missing:
        raise ConfigError(f"test and error-analysis metrics must be among metrics: {missing}")
    queries, qrels = _judged(queries, qrels)
    notes: list[str] = []
    llm, ce = _llm_client(llm), _cross_encoder_stage(index, cross_encoder, k)
    if configs is None:
        configs, notes = build_configs(index, llm, ce, dynamic=dynamic, weights=weights, k=k,
                                       final_k=final_k, listwise_depth=listwise_depth,
                                       ce_depth=ce_depth, listwise_chars=listwise_chars,
                                       ce_rrf=ce_rrf)
    if baseline not in [c.name for c in configs]:
        raise ConfigError(f"baseline {baseline!r} is not among the configurations run: "
                          f"{[c.name for c in configs]}")
    if warm:
        notes.append(f"Models and index legs loaded before timing ({warm_up(index, llm, ce):.1f}"
                     f" s, not in the latencies).")
    results = []
    for cfg in configs:
        if log:
            log(f"running {cfg.name} on {len(queries)} queries")
        results.append(_run_config(cfg, queries, qrels, metrics))
    notes += _empty_leg_notes(results, len(queries))
    report = AblationReport(results, list(metrics), list(test_metrics), baseline, seed,
                            len(queries), error_metric, swap_depth, alpha, notes)
    _compare(report, queries, worst, n_permutations)
    return report


def _empty_leg_notes(results: Sequence[ConfigResult], n: int) -> list[str]:
    """A note for each retrieval leg that returned nothing for some queries."""
    notes = []
    for leg in LEGS:
        empty = max((r.trace.stages[leg].counters.get("empty_results", 0) for r in results
                     if leg in r.trace.stages), default=0)
        if empty >= 0.5:
            notes.append(f"The {leg} leg returned no documents for {empty:.0f} of {n} queries"
                         + (" (no entities found in them)." if leg == "graph" else "."))
    return notes


def _compare(report: AblationReport, queries: Sequence[Query], worst: int,
             n_permutations: int) -> None:
    """Fill swaps, error analysis, significance and the dynamic-weight summary."""
    texts = {q.id: q.text for q in queries}
    by_name = {r.name: r for r in report.results}
    m = report.error_metric
    for r in report.results:
        parent = by_name.get(r.parent or "")
        if parent is not None:
            report.swaps[r.name] = swap_stats(parent.rankings, r.rankings, report.swap_depth)
            report.degradations[r.name] = degraded_queries(
                parent.scores.column(m), r.scores.column(m), texts, m, worst)
    base = by_name[report.baseline]
    for r in report.results:
        if r.name != report.baseline:
            report.tests[r.name] = {
                t: paired_test(base.scores.column(t), r.scores.column(t), t, n_permutations,
                               report.seed) for t in report.test_metrics}
        static = by_name.get(r.name.removesuffix(DYNAMIC))
        if r.weights == "dynamic" and static is not None:
            report.dynamic_tests[r.name] = paired_test(
                static.scores.column(m), r.scores.column(m), m, n_permutations, report.seed)
    report.dynamic = dynamic_summary(report.results)


# -- datasets and files (what `intentrank ablate` calls) ----------------------------------
def ablate_dataset(
    dataset: Any, index: Any, split: str = "test", sample: int = 0, seed: int = 0,
    **kwargs: Any,
) -> AblationReport:
    """:func:`run_ablation` on a fixed-seed sample (0 = all) of a dataset split."""
    queries, qrels = dataset.sample(split, sample, seed)
    report = run_ablation(index, queries, qrels, seed=seed, **kwargs)
    report.title = f"Ablation on {dataset.name}/{split}"
    report.notes.insert(0, f"dataset {dataset.name}, split {split}, "
                           f"{'all' if not sample else f'a seed-{seed} sample of'} "
                           f"{len(queries)} queries")
    return report


def write_report(report: AblationReport, out: str | Path) -> list[Path]:
    """Write ``<out>.md``, ``<out>.html`` and ``<out>.json`` (``out`` without suffix)."""
    from intentrank.report.html import render_html

    out = Path(out)
    base = out.with_suffix("") if out.suffix in (".md", ".html", ".json") else out
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = [base.with_name(base.name + ext) for ext in (".md", ".html", ".json")]
    paths[0].write_text(report.to_markdown())
    paths[1].write_text(render_html(report))
    paths[2].write_text(report.to_json())
    return paths


__all__ = ["AblationConfig", "AblationReport", "ConfigResult", "DEFAULT_METRICS",
           "STATIC_WEIGHTS", "Table", "ablate_dataset", "bimodal_weights", "build_configs",
           "run_ablation", "write_report"]
