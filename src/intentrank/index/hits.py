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


def bm25_tokenize(texts: list[str], stopwords: str | None, stemmer: str | None,
                  progress: bool = False, tokens: str = "bm25s") -> list[list[str]]:
    """The tokenizer used for both documents and queries: bm25s's rules (``bm25s.tokenize``
    with ``return_ids=False``: lower case, words of two or more characters, the stopword
    list, then the stemmer; ``tokens="lucene"``: words of one character too), here without
    bm25s's per-call progress bars, which cost a short query more than its tokens (the same
    tokens: tests/test_bm25_tokens.py)."""
    from bm25s.tokenization import _infer_stopwords

    stop = frozenset(_infer_stopwords(stopwords)) if stopwords else frozenset()
    stem = pystemmer(stemmer, threading.get_ident())
    stems: dict[str, str] = {}
    if progress:
        from tqdm.auto import tqdm

        texts = tqdm(texts, desc="BM25 tokens", unit="text")  # type: ignore[assignment]
    out, split = [], WORDS[tokens].findall
    for text in texts:
        words = [w for w in split(text.lower()) if w not in stop]
        if stem is not None:
            for w in words:
                if w not in stems:
                    stems[w] = stem.stemWord(w)
            words = [stems[w] for w in words]
        out.append(words)
    return out


@functools.lru_cache(maxsize=64)
def pystemmer(language: str | None, thread: int) -> Any:
    """One PyStemmer instance per language and thread (building one per query batch costs
    time; a stemmer is not safe to share between threads)."""
    import Stemmer

    return Stemmer.Stemmer(language) if language else None
