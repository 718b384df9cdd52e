"""Judge generated answers (method 5's evaluation): relevance on {-1, 0, 1, 2} against a
reference answer and faithfulness on {-1, 0, 1} against documents (the paper gives the judge
the gold documents), with prompt ``judge_answer`` on any LLM backend.

Scales: relevance 2 = correct with only relevant content, 1 = correct with irrelevant content,
0 = no answer (abstains), -1 = incorrect; faithfulness 1 = every part grounded, 0 = some,
-1 = none. An empty answer is relevance 0 without a call (no faithfulness). A reply without
both scores or outside a scale is a counted fallback and no judgement (left out of the means,
which say how many answers they cover).

:func:`known_quality_answers` builds answers of known quality with no LLM (the reference
itself, another question's reference, the reference negated, an abstention, an empty
answer) and :func:`judge_agreement` says how often the judge orders them as expected.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from statistics import mean
from typing import Any

from intentrank.answer.citations import ABSTENTION
from intentrank.core.protocols import LLMLike
from intentrank.llm.parsing import read_json_object
from intentrank.llm.prompts import format_passages, load_contract
from intentrank.llm.step import run_step
from intentrank.types import Trace

RELEVANCE = (-1, 0, 1, 2)
FAITHFULNESS = (-1, 0, 1)
STAGE = "answer_judge"


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge: the question, the reference answer, the documents the judge
    checks faithfulness against, and the answer."""

    query_id: str
    question: str
    reference: str
    documents: tuple[str, ...]
    answer: str


@dataclass(frozen=True)
class Judgement:
    """Scores of one answer (None: not judged; ``fallback`` says why)."""

    relevance: int | None
    faithfulness: int | None
    fallback: str = ""


def _score(obj: Mapping[str, Any], key: str, scale: tuple[int, ...]) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in scale:
        raise ValueError(f"{key} {value!r} is not on the scale {list(scale)}")
    return int(value)


def parse_judgement(reply: str) -> Judgement:
    """``{"relevance": r, "faithfulness": f}``; ValueError when a score is missing or off
    its scale (relevance 3, faithfulness 2, "high")."""
    obj = read_json_object(reply)
    return Judgement(_score(obj, "relevance", RELEVANCE),
                     _score(obj, "faithfulness", FAITHFULNESS))


def judge_answers(llm: LLMLike, items: Sequence[JudgeItem], trace: Trace | None = None,
                  doc_words: int = 200, structured: bool = True) -> list[Judgement]:
    """One judgement per item, in order (see the module doc); counters under
    ``answer_judge``: ``judged``, ``empty_answers`` and the step's ``fallbacks``."""
    trace = trace if trace is not None else Trace()
    todo = [i for i, item in enumerate(items) if item.answer.strip()]
    results = run_step(
        llm, load_contract("judge_answer"),
        [{"query": items[i].question, "reference": items[i].reference,
          "documents": format_passages(items[i].documents, doc_words) or "(none)",
          "answer": items[i].answer.strip()} for i in todo],
        parse=lambda reply, item: parse_judgement(reply.text),
        fallback=lambda item: None, trace=trace, stage=STAGE,
        query_ids=[items[i].query_id for i in todo], structured=structured)
    out = [Judgement(0, None, "empty_answer") for _ in items]
    for i, result in zip(todo, results, strict=True):
        out[i] = result.value if result.ok else Judgement(None, None, result.reason.value
                                                         if result.reason else "fallback")
    trace.count(STAGE, "judged", sum(j.relevance is not None for j in out))
    trace.count(STAGE, "empty_answers", len(items) - len(todo))
    return out


@dataclass
class JudgeSummary:
    """Mean relevance and faithfulness over the answers judged on each."""

    n: int
    relevance: float | None
    faithfulness: float | None
    n_relevance: int
    n_faithfulness: int
    fallbacks: dict[str, int] = field(default_factory=dict)


def summarize(judgements: Sequence[Judgement]) -> JudgeSummary:
    rel = [j.relevance for j in judgements if j.relevance is not None]
    faith = [j.faithfulness for j in judgements if j.faithfulness is not None]
    fallbacks = Counter(j.fallback for j in judgements if j.fallback)
    return JudgeSummary(len(judgements), mean(rel) if rel else None,
                        mean(faith) if faith else None, len(rel), len(faith), dict(fallbacks))


# --- answers of known quality -----------------------------------------------------------------

_AUX = re.compile(r"\b(is|are|was|were|can|could|does|do|did|has|have|had|will|would|should|"
                  r"may|might|must)(\s+not\b|n't\b|'t\b)?", re.IGNORECASE)


def contradict(text: str) -> str:
    """The statement negated by rule: ``not`` added after (or removed from) the first
    auxiliary verb; with none, ``It is not true that ...``."""
    match = _AUX.search(text)
    if match is None:
        return f"It is not true that {text[:1].lower()}{text[1:]}"
    verb, negation = match.group(1), match.group(2)
    swapped = verb if negation else f"{verb} not"
    return text[:match.start()] + swapped + text[match.end():]


# Expected relevance of each kind (the judge must order them so); faithfulness of the
# reference answer against its gold documents is expected to beat the wrong one's.
KNOWN_RELEVANCE = {"reference": 2, "abstention": 0, "empty": 0, "wrong_document": -1,
                   "contradicted": -1}


def known_quality_answers(reference: str, other_reference: str) -> dict[str, str]:
    """Answers of known quality for one question (no LLM wrote them)."""
    return {"reference": reference, "wrong_document": other_reference,
            "contradicted": contradict(reference), "abstention": ABSTENTION, "empty": ""}


@dataclass
class Agreement:
    """How often the judge ordered two answers of different expected relevance the right
    way (a tie counts one half), over all questions; mean scores by kind."""

    pairs: int
    agreement: float
    mean_relevance: dict[str, float | None]
    mean_faithfulness: dict[str, float | None]
    fallbacks: int


def judge_agreement(judged: Mapping[str, Mapping[str, Judgement]]) -> Agreement:
    """``judged``: question id -> kind -> the judge's Judgement of that known-quality answer."""
    right = 0.0
    pairs = fallbacks = 0
    for per_kind in judged.values():
        fallbacks += sum(j.relevance is None for j in per_kind.values())
        for a, b in combinations(per_kind, 2):
            ea, eb = KNOWN_RELEVANCE[a], KNOWN_RELEVANCE[b]
            ja, jb = per_kind[a].relevance, per_kind[b].relevance
            if ea == eb or ja is None or jb is None:
                continue
            pairs += 1
            if ja == jb:
                right += 0.5
            elif (ja > jb) == (ea > eb):
                right += 1
    kinds = list(KNOWN_RELEVANCE)

    def kind_mean(kind: str, attr: str) -> float | None:
        values = [getattr(p[kind], attr) for p in judged.values() if kind in p
                  and getattr(p[kind], attr) is not None]
        return mean(values) if values else None

    return Agreement(pairs, right / pairs if pairs else float("nan"),
                     {k: kind_mean(k, "relevance") for k in kinds},
                     {k: kind_mean(k, "faithfulness") for k in kinds}, fallbacks)


def gold_texts(index: Any, qrels: Mapping[str, Mapping[str, int]]) -> dict[str, list[str]]:
    """Each judged query's gold documents as text, what faithfulness is judged against: the
    documents graded above 0 that ``index`` holds (``row_of``, ``doc_text``)."""
    return {q: [index.doc_text(d) for d, g in judged.items() if g > 0 and d in index.row_of]
            for q, judged in qrels.items()}


def judge_rankings(llm: LLMLike, rankings: Sequence[Any], references: Mapping[str, str],
                   gold_texts: Mapping[str, Sequence[str]], trace: Trace | None = None
                   ) -> dict[str, Judgement]:
    """Judge the answers a pipeline set (``Query.answer``) for the queries that have a
    reference answer, against their gold documents' texts: ``{query id: Judgement}``."""
    items = [JudgeItem(r.query.id, r.query.turn, references[r.query.id],
                       tuple(gold_texts.get(r.query.id, ())), r.query.answer.text)
             for r in rankings if r.query.answer is not None and r.query.id in references]
    return {item.query_id: j for item, j in
            zip(items, judge_answers(llm, items, trace), strict=True)}
