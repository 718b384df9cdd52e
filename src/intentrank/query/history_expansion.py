"""Classic conversational baselines without an LLM (TREC CAsT): expand the turn with words
of its conversation so the retriever sees the topic the turn leaves implicit.

- ``first_turn``: the conversation's first question, then the turn (CAsT's "first turn +
  current turn" baseline: the first question usually names the topic);
- ``history_terms``: the turn plus the content words of earlier questions, weighted by
  recency and by turn (the first question's and the previous question's words first),
  at most ``max_terms`` of them: words in the turn, stopwords and digits-only tokens are
  skipped (history-term weighting, as a query expansion);
- ``concat_turns`` (in :mod:`intentrank.query.reformulate`): every earlier question joined.

A turn with no history is left as it is. The searched text replaces ``Query.text``; the
user's turn stays on the query as kind ``original``.
"""

from __future__ import annotations

import re
from typing import Any

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from intentrank.core.params import check_int, check_number
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.types import Query, Ranking, Trace

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")


STOPWORDS = frozenset(ENGLISH_STOP_WORDS) | {"does", "did", "tell", "know", "like", "want",
                                             "think", "difference", "compare", "s"}


def content_words(text: str) -> list[str]:
    """The words of ``text`` that carry content: lower-cased, stopwords and numbers-only
    tokens dropped, first occurrence order kept."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text):
        w = word.lower().strip("'-")
        if w and w not in STOPWORDS and not w.isdigit():
            seen.setdefault(w, None)
    return list(seen)


class HistoryExpansion(Stage):
    """Base of the no-LLM expansions: ``expanded(query)`` gives the searched text."""

    def expanded(self, query: Query) -> str:
        raise NotImplementedError

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        stage, out = trace.path_of(self), []
        for r in rankings:
            text = self.expanded(r.query) if r.query.history else r.query.text
            if text.split() == r.query.text.split():
                trace.count(stage, "unchanged")
                out.append(r)
                continue
            out.append(Ranking(r.query.reformulated(text, stage, "rewrite"), r.docs))
        return out


class FirstTurn(HistoryExpansion):
    """The conversation's first question, then the turn."""

    def __init__(self, name: str = "first_turn") -> None:
        self.name = name

    def expanded(self, query: Query) -> str:
        first = query.history[0].question.strip()
        return f"{first} {query.text.strip()}" if first else query.text

    def describe(self) -> str:
        return self.described()


class HistoryTerms(HistoryExpansion):
    """The turn plus up to ``max_terms`` content words of earlier questions.

    A word's weight is the sum over the questions it occurs in of ``decay ** distance``
    (distance 1 = the previous question), with the first question counted as distance 1
    too (it names the conversation's topic); the heaviest words are added, ties in the
    order they were asked."""

    def __init__(self, max_terms: int = 8, decay: float = 0.7,
                 name: str = "history_terms") -> None:
        self.max_terms = check_int("max_terms", max_terms)
        self.decay = check_number("decay", decay, above=0, maximum=1)
        self.name = name

    def terms(self, query: Query) -> list[str]:
        """The words added to ``query``'s turn, heaviest first."""
        own = set(content_words(query.text))
        weight: dict[str, float] = {}
        n = len(query.history)
        for i, turn in enumerate(query.history):
            distance = 1 if i == 0 else n - i
            for w in content_words(turn.question):
                if w not in own:
                    weight[w] = weight.get(w, 0.0) + self.decay ** (distance - 1)
        order = {w: k for k, w in enumerate(weight)}
        return sorted(weight, key=lambda w: (-weight[w], order[w]))[:self.max_terms]

    def expanded(self, query: Query) -> str:
        return " ".join([query.text.strip(), *self.terms(query)])

    def describe(self) -> str:
        return self.described(max_terms=self.max_terms, decay=self.decay)


@register_stage("first_turn")
def _first_turn(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``first_turn``: the conversation's first question, then the turn (no LLM)."""
    return FirstTurn(**params)


@register_stage("history_terms")
def _history_terms(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``history_terms: {max_terms: 8, decay: 0.7}``: the turn plus weighted content words of
    earlier questions (no LLM)."""
    return HistoryTerms(**params)
