"""One harness for every experiment: run named pipelines on the same queries and measure them.

:func:`run_experiment` takes an experiment (:mod:`intentrank.eval.spec`), builds every
pipeline with one shared build context (one LLM client, one loaded cross-encoder), runs them
in order on the same queries and scores them. A pipeline prefix two pipelines share is
computed once (:mod:`intentrank.eval.prefixes`); replayed steps, and LLM replies replayed
from the on-disk cache (``latency.cold``), are charged their recorded time, so latencies read
"as if this pipeline ran alone, cold".

From the declared links it derives: paired significance of every pipeline against the
baseline and of every child against its ``parent``; swaps and degradations (error analysis)
of each child's added step; the comparison of each ``variant_of`` pair. The result is an
:class:`ExperimentResult`; :mod:`intentrank.report` renders it (Markdown, HTML, JSON).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intentrank.core.stage import RunResult, Stage
from intentrank.data.trec import Qrels
from intentrank.errors import ConfigError, DataError
from intentrank.eval.prefixes import share_prefixes
from intentrank.eval.spec import WITHOUT_LLM, ExperimentSpec, PipelineSpec, load_experiment
from intentrank.measures.error_analysis import Degradation, degraded_queries
from intentrank.measures.metrics import EvalResult, evaluate
from intentrank.measures.significance import PairedTest, paired_test
from intentrank.measures.swaps import SwapStats, swap_stats
from intentrank.paths import default_data_dir
from intentrank.types import EventKind, Query, Ranking, Trace, stage_name

LEGS = ("dense", "bm25", "tfidf", "graph")


# -- results -------------------------------------------------------------------------------
@dataclass
class PipelineResult:
    """One pipeline's rankings, trace, scores, latency (ms/query) and summed counters."""

    spec: PipelineSpec
    describe: str
    rankings: list[Ranking]
    trace: Trace
    scores: EvalResult
    latency: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def total_ms(self) -> float:
        return sum(self.latency.values())

    def to_run(self) -> dict[str, dict[str, float]]:
        """The rankings as a run (:meth:`~intentrank.core.stage.RunResult.to_run`)."""
        return RunResult(self.rankings, self.trace).to_run()


@dataclass
class ExperimentResult:
    """Everything an experiment measured. Tests, swaps and degradations are keyed by the
    pipeline (the child, the variant, or the pipeline tested against the baseline)."""

    spec: ExperimentSpec
    pipelines: list[PipelineResult]
    n_queries: int
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    tests: dict[str, dict[str, PairedTest]] = field(default_factory=dict)
    parent_tests: dict[str, dict[str, PairedTest]] = field(default_factory=dict)
    variant_tests: dict[str, dict[str, PairedTest]] = field(default_factory=dict)
    swaps: dict[str, SwapStats] = field(default_factory=dict)
    degradations: dict[str, Degradation] = field(default_factory=dict)
    llm_weights: dict[str, dict[str, Any]] = field(default_factory=dict)
    computed: dict[str, int] = field(default_factory=dict)  # step key -> queries computed

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.pipelines]

    @property
    def title(self) -> str:
        return self.spec.title or (f"Experiment on {self.spec.dataset}/{self.spec.split}"
                                   if self.spec.dataset else "Experiment")

    @property
    def baseline(self) -> str | None:
        return self.spec.baseline

    @property
    def seed(self) -> int:
        return self.spec.seed if self.spec.test_seed is None else self.spec.test_seed

    def result(self, name: str) -> PipelineResult:
        if (found := self.get(name)) is None:
            raise KeyError(f"no pipeline {name!r}; ran {self.names}")
        return found

    def get(self, name: str | None) -> PipelineResult | None:
        return next((r for r in self.pipelines if r.name == name), None)


# -- latency and counters -----------------------------------------------------------------
def latency_ms(trace: Trace, n_queries: int, columns: dict[str, list[str]] | None = None,
               llm_columns: dict[str, str] | None = None, cold: bool = True) -> dict[str, float]:
    """Milliseconds per query in each column; ``columns``, ``llm_columns`` and ``cold`` (the
    counter ``llm_cached_seconds``) as in :class:`~intentrank.eval.spec.LatencySpec`."""
    columns, llm_columns = columns or {}, llm_columns or {}
    out = dict.fromkeys([*columns, *llm_columns.values()], 0.0)
    n = max(n_queries, 1)
    for path_id, st in trace.stages.items():
        names = (path_id, stage_name(path_id))
        group = next((c for c, listed in columns.items() if any(x in listed for x in names)),
                     "other" if columns else path_id)
        cached = st.counters.get("llm_cached_seconds", 0.0) if cold else 0.0
        seconds = st.seconds + cached
        llm_column = next((llm_columns[x] for x in names if x in llm_columns), None)
        if llm_column is not None:
            llm = min(st.counters.get("llm_seconds", 0.0) + cached, seconds)
            out[llm_column] += 1000 * llm / n
            seconds -= llm
        out[group] = out.get(group, 0.0) + 1000 * seconds / n
    return out


def trace_counters(trace: Trace) -> dict[str, float]:
    """Every counter summed over the trace's stages."""
    totals: Counter[str] = Counter()
    for st in trace.stages.values():
        totals.update(st.counters)
    return dict(totals)


def llm_weight_summary(traces: Sequence[Trace]) -> dict[str, dict[str, Any]]:
    """Per stage that logs ``weights`` events (per-query LLM weights): the queries, the mean
    weights, the share taken from the LLM and the fallbacks by kind (the event's ``kind``,
    else the first clause of its reason)."""
    weights: dict[str, dict[str, dict]] = {}
    kinds: dict[str, dict[str, str]] = {}
    for trace in traces:
        for ev in trace.events:
            stage, qid = ev.stage, ev.query_id
            if ev.kind == EventKind.WEIGHTS and qid is not None:
                weights.setdefault(stage, {})[qid] = ev.details
            elif ev.kind == EventKind.FALLBACK and qid is not None:
                kind = ev.details.get("kind") or str(ev.details.get("reason", "other")
                                                     ).split(":")[0]
                kinds.setdefault(stage, {})[qid] = kind
    out = {}
    for stage, evs in weights.items():
        n, width = len(evs), min(len(ev["weights"]) for ev in evs.values())
        out[stage] = {"queries": n,
                      "mean_weights": [sum(ev["weights"][i] for ev in evs.values()) / n
                                       for i in range(width)],
                      "llm_share": sum(ev.get("source") == "llm" for ev in evs.values()) / n,
                      "fallbacks": dict(Counter(kinds.get(stage, {}).values()))}
    return out


# -- building ------------------------------------------------------------------------------
class _NeedsLLM(Exception):
    """Raised by the build context of a run without LLM stages."""


def node_names(node: Any) -> set[str]:
    """Stage names and fusion methods a config node uses (and strings that look like them)."""
    if isinstance(node, str):
        return {node}
    if isinstance(node, list):
        return set().union(*map(node_names, node))
    if isinstance(node, dict):
        return set().union(*({str(k)} | node_names(v) for k, v in node.items()))
    return set()


def _contexts(spec: ExperimentSpec, indexes: dict[str | None, Any], llm: Any,
              resources: dict[str, Any], without: set[str]) -> dict[str | None, Any]:
    from intentrank.core.registry import BuildContext
    from intentrank.pipelines import build_context

    base = build_context(None, **({"llm": llm} if llm is not None else {}), **resources)
    make_llm = base.make_llm
    if WITHOUT_LLM in without:
        def make_llm(role: str | None = None, spec: str | None = None) -> Any:
            raise _NeedsLLM
        base.resources.pop("llm", None)
    return {name: BuildContext(idx, base.resources, make_llm) for name, idx in indexes.items()}


def build_pipelines(spec: ExperimentSpec, contexts: dict[str | None, Any],
                    without: set[str]) -> tuple[dict[str, Stage], dict[str, str]]:
    """Every pipeline of ``spec`` (one shared build context per index) and the ones skipped
    because they use a stage in ``without`` (or an LLM, for ``"llm"``), with the reason."""
    from intentrank.pipelines import build_pipeline

    where = spec.source
    built, skipped = {}, {}
    for p in spec.pipelines:
        if p.stage is not None:
            built[p.name] = p.stage
            continue
        off = sorted(node_names(p.node) & without)
        if off:
            skipped[p.name] = f"uses {', '.join(off)} (switched off)"
            continue
        try:
            built[p.name] = build_pipeline(p.node, contexts[p.index],
                                           f"{where}: pipelines.{p.name}")
        except _NeedsLLM:
            skipped[p.name] = "calls an LLM (LLM stages switched off)"
    return built, skipped


def _open_index(path: Path, ds: Any, settings: dict[str, Any] | None, log: Callable) -> Any:
    from intentrank.index import IndexSettings, open_or_build

    conf = IndexSettings.from_dict(settings) if settings else None
    return open_or_build(ds.corpus, path, conf, log=log, source=str(ds.root))


def warm_up(indexes: Sequence[Any], stages: Sequence[Stage], llm: Any) -> float:
    """Load what loads lazily (index legs, query encoder, cross-encoder session, a local
    LLM), so loading is not charged to the first query; returns the seconds."""
    start = time.perf_counter()
    for idx in indexes:
        for leg in LEGS:
            if hasattr(idx, f"search_{leg}") and (not hasattr(idx, "has") or idx.has(leg)):
                getattr(idx, f"search_{leg}")(["warm up"], 1)
    seen: set[int] = set()
    todo = list(stages)
    while todo:
        s = todo.pop()
        todo += [v for v in vars(s).values() if isinstance(v, Stage)]
        todo += [v for vs in vars(s).values() if isinstance(vs, list) for v in vs
                 if isinstance(v, Stage)]
        scorer = getattr(s, "scorer", None)
        if hasattr(scorer, "predict") and id(scorer) not in seen:
            seen.add(id(scorer))
            scorer.predict([("warm up", "warm up")], 1)
    backend = getattr(llm, "llm", llm)
    if hasattr(backend, "load"):
        backend.load()
    return time.perf_counter() - start


# -- running -------------------------------------------------------------------------------
def _judged(queries: Sequence[Query], qrels: Qrels) -> tuple[list[Query], Qrels]:
    ids = [q.id for q in queries]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:3]
        raise DataError(f"duplicate query ids in the experiment's queries (e.g. {dup})")
    sub = {q.id: qrels[q.id] for q in queries if qrels.get(q.id)}
    if not sub:
        raise DataError("none of the experiment's queries has relevance judgments")
    return list(queries), sub


def load_experiment_dataset(spec: ExperimentSpec, data_root: str | Path | None = None) -> Any:
    """The experiment's dataset: ``spec.dataset`` as a directory, else under ``data_root``
    (default ``$INTENTRANK_DATA`` or ``../shared/data``)."""
    from intentrank.data.dataset import load_dataset

    if not spec.dataset:
        raise ConfigError(f"{spec.source}: no dataset given")
    where = Path(spec.dataset)
    return load_dataset(where if where.is_dir() else Path(data_root or default_data_dir()) / where)


def run_experiment(
    spec: ExperimentSpec | str | Path, *, index: Any = None, dataset: Any = None,
    queries: Sequence[Query] | None = None, qrels: Qrels | None = None, llm: Any = None,
    resources: dict[str, Any] | None = None, without: Sequence[str] = (),
    data_root: str | Path | None = None, log: Callable[[str], None] | None = None,
) -> ExperimentResult:
    """Run the experiment ``spec`` (a spec, a file or a shipped name); see the module doc.

    ``dataset``: a loaded dataset (default: ``spec.dataset`` under ``data_root``, default
    ``$INTENTRANK_DATA`` or ``../shared/data``); ``queries``/``qrels`` replace its sample.
    ``index``: the main index (default ``spec.index`` or ``indexes/<dataset>``, built if
    missing). ``llm``: a client, backend or spec string for the LLM stages (default
    ``embedded``); ``resources``: more shared build resources. ``without``: stage names (or
    fusion methods, or ``"llm"``) whose pipelines are skipped, with a note.
    """
    spec = load_experiment(spec) if isinstance(spec, str | Path) else spec.check()
    say = log or (lambda message: None)
    result_notes: list[str] = []
    warnings: list[str] = []
    loaded = dataset is None and (queries is None or index is None or bool(spec.indexes))
    if loaded:
        dataset = load_experiment_dataset(spec, data_root)
    if queries is None:
        queries, qrels = dataset.sample(spec.split, spec.sample, spec.seed)
        result_notes.append(f"dataset {dataset.name}, split {spec.split}, " + (
            f"a seed-{spec.seed} sample of {len(queries)} queries" if spec.sample
            else f"all {len(queries)} queries"))
    queries, qrels = _judged(queries, qrels or {})
    name = dataset.name if dataset is not None else spec.dataset
    if index is None:
        index = _open_index(Path(spec.index or Path("indexes") / name), dataset, None, say)
    indexes: dict[str | None, Any] = {None: index}
    for key, conf in spec.indexes.items():
        conf = dict(conf)
        where = Path(conf.pop("dir", None) or Path("indexes") / f"{name}-{key}")
        indexes[key] = _open_index(where, dataset, conf, say)
    if loaded and hasattr(index, "doc_and_parent_ids"):  # a caller's dataset: its checks
        dataset.check_qrels(index.doc_and_parent_ids)
        warnings += list(getattr(dataset, "warnings", []))
    contexts = _contexts(spec, indexes, llm, dict(resources or {}), set(without))
    built, skipped = build_pipelines(spec, contexts, set(without))
    if spec.baseline is not None and spec.baseline not in built:
        raise ConfigError(f"baseline {spec.baseline!r} is skipped ({skipped[spec.baseline]}); "
                          f"choose another baseline")
    result_notes += [f"{n} skipped: it {why}." for n, why in skipped.items()]
    shared_llm = contexts[None].resources.get("llm")
    if spec.latency.warm_up:
        seconds = warm_up(list(indexes.values()), list(built.values()), shared_llm)
        result_notes.append(f"Models and index legs loaded before timing ({seconds:.1f} s, "
                            f"not in the latencies).")
    store: dict = {}
    results = []
    lat = spec.latency
    for name, stage in built.items():  # in the order of spec.pipelines
        say(f"running {name} on {len(queries)} queries")
        run = share_prefixes(stage, store).run(queries)
        results.append(PipelineResult(
            spec.pipeline(name), stage.describe(), run.rankings, run.trace,
            evaluate(run.to_run(), qrels, spec.metrics),
            latency_ms(run.trace, len(queries), lat.columns, lat.llm_columns, lat.cold),
            trace_counters(run.trace)))
    notes = [*result_notes, *spec.notes, *_empty_notes(results, len(queries))]
    result = ExperimentResult(spec, results, len(queries), notes, warnings, skipped,
                              computed={key: len(outputs) for key, outputs in store.items()})
    compare(result, queries)
    return result


def _empty_notes(results: Sequence[PipelineResult], n: int) -> list[str]:
    """A note for each stage that returned nothing for some queries."""
    empty: dict[str, float] = {}
    for r in results:
        for stage, st in r.trace.stages.items():
            empty[stage] = max(empty.get(stage, 0), st.counters.get("empty_results", 0))
    return [f"The {stage} stage returned no documents for {count:.0f} of {n} queries."
            for stage, count in empty.items() if count >= 0.5]


def compare(result: ExperimentResult, queries: Sequence[Query]) -> None:
    """Fill the tests against the baseline, against each parent and between variants, the
    swaps and degradations of each child, and the LLM-weight summary."""
    spec, texts = result.spec, {q.id: q.text for q in queries}
    m, seed, n_perm = spec.primary_metric, result.seed, spec.permutations

    def tests(a: PipelineResult, b: PipelineResult, metrics: Sequence[str]) -> dict:
        return {t: paired_test(a.scores.column(t), b.scores.column(t), t, n_perm, seed)
                for t in metrics}

    base = result.get(spec.baseline)
    for r in result.pipelines:
        parent, other = result.get(r.spec.parent), result.get(r.spec.variant_of)
        if parent is not None:
            result.swaps[r.name] = swap_stats(parent.rankings, r.rankings, spec.swap_depth)
            result.degradations[r.name] = degraded_queries(
                parent.scores.column(m), r.scores.column(m), texts, m, spec.worst)
            result.parent_tests[r.name] = tests(parent, r, spec.test_metrics)
        if base is not None and r is not base:
            result.tests[r.name] = tests(base, r, spec.test_metrics)
        if other is not None:
            result.variant_tests[r.name] = tests(other, r, spec.variant_metrics)
    result.llm_weights = llm_weight_summary([r.trace for r in result.pipelines])


__all__ = ["ExperimentResult", "PipelineResult", "build_pipelines", "compare",
           "latency_ms", "llm_weight_summary", "load_experiment_dataset", "node_names",
           "run_experiment", "trace_counters", "warm_up"]
