"""Aspect-labelled question sets for method 4 (coverage), made two ways from a corpus:

- :func:`compose_pairs`: a broad question composed of two real labelled queries of the same
  split ("A? And B?"; :func:`restyled` writes them as one sentence, "A, and b?"), paired
  greedily by the cosine of their embeddings (the closest unused partner within
  ``[min_cosine, max_cosine]`` whose relevant documents do not overlap).
  Each original query is one aspect (subtopic): its relevant documents are the aspect's
  gold documents with their real grades, and its text is the aspect's text.
- :func:`from_generated`: the two-document questions of ``intentrank generate`` (kinds
  comparison, multi-aspect, ...): each source document is one aspect with grade 1.

The reference sub-answer of an aspect (what NCOM looks for) is the *key sentence* of the
aspect's best gold document (highest grade, then the first listed): the sentence of at least
:data:`MIN_SENTENCE_TOKENS` tokens with the largest unigram F1 against a cue (the original
query for composed questions; the generated question and its reference answer for
generated ones), see :func:`key_sentence`.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.data.aspects import Aspect, AspectQuestion
from intentrank.errors import DataError
from intentrank.measures.ncom import tokens
from intentrank.types import Query

MIN_SENTENCE_TOKENS = 6
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def unigram_f1(a: Sequence[str], b: Sequence[str]) -> float:
    """F1 of the clipped unigram overlap of two token lists."""
    overlap = sum((Counter(a) & Counter(b)).values())
    if not overlap:
        return 0.0
    p, r = overlap / len(a), overlap / len(b)
    return 2 * p * r / (p + r)


def key_sentence(text: str, cue: str) -> str:
    """The sentence of ``text`` (>= MIN_SENTENCE_TOKENS tokens) with the largest unigram F1
    against ``cue`` (ties: the first); the first 40 words when no sentence is long enough."""
    cue_tokens = tokens(cue)
    best, best_score = "", -1.0
    for sentence in _SENTENCE.split(text.strip()):
        toks = tokens(sentence)
        if len(toks) < MIN_SENTENCE_TOKENS:
            continue
        score = unigram_f1(toks, cue_tokens)
        if score > best_score:
            best, best_score = sentence.strip(), score
    return best or " ".join(text.split()[:40])


def _best_doc(docs: Mapping[str, int]) -> str:
    return max(docs.items(), key=lambda kv: kv[1])[0]  # max keeps the first of equal grades


STYLES = ("questions", "sentence")


def compose_text(a: str, b: str, style: str = "questions") -> str:
    """One question from two query texts: ``"A? And B?"`` (``questions``), or one sentence
    ``"A, and b?"`` (``sentence``: the second text's first letter lowered unless it starts an
    acronym such as "ALDH1")."""
    a, b = a.strip().rstrip(".?! "), b.strip().rstrip(".?! ")
    if style == "questions":
        return f"{a}? And {b}?"
    if style != "sentence":
        raise ValueError(f"style {style!r}: expected one of {', '.join(STYLES)}")
    if b[:1].isupper() and not b[1:2].isupper():
        b = b[0].lower() + b[1:]
    return f"{a}, and {b}?"


def restyled(questions: Sequence[AspectQuestion], style: str) -> list[AspectQuestion]:
    """Composed ``questions`` with their text written in ``style`` from their two aspects'
    texts (the original queries); the aspects, gold documents and ids stay."""
    out = []
    for q in questions:
        if q.source != "composed" or len(q.aspects) != 2:
            raise ValueError(f"{q.id}: only composed two-aspect questions can be restyled")
        out.append(replace(q, text=compose_text(q.aspects[0].text, q.aspects[1].text, style),
                           meta={**q.meta, "style": style}))
    return out


def compose_pairs(queries: Sequence[Query], qrels: Mapping[str, Mapping[str, int]],
                  vectors: np.ndarray, text_of: Callable[[str], str], n: int, seed: int = 0,
                  min_cosine: float = 0.3, max_cosine: float = 0.9,
                  id_prefix: str = "c") -> list[AspectQuestion]:
    """Up to ``n`` composed two-aspect questions (module doc). ``vectors``: unit-norm query
    embeddings, one row per query; queries are visited in a ``seed``-shuffled order."""
    if len(vectors) != len(queries):
        raise ValueError(f"{len(vectors)} vectors for {len(queries)} queries")
    rel = {q.id: {d: g for d, g in qrels.get(q.id, {}).items() if g > 0} for q in queries}
    live = [i for i, q in enumerate(queries) if rel[q.id]]
    sims = np.asarray(vectors, dtype=np.float64) @ np.asarray(vectors, dtype=np.float64).T
    order = live[:]
    random.Random(seed).shuffle(order)
    used: set[int] = set()
    out: list[AspectQuestion] = []
    for i in order:
        if len(out) >= n:
            break
        if i in used:
            continue
        partners = [j for j in live if j != i and j not in used
                    and min_cosine <= sims[i, j] <= max_cosine
                    and not set(rel[queries[i].id]) & set(rel[queries[j].id])]
        if not partners:
            continue
        j = max(partners, key=lambda p: (sims[i, p], -p))
        used |= {i, j}
        aspects = tuple(
            Aspect(str(k + 1), key_sentence(text_of(_best_doc(rel[q.id])), q.text),
                   rel[q.id], q.text)
            for k, q in enumerate((queries[i], queries[j])))
        out.append(AspectQuestion(
            f"{id_prefix}{len(out):04d}", compose_text(queries[i].text, queries[j].text),
            aspects, "composed", {"queries": [queries[i].id, queries[j].id],
                                  "cosine": round(float(sims[i, j]), 4)}))
    return out


def from_generated(path: str | Path, text_of: Callable[[str], str],
                   known: Callable[[str], bool] = lambda d: True) -> list[AspectQuestion]:
    """The two-document questions of a generated set's ``queries.jsonl`` (``intentrank
    generate``), one aspect per source document; single-document questions are skipped.
    DataError names the line and field of a record without its documents or answer."""
    path = Path(path)
    out = []
    for n, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec: dict[str, Any] = json.loads(line)
            meta = rec["metadata"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f"not a generated question record ({exc})", path, n) from None
        if meta.get("kind") != "pair":
            continue
        docs, answer = meta.get("documents"), meta.get("answer")
        if not isinstance(docs, list) or len(docs) != 2 or not all(map(known, docs)):
            raise DataError(f"a pair question needs two known documents, got {docs!r}", path,
                            n, "metadata.documents")
        if not isinstance(answer, str):
            raise DataError("has no reference answer", path, n, "metadata.answer")
        cue = f"{rec['text']} {answer}"
        aspects = tuple(Aspect(str(k + 1), key_sentence(text_of(d), cue), {d: 1})
                        for k, d in enumerate(docs))
        out.append(AspectQuestion(str(rec["_id"]), rec["text"], aspects, "generated",
                                  {"type": meta.get("two_document_type", ""),
                                   "reference_answer": answer}))
    return out
