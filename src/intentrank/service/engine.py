"""The work behind the endpoints, free of HTTP: the indexes and pipelines a service loaded
at start-up, and search, rerank, answer and evaluate as plain functions that return
JSON-ready dicts (run on the worker pool by ``service/app.py``).

A request names an index and a pipeline; both are looked up in the maps built here from the
server's settings, so nothing a request says reaches a file path. A request runs wholly on
one snapshot of the indexes and the pipelines built on them (``service/generations.py``:
an index rebuilt while the service runs is switched to with ``settings.watch_s``)."""

from __future__ import annotations

import base64
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.answer.attribution import cited_passages
from intentrank.core.config import build_pipeline, load_config, resolve_pipeline
from intentrank.core.registry import BuildContext
from intentrank.core.stage import Stage
from intentrank.data.trec import load_qrels, load_run
from intentrank.errors import ConfigError, DataError, IntentrankError
from intentrank.measures.metrics import MetricError, evaluate, validate_metrics
from intentrank.pipelines import build_context, ends_with_answer
from intentrank.report.search import result_rows
from intentrank.service.generations import Generations, Snapshot, Stages, open_indexes
from intentrank.service.pg_scope import scoped_view
from intentrank.service.scope import Scope, ScopedIndex, parse_scope, require_scope, scoped_llm
from intentrank.service.settings import ServiceSettings
from intentrank.types import Document, Query, Ranking, ScoredDoc, Trace

INPUT_SCORE = "input"  # the stage-score name of a /rerank candidate's given position
_SECRET_ENV = re.compile(r"(API_KEY|APIKEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)


class RequestError(IntentrankError):
    """A request the service refuses: HTTP ``status`` with a message naming the problem."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def redact(text: str) -> str:
    """``text`` with the value of every secret-looking environment variable (``*_API_KEY``,
    ``*TOKEN``, ``*SECRET``, ``*PASSWORD``) replaced, so LLM backend keys never reach a
    response or a log line."""
    for name, value in os.environ.items():
        if value and len(value) >= 8 and _SECRET_ENV.search(name) and value in text:
            text = text.replace(value, "[redacted]")
    return text


class CandidateIndex:
    """An in-memory index over a request's own passages: what rerankers read (``doc``,
    ``doc_text``); query encoding is the service's first index's (same embedder)."""

    def __init__(self, docs: list[Document], base: Any = None) -> None:
        self._docs = {d.id: d for d in docs}
        self.ids = [d.id for d in docs]
        self.row_of = {doc_id: i for i, doc_id in enumerate(self.ids)}
        self._base = base

    def __len__(self) -> int:
        return len(self.ids)

    def doc(self, doc_id: str) -> Document:
        return self._docs[doc_id]

    def doc_text(self, doc_id: str) -> str:
        return self._docs[doc_id].full_text()

    def encode_queries(self, texts: list[str]) -> Any:
        if self._base is None:
            raise ConfigError("this reranker needs query embeddings and no index is served")
        return self._base.encode_queries(texts)


def _load(source: Any) -> tuple[Any, str | None]:
    """A served pipeline's config node (``source``: a shipped name, a YAML path or a node)
    and its description: the file's ``description``, else its opening comment, else None."""
    if not isinstance(source, (str, Path)):
        return source, None
    path = resolve_pipeline(source)
    data = load_config(path)
    if isinstance(data.get("description"), str):
        return data["pipeline"], data["description"]
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return data["pipeline"], line.lstrip("# ").strip()
        if line.strip():
            break
    return data["pipeline"], None


@dataclass
class Served:
    """One named pipeline or reranker: its config node, description and whether it answers."""

    name: str
    kind: str  # "search" or "rerank"
    node: Any
    description: str
    answers: bool


class Engine:
    """Indexes and pipelines, loaded once; every method is safe to call from many threads."""

    def __init__(self, settings: ServiceSettings,
                 on_reload: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Open the indexes and build the pipelines of ``settings``; ``on_reload`` gets a
        record per index switched (or reload failed)."""
        self.settings = settings
        indexes, opened = open_indexes(settings.indexes)
        template = build_context(None, llm=settings.llm, llm_options=settings.llm_options)
        self.resources = template.resources  # one LLM client and one loaded model per kind
        llm_lock = threading.Lock()
        make = template.make_llm

        def make_llm(role: str | None = None, spec: str | None = None) -> Any:
            with llm_lock:  # each model built once, however many pipelines or threads ask
                return make(role, spec)  # type: ignore[misc]

        self.make_llm = make_llm
        self.pipelines: dict[str, Served] = {}
        stages: Stages = {}
        for name, source in settings.pipelines.items():
            node, description = _load(source)
            stages[name] = self._build(name, node, indexes)
            if description is None:
                description = next(iter(stages[name].values())).describe()
            self.pipelines[name] = Served(name, "search", node, description,
                                          ends_with_answer(node))
        first_index = next(iter(indexes.values()))
        for name, node in settings.rerankers.items():
            probe = CandidateIndex([Document("probe", "probe")], first_index)
            try:  # built once now: loads its model and checks the config
                stage = build_pipeline(node, self._ctx(probe))
            except IntentrankError as exc:
                raise ConfigError(f"reranker {name!r}: {exc}") from exc
            self.pipelines[name] = Served(name, "rerank", node, stage.describe(),
                                          ends_with_answer(node))
        self.generations = Generations(
            Snapshot(indexes, stages, opened),
            {n: Path(w) for n, w in settings.indexes.items() if isinstance(w, (str, Path))},
            self._search_stages, settings.watch_s, on_reload or (lambda record: None))

    def _build(self, name: str, node: Any, indexes: dict[str, Any]) -> dict[str, Stage]:
        """Pipeline ``name`` built for each of ``indexes``."""
        out = {}
        for index_name, idx in indexes.items():
            try:
                out[index_name] = build_pipeline(node, self._ctx(idx))
            except IntentrankError as exc:
                raise ConfigError(f"pipeline {name!r} on index {index_name!r}: "
                                  f"{exc}") from exc
        return out

    def _search_stages(self, indexes: dict[str, Any]) -> Stages:
        """Every search pipeline built on ``indexes`` (another generation of them)."""
        return {name: self._build(name, served.node, indexes)
                for name, served in self.pipelines.items() if served.kind == "search"}

    @property
    def indexes(self) -> dict[str, Any]:
        """The indexes of the current snapshot."""
        return self.generations.current.indexes

    def _ctx(self, index: Any) -> BuildContext:
        return BuildContext(index, self.resources, self.make_llm)

    def close(self) -> None:
        self.generations.close()

    # -- lookups -----------------------------------------------------------------------
    def index_name(self, name: str | None,
                   allowed: Callable[[str], bool] = lambda name: True) -> str:
        """A served index's name (``None``: the first one ``allowed``), or a 422 naming the
        ``allowed`` ones; names are looked up, never used as paths."""
        names = [n for n in self.indexes if allowed(n)]
        if name is None:
            if not names:
                raise RequestError(403, "this key may use none of the served indexes")
            return names[0]
        if name not in self.indexes:
            raise RequestError(422, f"unknown index {name!r}; served: {', '.join(names)}")
        return name

    def pipeline(self, name: str | None, kind: str) -> Served:
        if name is None:
            name = self.settings.default if kind == "search" else next(
                (n for n, s in self.pipelines.items() if s.kind == "rerank"), "")
        served = self.pipelines.get(name)
        if served is None or served.kind != kind:
            names = [n for n, s in self.pipelines.items() if s.kind == kind]
            what = "pipeline" if kind == "search" else "reranker"
            raise RequestError(422, f"unknown {what} {name!r}; served: "
                                    f"{', '.join(names) or 'none'}")
        return served

    # -- work (run on the worker pool) --------------------------------------------------
    @staticmethod
    def request_scope(scope: Scope, user: str | None) -> Scope:
        """The scope a request runs with: the key's ``scope`` ANDed with the request's own
        filter ``user`` (which can only narrow it); a malformed one is a 422."""
        try:
            return require_scope(scope).narrowed(user)
        except ValueError as exc:  # FilterError: names the position and the token
            raise RequestError(422, f"filter: {exc}") from None

    def view(self, snap: Snapshot, index_name: str, scope: Scope) -> ScopedIndex:
        """Index ``index_name`` of ``snap`` as a request with ``scope`` sees it (kept per
        index and filter; a Postgres table's view pushes the scope into its SQL)."""
        idx, scope = snap.indexes[index_name], require_scope(scope)
        return snap.views.views.get((index_name, scope.filter or "", scope.namespace or ""),
                                    lambda: scoped_view(idx, scope))

    def _scoped_ctx(self, index: Any, scope: str) -> BuildContext:
        """A build context whose LLM clients cache replies per ``scope``."""
        resources = dict(self.resources)
        if "llm" in resources:
            resources["llm"] = scoped_llm(resources["llm"], scope)
        return BuildContext(index, resources,
                            lambda role=None, spec=None: scoped_llm(self.make_llm(role, spec),
                                                                    scope))

    def _stage(self, snap: Snapshot, served: Served, index_name: str, scope: Scope
               ) -> tuple[Stage, Any]:
        """The pipeline to run and the index it reads: for the whole index, the one built at
        start-up; for a filter, the pipeline built on the scoped view (kept for later
        requests)."""
        if scope.whole:
            return snap.stages[served.name][index_name], snap.indexes[index_name]
        assert scope.filter is not None
        view, text = self.view(snap, index_name, scope), scope.filter
        stage = snap.views.stages.get((served.name, index_name, text), lambda: build_pipeline(
            served.node, self._scoped_ctx(view, text)))
        return stage, view

    def visible_documents(self, index_name: str, *, scope: Scope) -> int:
        """How many documents of an index a caller with ``scope`` sees."""
        with self.generations.use() as snap:
            return len(self.view(snap, index_name, scope))

    def search(self, served: Served, index_name: str, query: Query, top_k: int,
               include_text: bool, need_answer: bool, *, scope: Scope) -> dict[str, Any]:
        """Run a search pipeline on one query within ``scope``; the response body."""
        scope = require_scope(scope)
        with self.generations.use() as snap:  # one generation for the whole request
            stage, index = self._stage(snap, served, index_name, scope)
            trace, start = Trace(), time.perf_counter()
            ranking = stage([Ranking(with_filter(query, scope.filter))], trace)[0]
            seconds = time.perf_counter() - start
            if need_answer and ranking.query.answer is None:
                raise RequestError(422, f"pipeline {served.name!r} ran but set no answer")
            out = _response(ranking, trace, index, top_k, include_text, served.name,
                            index_name, seconds)
            out["generation"] = snap.generations[index_name]
            return out

    def _rerank(self, served: Served, query: str, docs: list[Document], scope: Scope
                ) -> tuple[Ranking, Trace, float, CandidateIndex]:
        """Run a reranker over the request's own passages, given order first."""
        scope = require_scope(scope)
        with self.generations.use() as snap:  # the first index encodes queries (dense rerankers)
            candidates = CandidateIndex(docs, next(iter(snap.indexes.values())))
            ctx = self._ctx(candidates) if scope.filter is None else \
                self._scoped_ctx(candidates, scope.filter)
            stage = build_pipeline(served.node, ctx)
            trace, start = Trace(), time.perf_counter()
            ranking = stage([given_order(query, docs)], trace)[0]
            return ranking, trace, time.perf_counter() - start, candidates

    def rerank(self, served: Served, query: str, docs: list[Document],
               top_k: int | None, *, scope: Scope) -> dict[str, Any]:
        """Rerank the request's own passages (given order first) with a reranker; LLM
        replies cached per ``scope``."""
        ranking, trace, seconds, candidates = self._rerank(served, query, docs, scope)
        return _response(ranking, trace, candidates, top_k or len(docs), True, served.name,
                         None, seconds)

    def rerank_texts(self, served: Served, query: str, texts: list[str],
                     top_n: int, *, scope: Scope) -> dict[str, Any]:
        """Cohere's rerank: ``results`` (``index`` in ``texts``, ``relevance_score``: the
        reranker's score), best first, at most ``top_n``; ``fallbacks`` for the log."""
        docs = [Document(str(i), t) for i, t in enumerate(texts)]
        ranking, trace, _, _ = self._rerank(served, query, docs, scope)
        results = [{"index": int(d.doc_id), "relevance_score": d.score}
                   for d in ranking.docs[:top_n]]
        fallbacks = sum(int(st.counters.get("fallbacks", 0)) for st in trace.stages.values())
        return {"results": results, "fallbacks": fallbacks}

    def embedding_models(self) -> list[str]:
        """The indexes whose dense leg can encode texts (the names /v1/embeddings takes)."""
        return [n for n, idx in self.indexes.items()
                if getattr(idx, "has", lambda leg: False)("dense")]

    def embed(self, index_name: str, texts: list[str], base64_out: bool, *, scope: Scope
              ) -> dict[str, Any]:
        """OpenAI's embeddings: ``texts`` encoded by the index's dense query encoder (what
        a dense search of the index encodes a query with, read through ``scope``'s view:
        no document), float lists or base64 of little-endian float32."""
        with self.generations.use() as snap:
            idx = self.view(snap, index_name, scope)
            vecs = np.asarray(idx.encode_queries(list(texts)), dtype=np.float32)
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii")
                 if base64_out else vec.tolist()} for i, vec in enumerate(vecs)]
        tokens = _token_count(getattr(idx, "embedder", None), texts)
        return {"object": "list", "data": data, "model": index_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def evaluate(self, run_text: str, qrels_text: str, metrics: list[str],
                 per_query: bool) -> dict[str, Any]:
        """Metrics of a TREC run against qrels, both given as text."""
        try:
            names = validate_metrics(metrics)
        except MetricError as exc:
            raise RequestError(422, str(exc)) from None
        with tempfile.TemporaryDirectory(prefix="intentrank-eval-") as tmp:
            (Path(tmp) / "run").write_text(run_text, encoding="utf-8")
            (Path(tmp) / "qrels").write_text(qrels_text, encoding="utf-8")
            try:
                run = load_run(Path(tmp) / "run")
                qrels = load_qrels(Path(tmp) / "qrels")
                result = evaluate(run, qrels, names)
            except (DataError, MetricError) as exc:
                raise RequestError(422, str(exc).replace(tmp + os.sep, "")) from None
        return {"metrics": result.aggregate, "queries": len(result.per_query),
                "skipped": result.skipped,
                "per_query": result.per_query if per_query else None}


def _trace_rows(trace: Trace) -> list[dict[str, Any]]:
    return [{"stage": st.name, "seconds": st.seconds, "calls": st.calls, "queries": st.queries,
             "llm_calls": int(st.counters.get("llm_calls", 0)),
             "cache_hits": int(st.counters.get("llm_cache_hits", 0)),
             "fallbacks": int(st.counters.get("fallbacks", 0)),
             "counters": {k: float(v) for k, v in st.counters.items()}}
            for st in trace.stages.values()]


def _plain(value: Any) -> Any:
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return redact(str(value))[:500]


def _response(ranking: Ranking, trace: Trace, index: Any, top_k: int, include_text: bool,
              pipeline: str, index_name: str | None, seconds: float) -> dict[str, Any]:
    results = [{"text": "", **row} for row in result_rows(ranking, index, top_k, include_text)]
    q = ranking.query
    events = [{"stage": e.stage, "event": e.kind.value, "query_id": e.query_id,
               "details": _plain(dict(e.details))} for e in trace.events]
    stages = _trace_rows(trace)
    answer = None
    if q.answer is not None:
        a = q.answer
        answer = {"text": a.text, "fallback": a.fallback, "stage": a.stage,
                  "citations": [{"n": c["n"], "doc_id": c["id"],
                                 "source": c["source"] or c["id"], "title": c["title"],
                                 "text": c["text"], "support": c["support"]}
                                for c in cited_passages(a, index)],
                  "unsupported": [e.sentence for e in a.evidence if e.n is None]}
    return {"index": index_name, "pipeline": pipeline, "query": q.turn, "searched": q.text,
            "derived": [{"kind": d.kind, "text": d.text, "stage": d.stage} for d in q.derived],
            "results": results, "stages": stages, "events": events,
            "fallbacks": sum(s["fallbacks"] for s in stages), "seconds": seconds,
            "answer": answer}


def _token_count(embedder: Any, texts: list[str]) -> int:
    """Tokens ``embedder`` reads for ``texts`` as queries (its prefix added, clipped to its
    length): its ``tokenizers`` tokenizer (ONNX) or its sentence-transformers ``preprocess``;
    words for an embedder with neither."""
    prefixed = [getattr(embedder, "query_prefix", "") + t for t in texts]
    tokenizer = getattr(embedder, "tokenizer", None)
    if hasattr(tokenizer, "encode_batch"):
        return sum(len(e.ids) for e in tokenizer.encode_batch(prefixed))
    model = getattr(embedder, "model", None)
    tokenize = getattr(model, "preprocess", None) or getattr(model, "tokenize", None)
    if tokenize is not None and hasattr(model, "max_seq_length"):  # sentence-transformers
        from intentrank.models.inputs import clip_texts

        mask = tokenize(clip_texts(prefixed, model.max_seq_length))["attention_mask"]
        return int(mask.sum())
    return sum(len(t.split()) for t in prefixed)


def with_filter(query: Query, scope: str | None) -> Query:  # scope: a filter's text
    """``query`` carrying the request's filter (``Query.filter``), for the retrievers' own
    filtering (the scoped view enforces it whatever they do)."""
    return query if scope is None else replace(query, filter=parse_scope(scope))


def given_order(query: str, docs: Sequence[Document]) -> Ranking:
    """``docs`` ranked in the order given: score ``n - i``, also the stage score ``input``
    (what a reranker over a caller's own passages starts from)."""
    n = len(docs)
    return Ranking(Query("q", query), [ScoredDoc(d.id, float(n - i), {INPUT_SCORE: float(n - i)})
                                       for i, d in enumerate(docs)])
