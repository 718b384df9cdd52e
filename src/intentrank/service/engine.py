"""The work behind the endpoints, free of HTTP: the indexes and pipelines a service loaded
at start-up, and search, rerank, answer and evaluate as plain functions that return
JSON-ready dicts (run on the worker pool by ``service/app.py``).

A request names an index and a pipeline; both are looked up in the maps built here from the
server's settings, so nothing a request says reaches a file path.

Generations: the open indexes and the pipeline stages built on them form one
:class:`Snapshot`. A request takes the current snapshot once and runs wholly on it. With
``settings.watch_s`` a thread checks each index directory's ``CURRENT`` that often; when a
rebuild has committed a new generation it opens it, builds every pipeline on it and swaps the
snapshot in one assignment, so each request sees one generation, old or new, never a mix
(responses name it: ``generation``). The old snapshot's indexes close when its last request
ends (then a later build may delete their generation). Each switch is logged and counted in
``/health``."""

from __future__ import annotations

import base64
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.answer.attribution import cited_passages
from intentrank.core.config import build_pipeline, load_config, resolve_pipeline
from intentrank.core.registry import BuildContext
from intentrank.core.stage import Stage
from intentrank.data.trec import load_qrels, load_run
from intentrank.errors import ConfigError, DataError, IntentrankError
from intentrank.index.store import Index
from intentrank.measures.metrics import MetricError, evaluate, validate_metrics
from intentrank.pipelines import build_context
from intentrank.report.search import result_rows
from intentrank.service.settings import ServiceSettings
from intentrank.types import Document, Query, Ranking, ScoredDoc, Trace, Turn

ANSWER_STAGES = frozenset({"answer"})  # config names of stages that set Query.answer
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


def _ends_with(node: Any) -> str:
    """The config name of a pipeline node's last step ("" for a cutoff or a fusion)."""
    while isinstance(node, list) and node:
        node = node[-1]
    if isinstance(node, str):
        return node
    if isinstance(node, dict) and len(node) == 1:
        return str(next(iter(node)))
    return ""


def _description(source: Any, data: dict[str, Any] | None, stage_text: str) -> str:
    if data and isinstance(data.get("description"), str):
        return data["description"]
    if isinstance(source, Path) and source.is_file():
        for line in source.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                return line.lstrip("# ").strip()
            if line.strip():
                break
    return stage_text


@dataclass
class Served:
    """One named pipeline: its config node and the stage built for each index."""

    name: str
    kind: str  # "search" or "rerank"
    node: Any
    description: str
    answers: bool


@dataclass
class Snapshot:
    """The indexes served at one moment and every search pipeline built on them: what one
    request runs on from start to end. ``stages[pipeline][index]``; ``generations``: index
    name -> the generation it reads (None for an index object served as given)."""

    indexes: dict[str, Any]
    stages: dict[str, dict[str, Stage]]
    generations: dict[str, str | None]
    opened: list[Index] = field(default_factory=list)  # closed when retired and unused
    users: int = 0
    retired: bool = False

    def close(self) -> None:
        for idx in self.opened:
            idx.close()
        self.opened = []


class Engine:
    """Indexes and pipelines, loaded once; every method is safe to call from many threads."""

    def __init__(self, settings: ServiceSettings, log: Callable[[str], None] = print,
                 on_reload: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Open the indexes and build the pipelines of ``settings``; ``log`` gets progress
        and reload lines, ``on_reload`` a record per index switched (or reload failed)."""
        self.settings, self.log = settings, log
        self.on_reload = on_reload or (lambda record: None)
        self._swap = threading.Lock()  # guards the snapshot reference and its user counts
        self._reloading = threading.Lock()
        self.reloads = 0
        self.reload_errors = 0
        indexes, opened = {}, []
        for name, where in settings.indexes.items():
            if isinstance(where, (str, Path)):
                log(f"opening index {name}: {where}")
                idx = Index.open(where)
                opened.append(idx)
                indexes[name] = idx
            else:  # served as is: Index.doc reads positionally (os.pread), no lock needed
                indexes[name] = where
        for name, idx in indexes.items():
            _warm(name, idx, log)
        template = build_context(None, llm=settings.llm, llm_options=settings.llm_options)
        self.resources = template.resources  # one LLM client and one loaded model per kind
        llm_lock = threading.Lock()
        make = template.make_llm

        def make_llm(role: str | None = None, spec: str | None = None) -> Any:
            with llm_lock:  # each model built once, however many pipelines or threads ask
                return make(role, spec)  # type: ignore[misc]

        self.make_llm = make_llm
        self.pipelines: dict[str, Served] = {}
        stages: dict[str, dict[str, Stage]] = {}
        for name, source in settings.pipelines.items():
            node, data, path = self._node(name, source)
            stages[name] = self._build(name, node, indexes, log)
            first = next(iter(stages[name].values()))
            self.pipelines[name] = Served(name, "search", node,
                                          _description(path, data, first.describe()),
                                          _ends_with(node) in ANSWER_STAGES)
        self._snapshot = Snapshot(indexes, stages, {n: getattr(i, "generation", None)
                                                    for n, i in indexes.items()}, opened)
        first_index = next(iter(indexes.values()))
        for name, node in settings.rerankers.items():
            probe = CandidateIndex([Document("probe", "probe")], first_index)
            try:  # built once now: loads its model and checks the config
                stage = build_pipeline(node, self._ctx(probe))
            except IntentrankError as exc:
                raise ConfigError(f"reranker {name!r}: {exc}") from exc
            self.pipelines[name] = Served(name, "rerank", node, stage.describe(),
                                          _ends_with(node) in ANSWER_STAGES)
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        if settings.watch_s:
            self._watcher = threading.Thread(target=self._watch, name="intentrank-watch",
                                             daemon=True)
            self._watcher.start()

    def _build(self, name: str, node: Any, indexes: dict[str, Any],
               log: Callable[[str], None]) -> dict[str, Stage]:
        """Pipeline ``name`` built for each of ``indexes``."""
        out = {}
        for index_name, idx in indexes.items():
            log(f"building pipeline {name} for index {index_name}")
            try:
                out[index_name] = build_pipeline(node, self._ctx(idx))
            except IntentrankError as exc:
                raise ConfigError(f"pipeline {name!r} on index {index_name!r}: "
                                  f"{exc}") from exc
        return out

    # -- generations -------------------------------------------------------------------
    @property
    def indexes(self) -> dict[str, Any]:
        """The indexes of the current snapshot."""
        return self._snapshot.indexes

    @property
    def generations(self) -> dict[str, str | None]:
        """Index name -> the generation the current snapshot reads."""
        return dict(self._snapshot.generations)

    @contextmanager
    def use(self) -> Iterator[Snapshot]:
        """The current snapshot, kept open until the block ends."""
        with self._swap:
            snap = self._snapshot
            snap.users += 1
        try:
            yield snap
        finally:
            with self._swap:
                snap.users -= 1
                done = snap.retired and snap.users == 0
            if done:
                snap.close()
                _trim_heap()

    def _watched(self) -> dict[str, Path]:
        return {n: Path(w) for n, w in self.settings.indexes.items()
                if isinstance(w, (str, Path))}

    def _watch(self) -> None:
        """Until :meth:`close`: every ``watch_s`` seconds, reload when a watched index's
        CURRENT names another generation than the one served."""
        from intentrank.index import layout

        failed: dict[str, str | None] = {}
        while not self._stop.wait(self.settings.watch_s):
            try:
                now = {n: layout.read_current(p) for n, p in self._watched().items()}
            except (OSError, IntentrankError) as exc:  # mid-replace or damaged: next time
                self.log(f"index watch: cannot read CURRENT ({exc}); keeping the served "
                         f"generations")
                continue
            served = self._snapshot.generations
            if now != failed and any(gen is not None and gen != served.get(n)
                                     for n, gen in now.items()):
                failed = now if not self.reload() else {}  # a failed one: not again

    def reload(self) -> dict[str, tuple[str | None, str | None]]:
        """Open the live generation of every index directory, build every search pipeline
        on them and switch to the new snapshot at once; index name -> (old, new generation)
        for those that changed. On any error the served snapshot stays and the error is
        logged and counted (``reload_errors``)."""
        with self._reloading:  # one reload at a time (the watcher, or a caller)
            return self._reload()

    def _reload(self) -> dict[str, tuple[str | None, str | None]]:
        old = self._snapshot
        indexes, opened = dict(old.indexes), []
        try:
            for name, path in self._watched().items():
                idx = Index.open(path)
                if idx.generation == old.generations.get(name):
                    idx.close()
                    continue
                opened.append(idx)
                _share_models(old.indexes.get(name), idx)
                _warm(name, idx, lambda m: None)
                indexes[name] = idx
            if not opened:
                return {}
            stages = {name: self._build(name, served.node, indexes, lambda m: None)
                      for name, served in self.pipelines.items() if served.kind == "search"}
        except (OSError, IntentrankError) as exc:
            for idx in opened:
                idx.close()
            self.reload_errors += 1
            self.log(f"index reload failed, still serving {old.generations}: {exc}")
            self.on_reload({"event": "index_reload_failed", "serving": old.generations,
                            "error": str(exc)[:500]})
            return {}
        generations = {n: getattr(i, "generation", None) for n, i in indexes.items()}
        changed_names = {n for n in indexes if generations[n] != old.generations.get(n)}
        keep = [i for i in old.opened if any(i is v for v in indexes.values())]
        new = Snapshot(indexes, stages, generations, opened + keep)
        with self._swap:
            self._snapshot = new
            self.reloads += 1
            old.opened = [i for i in old.opened if not any(i is k for k in keep)]
            old.retired = True
            done = old.users == 0
        if done:
            old.close()
            _trim_heap()
        changed = {n: (old.generations.get(n), generations[n]) for n in changed_names}
        for n, (a, b) in changed.items():
            self.log(f"index {n}: now serving generation {b} (was {a}; reload "
                     f"{self.reloads})")
            self.on_reload({"event": "index_reload", "index": n, "from": a, "to": b,
                            "reload": self.reloads})
        return changed

    def _ctx(self, index: Any) -> BuildContext:
        return BuildContext(index, self.resources, self.make_llm)

    @staticmethod
    def _node(name: str, source: Any) -> tuple[Any, dict[str, Any] | None, Path | None]:
        if isinstance(source, (str, Path)):
            path = resolve_pipeline(source)
            data = load_config(path)
            return data["pipeline"], data, path
        return source, None, None

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=30)
        with self._swap:
            snap = self._snapshot
            snap.retired = True
        snap.close()

    # -- lookups -----------------------------------------------------------------------
    def index_name(self, name: str | None) -> str:
        if name is None:
            return next(iter(self.indexes))
        if name not in self.indexes:
            raise RequestError(422, f"unknown index {name!r}; served: "
                                    f"{', '.join(self.indexes)}")
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
    def search(self, served: Served, index_name: str, query: Query, top_k: int,
               include_text: bool, need_answer: bool = False) -> dict[str, Any]:
        """Run a search pipeline on one query; the response body."""
        with self.use() as snap:  # one generation for the whole request
            trace, start = Trace(), time.perf_counter()
            ranking = snap.stages[served.name][index_name]([Ranking(query)], trace)[0]
            seconds = time.perf_counter() - start
            if need_answer and ranking.query.answer is None:
                raise RequestError(422, f"pipeline {served.name!r} ran but set no answer")
            out = _response(ranking, trace, snap.indexes[index_name], top_k, include_text,
                            served.name, index_name, seconds)
            out["generation"] = snap.generations[index_name]
            return out

    def _rerank(self, served: Served, query: str, docs: list[Document]
                ) -> tuple[Ranking, Trace, float, CandidateIndex]:
        """Run a reranker over the request's own passages, given order first."""
        with self.use() as snap:  # the first index encodes queries (dense rerankers)
            candidates = CandidateIndex(docs, next(iter(snap.indexes.values())))
            stage = build_pipeline(served.node, self._ctx(candidates))
            n = len(docs)
            ranking = Ranking(Query("q", query), [ScoredDoc(d.id, float(n - i),
                                                            {INPUT_SCORE: float(n - i)})
                                                  for i, d in enumerate(docs)])
            trace, start = Trace(), time.perf_counter()
            ranking = stage([ranking], trace)[0]
            return ranking, trace, time.perf_counter() - start, candidates

    def rerank(self, served: Served, query: str, docs: list[Document],
               top_k: int | None) -> dict[str, Any]:
        """Rerank the request's own passages (given order first) with a reranker."""
        ranking, trace, seconds, candidates = self._rerank(served, query, docs)
        return _response(ranking, trace, candidates, top_k or len(docs), True, served.name,
                         None, seconds)

    def rerank_texts(self, served: Served, query: str, texts: list[str],
                     top_n: int) -> dict[str, Any]:
        """Cohere's rerank: ``results`` (``index`` in ``texts``, ``relevance_score``: the
        reranker's score), best first, at most ``top_n``; ``fallbacks`` for the log."""
        docs = [Document(str(i), t) for i, t in enumerate(texts)]
        ranking, trace, _, _ = self._rerank(served, query, docs)
        results = [{"index": int(d.doc_id), "relevance_score": d.score}
                   for d in ranking.docs[:top_n]]
        fallbacks = sum(int(st.counters.get("fallbacks", 0)) for st in trace.stages.values())
        return {"results": results, "fallbacks": fallbacks}

    def embedding_models(self) -> list[str]:
        """The indexes whose dense leg can encode texts (the names /v1/embeddings takes)."""
        return [n for n, idx in self.indexes.items()
                if getattr(idx, "has", lambda leg: False)("dense")]

    def embed(self, index_name: str, texts: list[str], base64_out: bool) -> dict[str, Any]:
        """OpenAI's embeddings: ``texts`` encoded by the index's dense query encoder (what
        a dense search of the index encodes a query with), float lists or base64 of
        little-endian float32."""
        with self.use() as snap:
            idx = snap.indexes[index_name]
            vecs = np.asarray(idx.encode_queries(list(texts)), dtype=np.float32)
        data = []
        for i, vec in enumerate(vecs):
            out: Any = base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii") \
                if base64_out else vec.tolist()
            data.append({"object": "embedding", "index": i, "embedding": out})
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


def _share_models(old: Any, new: Any) -> None:
    """Give ``new`` (another generation of the same index) ``old``'s loaded query embedder
    when both were built with the same dense settings: the model does not depend on the
    generation, so a reload neither loads it again nor holds two copies."""
    loaded = getattr(old, "__dict__", {}).get("embedder")
    same = getattr(getattr(old, "settings", None), "dense", None) == \
        getattr(getattr(new, "settings", None), "dense", object())
    if loaded is not None and same and new.has("dense"):
        new.__dict__["embedder"] = loaded  # Index.embedder is a cached_property


def _trim_heap() -> None:
    """Hand memory freed by a retired generation back to the OS (glibc keeps freed heap
    otherwise, and the process's RSS would step up at every reload)."""
    import ctypes
    import gc

    gc.collect()
    with suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _warm(name: str, idx: Any, log: Callable[[str], None]) -> None:
    """Load the query embedder and compile numba now, not on the first request."""
    has = getattr(idx, "has", lambda leg: False)
    if has("dense"):
        log(f"loading the query embedder of index {name}")
        idx.encode_queries(["warm-up"])
    if has("bm25") and idx.bm25_backend == "numba":
        log(f"compiling the numba BM25 search of index {name} (a few seconds)")
        idx.search_bm25(["warm-up"], 1)


def _trace_rows(trace: Trace) -> list[dict[str, Any]]:
    rows = []
    for st in trace.stages.values():
        c = st.counters
        rows.append({"stage": st.name, "seconds": st.seconds, "calls": st.calls,
                     "queries": st.queries, "llm_calls": int(c.get("llm_calls", 0)),
                     "cache_hits": int(c.get("llm_cache_hits", 0)),
                     "fallbacks": int(c.get("fallbacks", 0)),
                     "counters": {k: float(v) for k, v in c.items()}})
    return rows


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
                  "citations": [{"n": c["n"], "doc_id": c["id"], "title": c["title"],
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


def make_query(text: str | None, turns: list[tuple[str, str]] | None) -> Query:
    """A one-off query, or the last question of a conversation with its earlier turns."""
    if turns is None:
        return Query("q", text or "")
    return Query("q", text or "", history=tuple(Turn(q, a) for q, a in turns))
