"""Label-free evaluation of conversational query reformulation (METHODS.md, method 2): scores
that need a gold standalone rewrite ``g`` of each turn but no relevance judgments, described
in docs/evaluation.md: cosine of a reformulation ``r`` to ``g`` (and its delta against the raw
turn) by conversation-length bucket, the Reranker Support Score, the LLM Citation Score
(prompt ``cite_answer``) and Kendall's tau agreement with a labelled score. Runtimes
(embedder, cross-encoder, LLM clients) are passed in as objects.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from intentrank.core.params import ParameterError, check_int
from intentrank.core.protocols import LLMLike
from intentrank.errors import DataError
from intentrank.llm.parsing import Repaired, read_citation_markers, read_json_object
from intentrank.llm.prompts import format_passages
from intentrank.llm.step import run_step
from intentrank.types import Query, Ranking, Trace

BUCKETS = ("<5", "5-10", ">=10")
OVERALL = "all"
PARAPHRASE, HYDE = "paraphrase", "hyde"  # the two method groups of the paper
CITE_CONTRACT = "cite_answer"


# --------------------------------------------------------------------------- cosine to gold

def conversation_length(query: Query) -> int:
    """The number of turns up to and including ``query``'s turn (its history + 1)."""
    return len(query.history) + 1


def length_bucket(n_turns: int) -> str:
    """``<5`` (1-4 turns), ``5-10`` (5-9) or ``>=10`` (10 or more)."""
    n_turns = check_int("conversation length (turns)", n_turns, minimum=1)
    return "<5" if n_turns < 5 else "5-10" if n_turns < 10 else ">=10"


@dataclass(frozen=True)
class TurnCosine:
    """One turn: ``cos_gold`` = cos(reformulation, gold), ``cos_raw`` = cos(raw turn, gold)."""

    query_id: str
    cos_gold: float
    cos_raw: float
    n_turns: int

    @property
    def delta(self) -> float:
        """cos(reformulation, gold) - cos(raw turn, gold)."""
        return self.cos_gold - self.cos_raw

    @property
    def bucket(self) -> str:
        return length_bucket(self.n_turns)


@dataclass(frozen=True)
class BucketMean:
    """Means over the turns of one bucket (None when it has none)."""

    n: int
    cos_gold: float | None
    delta: float | None


@dataclass(frozen=True)
class CosineRow:
    """One method's row of the cosine table: its group and a :class:`BucketMean` per bucket
    (:data:`BUCKETS`) and overall (:data:`OVERALL`)."""

    group: str
    method: str
    buckets: Mapping[str, BucketMean]

    def flat(self) -> dict[str, Any]:
        """``{"group", "method", "n", "cos", "delta", "cos <5", "delta <5", "n <5", ...}``."""
        row: dict[str, Any] = {"group": self.group, "method": self.method}
        for name in (OVERALL, *BUCKETS):
            m, suffix = self.buckets[name], "" if name == OVERALL else f" {name}"
            row.update({f"n{suffix}": m.n, f"cos{suffix}": m.cos_gold,
                        f"delta{suffix}": m.delta})
        return row


def _embed(embedder: Any, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Unit vectors of the distinct ``texts`` (encoded once each)."""
    unique = list(dict.fromkeys(texts))
    if not unique:
        return {}
    vecs = np.asarray(embedder.encode_queries(unique), dtype=np.float64)
    if vecs.shape[0] != len(unique):
        raise ValueError(f"the embedder returned {vecs.shape[0]} vectors for {len(unique)} texts")
    vecs = vecs / np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
    return dict(zip(unique, vecs, strict=True))


def _need(table: Mapping[str, Any], qid: str, what: str) -> Any:
    if qid not in table:
        raise DataError(f"query {qid!r} has no {what}", field=what)
    value = table[qid]
    if what != "conversation length" and (not isinstance(value, str) or not value.strip()):
        raise DataError(f"query {qid!r}: the {what} must be a non-empty string, got {value!r}",
                        field=what)
    return value


def cosine_to_gold(
    embedder: Any,
    reformulations: Mapping[str, str],
    golds: Mapping[str, str],
    raws: Mapping[str, str],
    lengths: Mapping[str, int],
) -> list[TurnCosine]:
    """Per turn (every query id of ``reformulations``, in order): cos(reformulation, gold)
    and cos(raw turn, gold). ``lengths``: the conversation length of each turn (turns up to
    and including it). ``embedder``: anything with ``encode_queries(texts)``."""
    return _cosines(embedder, {"": reformulations}, golds, raws, lengths)[""]


def _cosines(embedder: Any, methods: Mapping[str, Mapping[str, str]],
             golds: Mapping[str, str], raws: Mapping[str, str], lengths: Mapping[str, int],
             ) -> dict[str, list[TurnCosine]]:
    texts: list[str] = []
    for refs in methods.values():
        for qid in refs:
            texts += [_need(refs, qid, "reformulation"), _need(golds, qid, "gold rewrite"),
                      _need(raws, qid, "raw turn")]
            length_bucket(_need(lengths, qid, "conversation length"))
    vec = _embed(embedder, texts)
    return {method: [TurnCosine(qid, float(vec[text] @ vec[golds[qid]]),
                                float(vec[raws[qid]] @ vec[golds[qid]]), int(lengths[qid]))
                     for qid, text in refs.items()] for method, refs in methods.items()}


def cosine_to_gold_queries(embedder: Any, queries: Sequence[Query], golds: Mapping[str, str],
                           ) -> list[TurnCosine]:
    """:func:`cosine_to_gold` for reformulated queries: the reformulation is ``q.text``, the
    raw turn ``q.turn`` (kind ``original``) and the length :func:`conversation_length`."""
    return cosine_to_gold(embedder, {q.id: q.text for q in queries}, golds,
                          {q.id: q.turn for q in queries},
                          {q.id: conversation_length(q) for q in queries})


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def aggregate_cosine(turns: Sequence[TurnCosine]) -> dict[str, BucketMean]:
    """Mean cos(reformulation, gold) and mean delta per bucket and overall (``"all"``)."""
    out = {}
    for name in (OVERALL, *BUCKETS):
        chosen = [t for t in turns if name == OVERALL or t.bucket == name]
        out[name] = BucketMean(len(chosen), _mean([t.cos_gold for t in chosen]),
                               _mean([t.delta for t in chosen]))
    return out


def cosine_rows(
    embedder: Any,
    methods: Mapping[str, Mapping[str, str]],
    groups: Mapping[str, str],
    golds: Mapping[str, str],
    raws: Mapping[str, str],
    lengths: Mapping[str, int],
) -> list[CosineRow]:
    """The cosine table of many methods: ``methods`` maps a method to its reformulations
    (``{query id: text}``), ``groups`` a method to its group label (:data:`PARAPHRASE`,
    :data:`HYDE` or any other). Rows come grouped (groups in first-seen order), methods in
    the given order within a group; every distinct text is embedded once."""
    missing = [m for m in methods if m not in groups]
    if missing:
        raise ParameterError(f"no group given for method(s) {', '.join(map(repr, missing))}")
    per_method = _cosines(embedder, methods, golds, raws, lengths)
    order = list(dict.fromkeys(groups[m] for m in methods))
    return [CosineRow(g, m, aggregate_cosine(per_method[m]))
            for g in order for m in methods if groups[m] == g]


# ------------------------------------------------------------------ reranker support score

@dataclass(frozen=True)
class SupportScores:
    """Reranker Support Score per query and its mean over queries; ``short`` counts the
    rankings with fewer than ``k`` documents (the missing ones add 0 to the sum)."""

    per_query: Mapping[str, float]
    mean: float
    k: int
    short: int = 0


def reranker_support(
    rankings: Sequence[Ranking],
    golds: Mapping[str, str],
    doc_text: Callable[[str], str],
    scorer: Any,
    k: int = 5,
    batch_size: int = 8,
) -> SupportScores:
    """RSS(r, g) = (1/k) sum_{i<=k} R(g, d_i) for each ranking (the ranking retrieved for
    the reformulation r; ``golds`` by query id; ``doc_text(doc_id)`` the text the scorer
    reads). ``scorer``: a cross-encoder with ``predict(pairs, batch_size)``, e.g.
    ``load_cross_encoder()``; RSS is on its scale (docs/evaluation.md). A ranking with fewer
    than ``k`` documents is still divided by ``k`` (the missing ones add 0). The mean over
    no rankings is NaN."""
    k = check_int("RSS k", k, minimum=1)
    per_ranking = []
    for r in rankings:
        gold = _need(golds, r.query.id, "gold rewrite")
        per_ranking.append((r.query.id, [(gold, doc_text(d)) for d in r.doc_ids[:k]]))
    pairs = list(dict.fromkeys(p for _, heads in per_ranking for p in heads))
    scores = dict(zip(pairs, np.asarray(scorer.predict(pairs, batch_size), dtype=np.float64),
                      strict=True)) if pairs else {}
    per_query = {qid: float(sum(scores[p] for p in heads) / k) for qid, heads in per_ranking}
    mean = float(np.mean(list(per_query.values()))) if per_query else math.nan
    return SupportScores(per_query, mean, k, sum(len(heads) < k for _, heads in per_ranking))


# ---------------------------------------------------------------------- LLM citation score

@dataclass(frozen=True)
class CitedAnswer:
    """An answer and the distinct passage numbers (1-based) it cites, in order of first
    citation; ``ok`` False for a fallback (0 citations)."""

    answer: str
    cited: tuple[int, ...]
    ok: bool = True

    @property
    def citations(self) -> int:
        return len(self.cited)


def read_citations(obj: dict[str, Any], n_passages: int) -> CitedAnswer | Repaired[CitedAnswer]:
    """The distinct valid passage numbers (1..``n_passages``) of a reply object: those in
    its ``citations`` list and the citation markers in its ``answer`` (``[n]``, ``[n, m]``,
    ``[n-m]``, read as the answer stage reads them). Raises TypeError when ``answer`` is not
    text or ``citations`` not a list of integers; numbers outside 1..``n_passages`` and
    malformed markers (``[1-2-3]``) are dropped as a counted repair."""
    answer, listed = obj.get("answer", ""), obj.get("citations")
    if not isinstance(answer, str):
        raise TypeError(f"'answer' must be text, got {type(answer).__name__}")
    if not isinstance(listed, list) or any(
            isinstance(c, bool) or not (isinstance(c, int) or (isinstance(c, str)
                                                                 and c.strip().isdigit()))
            for c in listed):
        raise TypeError(f"'citations' must be a list of passage numbers, got {listed!r}")
    marked, malformed = read_citation_markers(answer)
    numbers = [int(c) for c in listed] + marked
    valid = tuple(dict.fromkeys(n for n in numbers if 1 <= n <= n_passages))
    dropped = sorted({n for n in numbers if not 1 <= n <= n_passages})
    value = CitedAnswer(answer.strip(), valid)
    repairs = ([f"dropped citation numbers outside 1..{n_passages}: {dropped}"] if dropped
               else []) + ([f"dropped malformed citation markers: {malformed}"] if malformed
                           else [])
    return Repaired(value, "; ".join(repairs)) if repairs else value


@dataclass
class CitationRun:
    """One LLM's citations for every (method, query): ``answers[method][query id]``.

    ``fallbacks`` counts the (method, query) answers that were unusable and count 0
    (``fallback_reasons`` by reason), ``refusals`` the usable answers citing nothing,
    ``empty`` the rankings with no documents (0 citations, no call), ``calls`` the distinct
    prompts sent (methods with the same top-k for a query share one)."""

    llm: str
    answers: dict[str, dict[str, CitedAnswer]]
    fallbacks: int = 0
    fallback_reasons: dict[str, int] = field(default_factory=dict)
    refusals: int = 0
    empty: int = 0
    calls: int = 0

    def counts(self) -> dict[str, dict[str, int]]:
        """``{method: {query id: citations}}``, the input of :func:`average_citation_score`."""
        return {m: {q: a.citations for q, a in by_q.items()} for m, by_q in self.answers.items()}


def cite_answers(
    llm: LLMLike,
    rankings: Mapping[str, Sequence[Ranking]],
    golds: Mapping[str, str],
    doc_text: Callable[[str], str],
    k: int = 5,
    *,
    max_words: int = 150,
    structured: bool = True,
    trace: Trace | None = None,
    stage: str = CITE_CONTRACT,
    max_tokens: int | None = None,
) -> CitationRun:
    """Ask ``llm`` to answer each query's *gold* rewrite from the top ``k`` documents of each
    method's ranking only (prompt ``cite_answer``), in one batched, cached ``run_step``, and
    count the distinct valid passages each answer cites. ``rankings``: ``{method: rankings}``;
    ``structured`` sends the contract's JSON schema (constrained decoding). An unusable reply
    is a counted fallback with 0 citations."""
    k = check_int("citation k", k, minimum=1)
    prompts: dict[tuple[str, tuple[str, ...]], str] = {}  # (gold, top k) -> first query id
    where: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}
    for method, ranked in rankings.items():
        where[method] = {r.query.id: (_need(golds, r.query.id, "gold rewrite"),
                                      tuple(r.doc_ids[:k])) for r in ranked}
        for qid, key in where[method].items():
            if key[1]:
                prompts.setdefault(key, qid)
    slots = {key: i for i, key in enumerate(prompts)}
    items = [{"query": gold, "n": len(doc_ids), "passages": format_passages(
        [doc_text(d) for d in doc_ids], max_words)} for gold, doc_ids in prompts]

    def parse(reply: Any, item: Mapping[str, Any]) -> Any:
        return read_citations(read_json_object(reply.text), item["n"])

    results = run_step(llm, CITE_CONTRACT, items, parse=parse,
                       fallback=lambda item: CitedAnswer("", (), ok=False), trace=trace,
                       stage=stage, query_ids=list(prompts.values()), structured=structured,
                       max_tokens=max_tokens)
    run = CitationRun(str(getattr(llm, "name", llm)), {}, calls=len(items))
    reasons: Counter[str] = Counter()
    for method, by_q in where.items():
        run.answers[method] = {}
        for qid, key in by_q.items():
            if not key[1]:
                run.empty += 1
                run.answers[method][qid] = CitedAnswer("", ())
                continue
            result = results[slots[key]]
            run.answers[method][qid] = result.value
            if not result.ok:
                run.fallbacks += 1
                reasons[result.reason.value if result.reason else "unknown"] += 1
            elif not result.value.cited:
                run.refusals += 1
    run.fallback_reasons = dict(reasons)
    return run


@dataclass(frozen=True)
class AverageCitation:
    """Average Citation Score per method; ``queries`` were used, ``skipped`` had no
    citations from any method (mean 0, the ratio undefined). A method's score is NaN when
    every query was skipped."""

    scores: Mapping[str, float]
    queries: int
    skipped: tuple[str, ...] = ()


def average_citation_score(citations: Mapping[str, Mapping[str, float]]) -> AverageCitation:
    """ACS_x = mean over queries q of (cit_x(q) - mean_m cit_m(q)) / mean_m cit_m(q), over
    the M methods given (``{method: {query id: citations}}``; every method must have the
    same query ids). 0 is the average method, +0.5 cites 50% more than the average. A query
    where no method cites anything (mean 0) is skipped and listed in ``skipped``."""
    if not citations:
        raise ParameterError("average_citation_score needs at least one method")
    methods = list(citations)
    qids = list(citations[methods[0]])
    for m in methods[1:]:
        if set(citations[m]) != set(qids):
            diff = sorted(set(qids) ^ set(citations[m]))[:5]
            raise ParameterError(f"method {m!r} and {methods[0]!r} cover different queries "
                                 f"(e.g. {diff}); citation scores compare the same queries")
    sums = dict.fromkeys(methods, 0.0)
    used, skipped = 0, []
    for q in qids:
        mean = sum(float(citations[m][q]) for m in methods) / len(methods)
        if mean == 0:
            skipped.append(q)
            continue
        used += 1
        for m in methods:
            sums[m] += (float(citations[m][q]) - mean) / mean
    scores = {m: sums[m] / used if used else math.nan for m in methods}
    return AverageCitation(scores, used, tuple(skipped))


@dataclass(frozen=True)
class CitationReport:
    """Citation scores from several LLMs: each LLM's run and Average Citation Score, then
    per method the mean over LLMs of the ACS (``scores``; LLMs whose ACS is NaN left out)
    and of the mean citations per query (``mean_citations``)."""

    runs: tuple[CitationRun, ...]
    per_llm: Mapping[str, AverageCitation]
    scores: Mapping[str, float]
    mean_citations: Mapping[str, float]


def citation_scores(
    llms: Sequence[LLMLike],
    rankings: Mapping[str, Sequence[Ranking]],
    golds: Mapping[str, str],
    doc_text: Callable[[str], str],
    k: int = 5,
    **options: Any,
) -> CitationReport:
    """:func:`cite_answers` with every LLM of ``llms`` (``options`` go to it), the Average
    Citation Score per LLM, and both averaged over the LLMs. In a Trace the first LLM's
    calls count under ``stage`` (default ``cite_answer``), the next under ``stage#2``, ..."""
    if not llms:
        raise ParameterError("citation_scores needs at least one LLM client")
    runs, per_llm = [], {}
    stage = options.pop("stage", CITE_CONTRACT)
    for i, llm in enumerate(llms):
        run = cite_answers(llm, rankings, golds, doc_text, k,
                           stage=stage if i == 0 else f"{stage}#{i + 1}", **options)
        runs.append(run)
        name = run.llm if run.llm not in per_llm else f"{run.llm}#{len(runs)}"
        per_llm[name] = average_citation_score(run.counts())
    methods = list(rankings)
    scores = {m: _nanmean([a.scores[m] for a in per_llm.values()]) for m in methods}
    mean_cit = {m: _nanmean([_nanmean([float(v) for v in run.counts()[m].values()])
                             for run in runs]) for m in methods}
    return CitationReport(tuple(runs), per_llm, scores, mean_cit)


def _nanmean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


# ------------------------------------------------------------------------------- agreement

@dataclass(frozen=True)
class Agreement:
    """Kendall's tau-b between two scores over the same methods, its two-sided p-value
    (scipy's exact test for small sets without ties) and the number of methods."""

    tau: float
    p_value: float
    n_methods: int


def method_agreement(label_free: Mapping[str, float], labelled: Mapping[str, float]
                     ) -> Agreement:
    """Whether a label-free score ranks methods like a labelled one (e.g. nDCG@10):
    ``scipy.stats.kendalltau`` over the methods both name (they must name the same ones, at
    least two). Tau is NaN when one score is constant over the methods."""
    from scipy.stats import kendalltau

    if set(label_free) != set(labelled):
        diff = sorted(set(label_free) ^ set(labelled))
        raise ParameterError(f"method_agreement: the two scores name different methods: "
                             f"{', '.join(map(repr, diff))}")
    methods = sorted(label_free)
    if len(methods) < 2:
        raise ParameterError(f"method_agreement needs at least 2 methods, got {len(methods)}")
    result = kendalltau([float(label_free[m]) for m in methods],
                        [float(labelled[m]) for m in methods])
    return Agreement(float(result.statistic), float(result.pvalue), len(methods))
