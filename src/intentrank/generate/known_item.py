"""Known-item questions without an LLM: a passage's own sentence or title, its rarest words
masked or paraphrased, asked to find that passage.

A question copied from its source favours BM25: the rarest words are the ones BM25 matches
best and a user who does not know the passage rarely has them. Each question therefore keeps
a window of a sentence (or the title) with the share ``mask`` of its content words, rarest
first (document frequency in the corpus), either dropped (kind ``masked``) or replaced by
the embedder's nearest word of the corpus vocabulary that is not in the source and shares
no stem with the word (kind ``neighbour``; "semiconductor" may become "transistor"), by
the word co-occurring most with it in other passages (``cooccur``), or by the two in turn
(``mixed``); ``title`` and ``title-neighbour`` start from the title instead. Which
passage, sentence, window and kind a question gets depends only on the seed and its number,
so a set is the same on every run (:func:`known_item_questions`).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from intentrank.core.params import ParameterError
from intentrank.generate.filters import STOPWORDS, words

KINDS = ("masked", "neighbour", "cooccur", "mixed", "title", "title-neighbour")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])|\n+")


@dataclass(frozen=True)
class KnownItemSettings:
    """How known-item questions are drawn (recorded with the set; a change draws a new one)."""

    n: int = 150  # questions
    seed: int = 0
    mask: float = 0.7  # share of a window's content words, rarest first, masked or replaced
    kinds: tuple[str, ...] = ("neighbour",)  # drawn in turn (see KINDS)
    min_words: int = 6  # shortest window (words)
    max_words: int = 30  # longest window (words)
    min_doc_words: int = 20  # shorter passages are never sources
    vocabulary: int = 4000  # replacement words: the corpus's most frequent content words

    def __post_init__(self) -> None:
        if not 0 <= self.mask < 1:
            raise ParameterError(f"mask must be in [0, 1), got {self.mask!r}")
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown or not self.kinds:
            raise ParameterError(f"unknown known-item kind(s) {unknown}; use some of {KINDS}")
        if not 1 <= self.min_words <= self.max_words:
            raise ParameterError("need 1 <= min_words <= max_words")
        if self.n < 1:
            raise ParameterError(f"n must be at least 1, got {self.n!r}")


@dataclass(frozen=True)
class KnownItem:
    """One question: its text, kind, source passage, and the share of its content words that
    occur in the source (1.0: all copied)."""

    id: str
    text: str
    kind: str
    doc_id: str
    copied: float


def is_content(word: str) -> bool:
    return word not in STOPWORDS and len(word) > 2 and not word.isdigit()


def _key(token: str) -> str:
    """A whitespace token as the word it counts as ("Cancer," -> "cancer")."""
    return "".join(words(token))


def copied_share(question: str, source: str) -> float:
    """Share of the question's content words that occur in ``source``."""
    q = [w for w in words(question) if is_content(w)]
    if not q:
        return 0.0
    src = set(words(source))
    return sum(w in src for w in q) / len(q)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _stem(word: str) -> str:
    return word[:5]


class CooccurringWords:
    """A word's replacement by the corpus alone: the content word that occurs in the most of
    the other passages holding the word (weighted by its rarity), never a word of
    ``exclude`` nor one sharing its first five letters; no model, so no retriever's
    embedder decides what counts as similar."""

    def __init__(self, texts: Sequence[str], df: Counter[str], max_docs: int = 200) -> None:
        self.tokens = [sorted({w for w in words(t) if is_content(w) and w.isalpha()})
                       for t in texts]
        self.postings: dict[str, list[int]] = {}
        for i, toks in enumerate(self.tokens):
            for w in toks:
                self.postings.setdefault(w, []).append(i)
        self.df, self.n, self.max_docs = df, max(len(texts), 1), max_docs

    def nearest(self, word: str, exclude: set[str]) -> str | None:
        docs = self.postings.get(word, [])[:self.max_docs]
        counts: Counter[str] = Counter()
        for i in docs:
            counts.update(self.tokens[i])
        best, score = None, 0.0
        for cand, c in counts.items():
            if c < 2 or cand in exclude or _stem(cand) == _stem(word):
                continue
            s = c * np.log(self.n / self.df.get(cand, 1))
            if s > score or (s == score and best is not None and cand < best):
                best, score = cand, s
        return best


class WordNeighbours:
    """The nearest corpus word to a word by the embedder's cosine, never a word of
    ``exclude`` nor one sharing its first five letters (a crude stem)."""

    def __init__(self, vocabulary: Sequence[str], encode: Callable[[list[str]], np.ndarray]):
        self.vocabulary = list(vocabulary)
        self.encode = encode
        self.vectors = _unit(encode(self.vocabulary)) if self.vocabulary else np.zeros((0, 1))
        self._cache: dict[str, np.ndarray] = {}

    def prepare(self, wanted: Sequence[str]) -> None:
        todo = sorted({w for w in wanted if w not in self._cache})
        if todo:
            for w, v in zip(todo, _unit(self.encode(todo)), strict=True):
                self._cache[w] = v

    def nearest(self, word: str, exclude: set[str]) -> str | None:
        if not self.vocabulary:
            return None
        self.prepare([word])
        sims = self.vectors @ self._cache[word]
        for j in np.argsort(-sims, kind="stable")[:50]:
            cand = self.vocabulary[int(j)]
            if cand not in exclude and _stem(cand) != _stem(word):
                return cand
        return None


class _Alternate:
    """Replacement words from two finders in turn (kind ``mixed``: the embedder's neighbour,
    then the co-occurring word, ...), each falling back on the other."""

    def __init__(self, *finders: WordNeighbours | CooccurringWords | None) -> None:
        self.finders = [f for f in finders if f is not None]
        self.turn = 0

    def nearest(self, word: str, exclude: set[str]) -> str | None:
        if not self.finders:
            return None
        first = self.finders[self.turn % len(self.finders)]
        self.turn += 1
        return first.nearest(word, exclude) or next(
            (w for f in self.finders if f is not first and (w := f.nearest(word, exclude))),
            None)


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def document_frequencies(texts: Sequence[str]) -> Counter[str]:
    df: Counter[str] = Counter()
    for t in texts:
        df.update(set(words(t)))
    return df


def _window(tokens: list[str], rng: random.Random, s: KnownItemSettings) -> list[str]:
    if len(tokens) <= s.max_words:
        return tokens
    size = rng.randint(s.min_words, s.max_words)
    start = rng.randint(0, len(tokens) - size)
    return tokens[start:start + size]


def rewrite(tokens: list[str], df: Counter[str], mask: float,
            replace: Callable[[str], str | None] | None) -> list[str]:
    """``tokens`` with the rarest ``mask`` share of content words (ties: first) dropped, or
    replaced by ``replace(word)`` (dropped where it gives None)."""
    content = [i for i, t in enumerate(tokens) if is_content(_key(t))]
    n = round(mask * len(content))
    rarest = set(sorted(content, key=lambda i: (df.get(_key(tokens[i]), 0), i))[:n])
    out = []
    for i, t in enumerate(tokens):
        if i not in rarest:
            out.append(t)
        elif replace is not None and (new := replace(_key(t))):
            out.append(new)
    return out


def known_item_questions(
    docs: Sequence[tuple[str, str, str]],
    settings: KnownItemSettings,
    neighbours: WordNeighbours | None = None,
    df: Counter[str] | None = None,
    cooccurring: CooccurringWords | None = None,
) -> list[KnownItem]:
    """``settings.n`` known-item questions about ``docs`` (``(id, title, text)``), kinds in
    turn (a ``title`` draw of a passage without a title, or ``neighbour`` without
    ``neighbours``, becomes ``masked``; ``cooccur`` builds its own ``cooccurring``)."""
    df = df if df is not None else document_frequencies(f"{t} {x}" for _, t, x in docs)
    if {"cooccur", "mixed"} & set(settings.kinds) and cooccurring is None:
        cooccurring = CooccurringWords([f"{t} {x}" for _, t, x in docs], df)
    eligible = [d for d in docs if len(words(d[2])) >= settings.min_doc_words]
    if not eligible:
        raise ParameterError(f"no passage has {settings.min_doc_words} words or more")
    out: list[KnownItem] = []
    used: set[str] = set()
    attempt = 0
    while len(out) < settings.n and attempt < 20 * settings.n:
        rng = random.Random(f"{settings.seed}:{attempt}")
        kind = settings.kinds[attempt % len(settings.kinds)]
        attempt += 1
        doc_id, title, text = eligible[rng.randrange(len(eligible))]
        if doc_id in used:
            continue
        if kind.startswith("title") and len(title.split()) < 3:
            kind = {"title": "masked", "title-neighbour": "neighbour"}[kind]
        if kind.endswith("neighbour") and neighbours is None:
            kind = "title" if kind.startswith("title") else "masked"
        if kind.startswith("title"):
            tokens = title.split()[:settings.max_words]
        else:
            pool = [s.split() for s in sentences(text) if len(s.split()) >= settings.min_words]
            if not pool:
                continue
            tokens = _window(pool[rng.randrange(len(pool))], rng, settings)
        source = f"{title} {text}"
        if kind == "mixed" and neighbours is None:
            kind = "cooccur"
        replace = None
        finder = {"neighbour": neighbours, "title-neighbour": neighbours,
                  "cooccur": cooccurring, "mixed": _Alternate(neighbours, cooccurring)}.get(kind)
        if finder is not None:
            exclude = set(words(source))
            replace = lambda w, ex=exclude, f=finder: f.nearest(w, ex)  # noqa: E731
        kept = rewrite(tokens, df, settings.mask, replace)
        question = " ".join(kept).strip(" .,;:")
        if sum(is_content(w) for w in words(question)) < 2:
            continue
        used.add(doc_id)
        out.append(KnownItem(f"k{len(out):05d}", question, kind, doc_id,
                             round(copied_share(question, source), 4)))
    return out


def vocabulary(df: Counter[str], size: int, n_docs: int) -> list[str]:
    """The ``size`` most frequent content words present in 2 to 10% of the documents (ties
    by word): the words a replacement may be."""
    top = max(2, n_docs // 10)
    cands = [(c, w) for w, c in df.items() if is_content(w) and w.isalpha() and 2 <= c <= top]
    return [w for _, w in sorted(cands, key=lambda cw: (-cw[0], cw[1]))[:size]]


__all__ = ["KINDS", "CooccurringWords", "KnownItem", "KnownItemSettings", "WordNeighbours",
           "copied_share", "document_frequencies", "known_item_questions", "rewrite",
           "sentences", "vocabulary"]
