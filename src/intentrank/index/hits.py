"""What every leg's search returns (:class:`Hits`), top-k selection and the BM25 tokenizer,
shared by the whole index, sharded or not."""

from __future__ import annotations

import functools
import re
import threading
from typing import Any, NamedTuple

import numpy as np


class Hits(NamedTuple):
    """One query's results from a leg: index rows and their scores, best first."""

    rows: np.ndarray
    scores: np.ndarray


NO_HITS = Hits(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


def top_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` columns of each row of ``scores`` (best first, ties by column)."""
    k = min(k, scores.shape[1])
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    return np.take_along_axis(part, order, axis=1), np.take_along_axis(vals, order, axis=1)


def top_k(scores: np.ndarray, k: int, positive_only: bool = True) -> Hits:
    """Indices and scores of the ``k`` largest scores, best first (ties by index).

    With ``positive_only`` (lexical legs) documents scoring 0 are not returned."""
    check_k(k)
    rows, vals = (a[0] for a in top_rows(scores[None, :], k))
    if positive_only:
        rows, vals = rows[vals > 0], vals[vals > 0]
    return Hits(rows.astype(np.int64), vals.astype(np.float64))


SMALL_BATCH = 4
"""Query batches up to this size are scored without BLAS (:func:`dense_scores`)."""


def dense_scores(embeddings: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """float32 ``(n_docs, n_queries)`` inner products. A few queries are scored by numpy's
    own loops (``einsum``), not by BLAS, whose threads wait on each other from a worker
    thread with the cores busy (the service); a query's scores then also never depend on the
    queries scored with it."""
    if queries.shape[0] <= SMALL_BATCH:
        return np.einsum("dj,qj->dq", embeddings, queries, dtype=np.float32)
    return np.asarray(embeddings @ queries.T, dtype=np.float32)


def check_k(k: Any) -> None:
    """``k`` must be a positive integer (a search for k < 1 results would silently be empty)."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be a positive integer (the number of results), got {k!r}")


def check_allow(allow: Any, n: int) -> np.ndarray | None:
    """A leg search's ``allow``: None, or a bool mask over the index's ``n`` rows. The
    search then returns the top k among those rows (pre-filtering), never fewer because
    candidates were cut before filtering, scored as an index of those rows only would score
    them (:mod:`intentrank.index.subset`)."""
    if allow is None:
        return None
    allow = np.asarray(allow)
    if allow.dtype != bool or allow.shape != (n,):
        raise ValueError(f"allow must be a bool mask of {n} rows, got {allow.dtype} of shape "
                         f"{allow.shape}")
    return allow


def filter_record(rec: dict[str, Any]) -> dict[str, Any]:
    """What a filter sees of a docs.jsonl record: its metadata, ``id`` and ``parent_id``."""
    return {**(rec.get("metadata") or {}), "id": rec["id"], "parent_id": rec.get("parent_id")}


# bm25s's default token pattern, and Lucene's StandardTokenizer's one-character words too
WORDS = {"bm25s": re.compile(r"(?u)\b\w\w+\b"), "lucene": re.compile(r"(?u)\b\w+\b")}
# The same words found faster: a run of word characters is matched whole (greedy, and a
# match starts only where the previous ended or at a non-word character), so the word
# boundaries hold by themselves and findall gives the same list (tests/test_bm25_tokens.py).
_SPLIT = {"bm25s": re.compile(r"\w{2,}").findall, "lucene": re.compile(r"\w+").findall}


def bm25_tokenize(texts: list[str], stopwords: str | None, stemmer: str | None,
                  progress: bool = False, tokens: str = "bm25s") -> list[list[str]]:
    """The tokenizer used for both documents and queries: bm25s's rules (``bm25s.tokenize``
    with ``return_ids=False``: lower case, words of two or more characters, the stopword
    list, then the stemmer; ``tokens="lucene"``: words of one character too), here without
    bm25s's per-call progress bars, which cost a short query more than its tokens (the same
    tokens: tests/test_bm25_tokens.py). An index's corpus goes through
    :func:`bm25_token_ids` instead: the same terms, as ids, in one pass."""
    stop = _stopwords(stopwords)
    stem = pystemmer(stemmer, threading.get_ident())
    stems: dict[str, str] = {}
    if progress:
        from tqdm.auto import tqdm

        texts = tqdm(texts, desc="BM25 tokens", unit="text")  # type: ignore[assignment]
    out, split = [], _SPLIT[tokens]
    for text in texts:
        words = [w for w in split(text.lower()) if w not in stop]
        if stem is not None:
            for w in words:
                if w not in stems:
                    stems[w] = stem.stemWord(w)
            words = [stems[w] for w in words]
        out.append(words)
    return out


class TokenIds(NamedTuple):
    """A corpus as BM25 term ids: :func:`bm25_tokenize`'s terms of every text, numbered in
    order of first appearance (``vocab``: term -> id), all texts' ids one after another
    (``ids``) and each text's number of them (``lengths``)."""

    ids: np.ndarray
    lengths: np.ndarray
    vocab: dict[str, int]

    def docs(self) -> list[list[int]]:
        """Each text's ids as a list (bm25s's ``Tokenized.ids``)."""
        ends = np.cumsum(self.lengths).tolist()
        flat = self.ids.tolist()
        return [flat[a:e] for a, e in zip([0, *ends[:-1]], ends, strict=True)]


class _FirstSeen(dict):
    """word -> its number in order of first sight (a new word's first lookup numbers it)."""

    def __missing__(self, word: str) -> int:
        i = self[word] = len(self)
        return i


def bm25_token_ids(texts: list[str], stopwords: str | None, stemmer: str | None,
                   progress: bool = False, tokens: str = "bm25s") -> TokenIds:
    """:func:`bm25_tokenize`'s terms of ``texts`` as ids, in one pass over the words: each
    word is numbered through a word table (``map`` over a dict, in C; only a new word runs
    Python); then each distinct word is checked against the stopwords and stemmed once (one
    ``stemWords`` call), and the words' numbers are turned into term ids by one array
    lookup. The terms and their order are those of :func:`bm25_tokenize`, numbered by first
    appearance (tests/test_bm25_tokens.py)."""
    stop = _stopwords(stopwords)
    stem = pystemmer(stemmer, threading.get_ident())
    if progress:
        from tqdm.auto import tqdm

        texts = tqdm(texts, desc="BM25 tokens", unit="text")  # type: ignore[assignment]
    seen = _FirstSeen()
    number_word = seen.__getitem__
    split, numbers, counts = _SPLIT[tokens], [], []
    for text in texts:  # numbered text by text: no list of every word's string at once
        found = split(text.lower())
        counts.append(len(found))
        numbers += map(number_word, found)
    word_ids = np.array(numbers, dtype=np.int64)
    del numbers
    distinct = list(seen)
    terms = distinct if stem is None else stem.stemWords(distinct)
    vocab: dict[str, int] = {}
    number = vocab.setdefault  # in the words' order of first sight: the terms' order
    term_of = np.fromiter((-1 if w in stop else number(t, len(vocab))
                           for w, t in zip(distinct, terms, strict=True)),
                          dtype=np.int64, count=len(distinct))
    ids = term_of[word_ids]
    lengths = np.asarray(counts, dtype=np.int64)
    dropped = ids < 0
    if dropped.any():  # the stopwords go; each text keeps what is left
        doc = np.repeat(np.arange(len(lengths)), lengths)
        lengths = lengths - np.bincount(doc[dropped], minlength=len(lengths))
        ids = ids[~dropped]
    return TokenIds(ids, lengths, vocab)


@functools.lru_cache(maxsize=16)
def _stopwords(stopwords: str | None) -> frozenset[str]:
    """bm25s's stopword list of that name (``en``, ``en_plus``, ...) as a set."""
    from bm25s.tokenization import _infer_stopwords

    return frozenset(_infer_stopwords(stopwords)) if stopwords else frozenset()


@functools.lru_cache(maxsize=64)
def pystemmer(language: str | None, thread: int) -> Any:
    """One PyStemmer instance per language and thread (building one per query batch costs
    time; a stemmer is not safe to share between threads)."""
    import Stemmer

    return Stemmer.Stemmer(language) if language else None
