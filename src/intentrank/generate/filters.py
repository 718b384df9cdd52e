"""The lexical filters of question generation (the LLM checks are in ``generator.py``).

Each returns ``None`` when the question passes, or a short reason in words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "in", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were",
    "what", "when", "where", "which", "who", "why", "with"
})
MIN_QUESTION_WORDS = 3
MAX_QUESTION_WORDS = 60
MAX_ANSWER_CHARS = 2000
DISTANT_MAX_COPIED = 0.5  # share of the question's content bigrams found in the document
DUPLICATE_JACCARD = 0.7  # word-set overlap at which two questions are near-duplicates
# a question that points at its source cannot be asked without it
_SOURCE_NOUN = r"(?:documents?|passages?|texts?|articles?|abstracts?|stud(?:y|ies))"
_SOURCE_REFERENCE = re.compile(
    rf"\b(?:the|this|these|both|two|which|each|either|first|second|other) {_SOURCE_NOUN}\b"
    rf"|\b{_SOURCE_NOUN} (?:\d+|[AB])\b", re.I)  # "Document 1", as the prompt numbers them


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOPWORDS]


def malformed(value: Any) -> str | None:
    """Why a parsed reply is not a usable ``{question, answer}`` (None if it is)."""
    if not isinstance(value, Mapping):
        return "the reply is not a JSON object"
    question, answer = value.get("question"), value.get("answer")
    if not isinstance(question, str) or not isinstance(answer, str):
        return "question and answer must both be text"
    n = len(words(question))
    if n < MIN_QUESTION_WORDS:
        return f"the question has {n} word(s), fewer than {MIN_QUESTION_WORDS}"
    if n > MAX_QUESTION_WORDS:
        return f"the question has {n} words, more than {MAX_QUESTION_WORDS}"
    if m := _SOURCE_REFERENCE.search(question):
        return f"the question refers to its source ({m.group(0)!r})"
    if not answer.strip():
        return "the answer is empty"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"the answer has {len(answer)} characters, more than {MAX_ANSWER_CHARS}"
    return None


def written_words(text: str) -> int:
    """Words as a writer counts them: whitespace-separated tokens with a letter or digit
    ("shock-tube", "78.847" and "(Mach" are one word each; a lone "-" is none). The
    ``length`` filter counts these, since the prompt asks for "fewer than 10 words"."""
    return sum(1 for token in text.split() if _WORD.search(token))


def wrong_length(question: str, category: str, bounds: tuple[int, int] | None) -> str | None:
    """A reason when the question's length (:func:`written_words`) is outside the
    ``(min, max)`` words ``bounds`` of its category ``category`` (None: no bounds, no check)."""
    if bounds is None:
        return None
    n, (low, high) = written_words(question), bounds
    if not low <= n <= high:
        return f"the question has {n} words; {category} asks for {low} to {high}"
    return None


def _bigrams(tokens: list[str]) -> set[tuple[str, str]]:
    return set(zip(tokens, tokens[1:], strict=False))


def copies_wording(question: str, documents: Iterable[str]) -> str | None:
    """A reason when more than :data:`DISTANT_MAX_COPIED` of the question's content-word
    bigrams occur in one source (the question was asked to be "distant" from its wording)."""
    mine = _bigrams(content_words(question))
    copied = [len(mine & _bigrams(content_words(d))) / len(mine) for d in documents if mine]
    share = max(copied, default=0.0)
    if share > DISTANT_MAX_COPIED:
        return f"{share:.0%} of the question's word pairs are copied from the document"
    return None


class DuplicateFilter:
    """Remembers the kept questions; :meth:`check` says whether a new one nearly repeats one
    (word-set Jaccard at or above :data:`DUPLICATE_JACCARD`)."""

    def __init__(self) -> None:
        self._kept: list[tuple[str, set[str]]] = []

    def check(self, question: str) -> str | None:
        mine = set(content_words(question))
        for qid, other in self._kept:
            score = len(mine & other) / len(mine | other) if mine or other else 1.0
            if score >= DUPLICATE_JACCARD:
                return f"near-duplicate of {qid} (word overlap {score:.2f})"
        return None

    def add(self, qid: str, question: str) -> None:
        self._kept.append((qid, set(content_words(question))))


MIN_SUPPORT = 0.5  # share of the answer's content words that must occur in the source(s)
MIN_DISTINCT = 2  # content words each document of a pair must contribute on its own


def support_share(answer: str, documents: Iterable[str]) -> float:
    """The share of the answer's distinct content words found in the documents (1.0 for an
    answer with none)."""
    mine = set(content_words(answer))
    if not mine:
        return 1.0
    found: set[str] = set()
    for d in documents:
        found |= set(content_words(d))
    return len(mine & found) / len(mine)


def unsupported(answer: str, documents: list[str], limit: float = MIN_SUPPORT) -> str | None:
    """A reason when too little of the answer's wording comes from the source(s): the
    lexical faithfulness check."""
    share = support_share(answer, documents)
    if share < limit:
        return f"only {share:.0%} of the answer's words occur in the source document(s)"
    return None


def one_document_only(question: str, answer: str, doc_a: str, doc_b: str) -> str | None:
    """A reason when the question and answer draw on only one document of a pair: each
    document must contribute :data:`MIN_DISTINCT` content words that the other does not
    contain."""
    used = set(content_words(f"{question} {answer}"))
    a, b = set(content_words(doc_a)), set(content_words(doc_b))
    only_a, only_b = len(used & (a - b)), len(used & (b - a))
    if min(only_a, only_b) < MIN_DISTINCT:
        return (f"the question and answer use {only_a} word(s) found only in the first "
                f"document and {only_b} found only in the second (need {MIN_DISTINCT} each)")
    return None
