"""The data model every stage speaks: queries, documents, rankings and traces."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from intentrank.filters import Filter


@dataclass(frozen=True)
class DerivedText:
    """A text a stage derived from a query (rewrite, follow-up, aspect, ...)."""

    kind: str
    text: str
    stage: str


@dataclass(frozen=True)
class Turn:
    """An earlier turn of a conversation: the user's question and, when known, the
    system's answer (for TREC CAsT 2021, the canonical response passage)."""

    question: str
    answer: str = ""


@dataclass(frozen=True)
class Evidence:
    """Why an answer sentence cites what it cites: the cited number (None: no given passage
    supports the sentence well enough), that passage's support score and the passage
    sentence that overlaps the answer sentence most."""

    sentence: str
    n: int | None
    score: float
    snippet: str = ""


@dataclass(frozen=True)
class Answer:
    """A generated answer grounded in numbered documents.

    ``sources`` are the documents the generator was given, in prompt order (``[1]`` is
    ``sources[0]``); ``citations`` the 1-based numbers the answer cites that exist among them
    (first-cited order, no repeats); ``fallback`` names why the reply was not used as written
    (``no_documents``, ``no_citation``, ``bad_citation``, ``empty``, ...), empty when it was;
    ``evidence``: per sentence, what supports it (post-hoc attribution)."""

    text: str
    sources: tuple[str, ...]
    citations: tuple[int, ...]
    stage: str
    fallback: str = ""
    evidence: tuple[Evidence, ...] = ()  # per answer sentence, when citations are attributed

    @property
    def cited_ids(self) -> list[str]:
        """The document ids the answer cites, in citation order."""
        return [self.sources[n - 1] for n in self.citations]


@dataclass(frozen=True)
class Query:
    """A query with its conversation history (the earlier turns, oldest first; empty for a
    standalone query) and a stack of derived texts.

    ``filter`` restricts which documents may answer it (a :class:`~intentrank.filters.Filter`
    or its text, parsed here; retrievers AND it with their own ``filter``). A reformulation
    stage replaces ``text`` (what later stages search and score) and pushes
    the text it replaced as kind ``original``; :attr:`turn` is the user's own words. An
    answer stage sets :attr:`answer` (what the pipeline says, citing its documents)."""

    id: str
    text: str
    history: tuple[Turn, ...] = ()
    derived: tuple[DerivedText, ...] = ()
    answer: Answer | None = None
    filter: Filter | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "filter", Filter.from_value(self.filter, "Query.filter"))

    @property
    def turn(self) -> str:
        """The text before any reformulation (the user's contextual turn)."""
        originals = self.derived_of("original")
        return originals[0] if originals else self.text

    def reformulated(self, text: str, stage: str, kind: str = "rewrite") -> Query:
        """A copy searching ``text``: the old text is kept as kind ``original`` (once, the
        user's turn) and ``text`` is pushed as ``kind``."""
        derived = self.derived
        if not self.derived_of("original"):
            derived += (DerivedText("original", self.text, stage),)
        return replace(self, text=text, derived=derived + (DerivedText(kind, text, stage),))

    def with_derived(self, kind: str, texts: list[str] | tuple[str, ...], stage: str) -> Query:
        """Return a copy with ``texts`` pushed onto the derived-text stack."""
        extra = tuple(DerivedText(kind, t, stage) for t in texts)
        return replace(self, derived=self.derived + extra)

    def derived_of(self, kind: str) -> list[str]:
        """Texts of one kind, oldest first."""
        return [d.text for d in self.derived if d.kind == kind]


@dataclass(frozen=True)
class Document:
    """A document or passage; ``parent_id`` is set on chunks of a longer document."""

    id: str
    text: str
    title: str = ""
    parent_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def full_text(self, sep: str = " ") -> str:
        """Title and text joined, as encoders and rerankers see them."""
        return f"{self.title}{sep}{self.text}" if self.title else self.text

    def filter_record(self) -> dict[str, Any]:
        """What a filter sees of the document: its metadata plus ``id`` and ``parent_id``."""
        return {**self.metadata, "id": self.id, "parent_id": self.parent_id}


@dataclass(slots=True)
class ScoredDoc:
    """One candidate in a ranking, with the score each stage gave it (slots: a retriever's
    ranking builds one per hit, and slots make that cheaper)."""

    doc_id: str
    score: float
    stage_scores: dict[str, float] = field(default_factory=dict)


def _as_list(values: Sequence[Any]) -> list[Any]:
    """Python values from a list or a numpy array (``tolist`` yields plain floats and strs)."""
    return values.tolist() if hasattr(values, "tolist") else list(values)  # type: ignore[union-attr]


class Ranking:
    """The ordered candidates for one query (best first).

    A retriever may hand over its hits as arrays (:meth:`from_hits`); the per-document
    :class:`ScoredDoc` objects are then built on first access to :attr:`docs`, so a stage
    that passes rankings on without reading them pays no per-document cost.
    """

    __slots__ = ("query", "_docs", "_hits")

    def __init__(self, query: Query, docs: list[ScoredDoc] | None = None) -> None:
        self.query = query
        self._docs: list[ScoredDoc] | None = docs if docs is not None else []
        self._hits: tuple[Sequence[str], Sequence[float], str] | None = None

    @classmethod
    def from_hits(cls, query: Query, doc_ids: Sequence[str], scores: Sequence[float],
                  stage: str) -> Ranking:
        """A ranking from parallel id/score sequences (lists or numpy arrays), best first."""
        ranking = cls(query)
        ranking._docs = None
        ranking._hits = (doc_ids, scores, stage)
        return ranking

    @property
    def docs(self) -> list[ScoredDoc]:
        if self._docs is None:
            ids, scores, stage = (*map(_as_list, self._hits[:2]), self._hits[2])  # type: ignore[index]
            if len(ids) != len(scores):
                raise ValueError(f"{len(ids)} document ids for {len(scores)} scores")
            self._docs = list(map(ScoredDoc, ids, scores, [{stage: s} for s in scores]))
            self._hits = None
        return self._docs

    @docs.setter
    def docs(self, docs: list[ScoredDoc]) -> None:
        self._docs, self._hits = docs, None

    @property
    def doc_ids(self) -> list[str]:
        if self._docs is None:
            return _as_list(self._hits[0])  # type: ignore[index]
        return [d.doc_id for d in self._docs]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ranking):
            return NotImplemented
        return self.query == other.query and self.docs == other.docs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ranking(query={self.query!r}, docs={self.docs!r})"

    def score_names(self) -> tuple[str, ...]:
        """The stage-score names its documents carry, in first-seen order."""
        if self._docs is None:
            return (self._hits[2],)  # type: ignore[index]
        return tuple(dict.fromkeys(n for d in self._docs for n in d.stage_scores))

    def relabel(self, rename: Callable[[str], str]) -> Ranking:
        """A copy with every stage-score name and derived-text stage passed through
        ``rename`` (a stage's output replayed under another path id)."""
        query = replace(self.query, derived=tuple(replace(d, stage=rename(d.stage))
                                                  for d in self.query.derived))
        if self._docs is None:
            ids, scores, stage = self._hits  # type: ignore[misc]
            return Ranking.from_hits(query, ids, scores, rename(stage))
        return Ranking(query, [ScoredDoc(d.doc_id, d.score,
                                         {rename(n): v for n, v in d.stage_scores.items()})
                               for d in self._docs])

    def top(self, k: int) -> Ranking:
        if self._docs is None:
            ids, scores, stage = self._hits  # type: ignore[misc]
            return Ranking.from_hits(self.query, ids[:k], scores[:k], stage)
        return Ranking(self.query, self._docs[:k])

    @classmethod
    def from_scores(
        cls, query: Query, scores: Mapping[str, float], stage: str, previous: Ranking | None = None,
        prior: Mapping[str, Mapping[str, float]] | None = None,
    ) -> Ranking:
        """Build a ranking sorted by score (ties broken by doc id), keeping earlier stage scores
        (those of ``previous``'s documents, or ``prior``: doc id -> stage scores)."""
        if prior is None:
            prior = {d.doc_id: d.stage_scores for d in previous.docs} if previous else {}
        ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls(query, [ScoredDoc(doc_id, float(s), {**prior.get(doc_id, {}), stage: float(s)})
                           for doc_id, s in ordered])


@dataclass
class StageTrace:
    """Wall time and counters of one stage over one run."""

    name: str
    seconds: float = 0.0
    calls: int = 0
    queries: int = 0
    counters: dict[str, float] = field(default_factory=dict)


class EventKind(StrEnum):
    """What a Trace event records."""

    FALLBACK = "fallback"  # an LLM step used its fallback (details: reason, detail, reply)
    REPAIR = "repair"  # an LLM reply was usable only after a counted repair
    WEIGHTS = "weights"  # the modality weights a query got (details: weights, source)
    LLM_FAILED = "llm_failed"  # an LLM request failed for good (details: reason)
    LLM_RETRYABLE_ERROR = "llm_retryable_error"  # an LLM call failed and is retried


@dataclass(frozen=True)
class TraceEvent:
    """One notable event of a stage, about one query when ``query_id`` is set."""

    stage: str
    kind: EventKind
    query_id: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (reports, the service)."""
        return {"stage": self.stage, "event": self.kind.value, "query_id": self.query_id,
                **self.details}


def stage_name(path_id: str) -> str:
    """The stage name a path id ends with: ``weighted/sparse/bm25`` -> ``bm25``,
    ``rrf/dense#2`` -> ``dense``."""
    return path_id.rsplit("/", 1)[-1].split("#", 1)[0]


def under(name: str, path_id: str) -> bool:
    """Whether ``name`` (a trace entry or stage-score name) is the stage ``path_id``'s own or
    one of its sub-stages' (``path/...``) or a named part of its score (``path.part``)."""
    return name == path_id or name.startswith((f"{path_id}/", f"{path_id}."))


class PathIds:
    """The path ids handed out in one run: one per stage instance and parent path, so the
    same pipeline gets the same ids on every run.

    A stage's id is its ``name`` below its parent's id (``weighted/dense``; a stage of the
    top-level chain has its bare name); a second instance with the same name under the same
    parent gets ``#2`` (``rrf/dense#2``), and so on, in the order they first run."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, int], tuple[str, object]] = {}
        self._taken: set[str] = set()

    def get(self, parent: str, stage: Any) -> str:
        key = (parent, id(stage))
        if key not in self._ids:
            name = stage.name
            if not isinstance(name, str) or not name or any(c in name for c in "/#."):
                raise ValueError(f"a stage name must be a non-empty string without '/', '#' "
                                 f"or '.' (they build path ids), got {name!r}")
            base = f"{parent}/{name}" if parent else name
            path_id, n = base, 1
            while path_id in self._taken:
                n += 1
                path_id = f"{base}#{n}"
            self._taken.add(path_id)
            self._ids[key] = (path_id, stage)  # the stage is kept so its id() stays its own
        return self._ids[key][0]


@dataclass
class Trace:
    """Per-stage wall time and counters (LLM calls, tokens, cache hits, fallbacks), keyed by
    each stage instance's path id (:class:`PathIds`); while a run is under way the trace
    also knows which stage is running (:meth:`enter`, :meth:`path_of`)."""

    stages: dict[str, StageTrace] = field(default_factory=dict)
    events: list[TraceEvent] = field(default_factory=list)
    # The part of each stage's queries, seconds and counters that was replayed from a
    # cache of another run's stage output (``core.cache.Cached``) rather than computed:
    # ``{stage: {"queries": n, "seconds": s, counter: amount}}``. Counters and seconds above
    # include it (each run's trace reads "as if run alone"); subtracting it gives the work
    # actually done, which is what sums correctly over runs that share stages.
    replayed: dict[str, dict[str, float]] = field(default_factory=dict)
    ids: PathIds = field(default_factory=PathIds, repr=False, compare=False)
    _running: list[tuple[object, str]] = field(default_factory=list, init=False, repr=False,
                                                compare=False)
    # per open timed block, the seconds of the blocks timed inside it (stages below it)
    _inner: list[float] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def current(self) -> str:
        """The path id of the stage running now ("" outside every stage)."""
        return self._running[-1][1] if self._running else ""

    def path_of(self, stage: Any) -> str:
        """``stage``'s path id: its own while it runs, else the one it gets when run now
        (below the running stage)."""
        if self._running and self._running[-1][0] is stage:
            return self._running[-1][1]
        return self.ids.get(self.current, stage)

    @contextmanager
    def enter(self, stage: Any) -> Iterator[str]:
        """Run ``stage`` below the running stage; yields its path id."""
        path_id = self.path_of(stage)
        self._running.append((stage, path_id))
        try:
            yield path_id
        finally:
            self._running.pop()

    def fork(self) -> Trace:
        """An empty trace that continues this one's run (same path ids, same running
        stage): what a sub-computation records separately, to be merged back."""
        sub = Trace(ids=self.ids)
        sub._running = list(self._running)
        return sub

    def stage(self, name: str) -> StageTrace:
        if name not in self.stages:
            self.stages[name] = StageTrace(name)
        return self.stages[name]

    @contextmanager
    def timed(self, name: str, n_queries: int = 0) -> Iterator[StageTrace]:
        """Time a block as ``name``'s. A block timed inside it (a stage below, e.g. the
        retriever of multi_query) keeps its seconds: they are not also this one's, so the
        stages of a trace sum to the time of the run."""
        st = self.stage(name)
        self._inner.append(0.0)
        start = time.perf_counter()
        try:
            yield st
        finally:
            elapsed = time.perf_counter() - start
            st.seconds += elapsed - self._inner.pop()
            if self._inner:
                self._inner[-1] += elapsed
            st.calls += 1
            st.queries += n_queries

    def count(self, stage: str, counter: str, amount: float = 1) -> None:
        st = self.stage(stage)
        st.counters[counter] = st.counters.get(counter, 0) + amount

    def add_replayed(self, stage: str, amounts: Mapping[str, float]) -> None:
        """Record ``amounts`` (queries, seconds, counters) of ``stage`` as replayed."""
        mine = self.replayed.setdefault(stage, {})
        for key, value in amounts.items():
            mine[key] = mine.get(key, 0) + value

    def log(self, stage: str, event: EventKind | str, query_id: str | None = None,
            **details: Any) -> None:
        """Record a notable event (e.g. a fallback) with its details; ``event`` must be an
        :class:`EventKind` (or its value)."""
        self.events.append(TraceEvent(stage, EventKind(event), query_id, details))

    def merge(self, other: Trace) -> None:
        for name, st in other.stages.items():
            mine = self.stage(name)
            mine.seconds += st.seconds
            mine.calls += st.calls
            mine.queries += st.queries
            for key, value in st.counters.items():
                mine.counters[key] = mine.counters.get(key, 0) + value
        for name, amounts in other.replayed.items():
            self.add_replayed(name, amounts)
        self.events.extend(other.events)

    def summary(self) -> list[dict[str, Any]]:
        """One row per stage: seconds, ms per query and counters."""
        return [{"stage": st.name, "seconds": st.seconds,
                 "ms_per_query": 1000 * st.seconds / st.queries if st.queries else None,
                 **st.counters} for st in self.stages.values()]
