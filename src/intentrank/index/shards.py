"""Sharded legs: the bm25 and dense legs built and searched as N contiguous row ranges.

BM25 shards are scored with the *global* statistics (document frequencies, number of
documents, average length), computed over every shard before any is written, with the
index's one BM25 formula (:mod:`intentrank.index.bm25_scorer`): a shard's scores are those of
the unsharded index, and the top-k merge of the shards' results is exact. The index's term
rows are kept whole (``terms/bm25*``), as for an unsharded index: updates start from them.
BM25 shard ``i`` is ``bm25/shard-<i>/``. Dense shards are row ranges of the one memory-mapped
``dense/embeddings.npy`` (exact search) plus, for ANN, one faiss file per shard
(``dense/ann-<i>.faiss``). TF-IDF and the entity graph stay whole (one per index): they are
the small-corpus legs.

With segments, the shards are the row ranges of an index's base segment (what a build or a
full merge writes); a segment an update adds is one more part beside them (its own ANN
structure), and BM25 over several segments is scored from the postings with the live rows'
global statistics (:class:`intentrank.index.bm25_scorer.Postings`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.index.bm25 import no_terms_error
from intentrank.index.bm25_scorer import BM25Stats, bm25_from_rows
from intentrank.index.hits import NO_HITS, Hits, bm25_token_ids
from intentrank.index.settings import BM25Settings, IndexSettingsError
from intentrank.index.terms import TermRows


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous (start, end) row ranges of near-equal size covering ``n`` rows."""
    if shards > n:
        raise IndexSettingsError(f"invalid index settings: shards={shards} is more than the "
                                 f"{n} documents of the corpus")
    edges = np.linspace(0, n, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def bm25_shard_dir(shard: int) -> str:
    """A BM25 shard's directory, relative to the generation directory."""
    return f"bm25/shard-{shard:03d}"


def token_ids(tokens: list[list[str]]) -> tuple[list[list[int]], dict[str, int]]:
    """Each document's tokens as ids of a vocabulary numbered in order of appearance."""
    vocab: dict[str, int] = {}
    return [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in tokens], vocab


def global_stats(parts: Sequence[TermRows]) -> BM25Stats:
    """The BM25 statistics of every part's rows together (one collection)."""
    df: Counter[str] = Counter()
    for part in parts:
        for term, d in zip(part.vocab, np.diff(part.counts.tocsc().indptr).tolist(),
                           strict=True):
            df[term] += d
    lengths = np.concatenate([np.asarray(p.counts.sum(axis=1)).ravel().astype(np.int64)
                              for p in parts])
    return BM25Stats(len(lengths), float(lengths.mean()), dict(df))  # np.mean, as bm25s


def write_bm25_shards(rows: TermRows, s: BM25Settings, root: Path,
                      bounds: list[tuple[int, int]]) -> dict[str, Any]:
    """Write each shard's bm25s index (rows ``bounds`` of ``rows``) scored with the global
    statistics of all of them (:func:`intentrank.index.bm25_scorer.bm25_from_rows`); return
    the statistics the manifest records."""
    from intentrank.index.bm25 import save_bm25s

    parts = [rows.take(np.arange(a, e)).used_terms() for a, e in bounds]
    stats = global_stats(parts)
    for i, part in enumerate(parts):
        out = root / bm25_shard_dir(i)
        out.parent.mkdir(exist_ok=True)
        save_bm25s(bm25_from_rows(part, s, stats), out)
    return {"n_docs": stats.n, "avg_len": stats.avg_len, "vocabulary": len(stats.df)}


def build_bm25_shards(texts: Sequence[str], s: BM25Settings, root: Path,
                      bounds: list[tuple[int, int]], progress: bool = False) -> dict[str, Any]:
    """Tokenise every shard, keep the index's term rows (``terms/bm25*``, what updates start
    from), then write each shard's bm25s index scored with the global statistics; return the
    statistics the manifest records."""
    from intentrank.index.bm25 import term_rows

    parts = [term_rows(bm25_token_ids(list(texts[a:e]), s.stopwords, s.stemmer,
                                      progress=progress, tokens=s.tokens)) for a, e in bounds]
    if not any(p.counts.nnz for p in parts):
        raise no_terms_error(s)
    rows = TermRows.stack(parts)
    rows.save(root, "bm25")
    return write_bm25_shards(rows, s, root, bounds)


def search_bm25s(bm25: Any, bounds: list[tuple[int, int]], tokens: list[list[str]], k: int,
                 backend: str = "numpy", allow: np.ndarray | None = None) -> list[Hits]:
    """Search one bm25s index, or a list of shards' (``bounds`` their rows) merged."""
    from intentrank.index.bm25 import retrieve

    if isinstance(bm25, list):
        return search_bm25_shards(bm25, bounds, tokens, k, backend, allow)
    return retrieve(bm25, tokens, k, backend, allow=allow)


def search_bm25_shards(retrievers: Sequence[Any], bounds: list[tuple[int, int]],
                       tokens: list[list[str]], k: int, backend: str = "numpy",
                       allow: np.ndarray | None = None) -> list[Hits]:
    """Each shard's positive top ``k`` for each tokenised query (bm25s ``backend``; only
    rows ``allow`` keeps, if given), merged exactly."""
    from intentrank.index.bm25 import retrieve

    per_shard = [retrieve(retriever, tokens, k, backend, offset=start,
                          allow=None if allow is None else allow[start:end])
                 for retriever, (start, end) in zip(retrievers, bounds, strict=True)]
    return merge_hits(per_shard, k)


def merge_hits(per_shard: Sequence[Sequence[Hits]], k: int) -> list[Hits]:
    """Merge each query's results from every shard (global rows) into one top ``k``, best
    first, ties by row."""
    n_queries = len(per_shard[0]) if per_shard else 0
    merged: list[Hits] = []
    for j in range(n_queries):
        rows = np.concatenate([np.asarray(sh[j].rows, dtype=np.int64) for sh in per_shard])
        scores = np.concatenate([np.asarray(sh[j].scores) for sh in per_shard])
        keep = rows >= 0
        rows, scores = rows[keep], scores[keep]
        order = np.lexsort((rows, -scores))[:k]
        merged.append(Hits(rows[order], scores[order]) if len(order) else NO_HITS)
    return merged
