"""Sharded legs: the bm25 and dense legs built and searched as N contiguous row ranges.

BM25 shards are scored with the *global* statistics (document frequencies, number of
documents, average length), computed over every shard before any is written, with bm25s's
own scoring code: a shard's scores are those of the unsharded index, bit for bit, and the
top-k merge of the shards' results is exact. BM25 shard ``i`` is ``bm25/shard-<i>/``. Dense
shards are row ranges of the one memory-mapped ``dense/embeddings.npy`` (exact search) plus,
for ANN, one faiss file per shard (``dense/ann-<i>.faiss``). TF-IDF and the entity graph stay
whole (one per index): they are the small-corpus legs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.index.bm25 import no_terms_error
from intentrank.index.hits import NO_HITS, Hits, TokenIds, bm25_token_ids
from intentrank.index.settings import BM25Settings, IndexSettingsError


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


class _ShardTokens:
    """One shard's corpus as token ids (shard-local vocabulary, :func:`bm25_token_ids`), its
    documents' lengths and its document frequencies."""

    def __init__(self, tok: TokenIds) -> None:
        self.ids, self.vocab, self.lengths = tok.docs(), tok.vocab, tok.lengths
        n_terms = len(self.vocab)
        doc = np.repeat(np.arange(len(tok.lengths), dtype=np.int64), tok.lengths)
        pairs = np.unique(doc * n_terms + tok.ids)  # each (document, term) once
        self.df = np.bincount(pairs % n_terms, minlength=n_terms) if n_terms else \
            np.zeros(0, dtype=np.int64)
        self.total_len = int(tok.lengths.sum())


def _global_bm25(k1: float, b: float, method: str, global_df: dict[str, int], n_docs: int,
                 avg_len: float) -> Any:
    """A bm25s.BM25 whose ``build_index_from_ids`` scores with global statistics."""
    import bm25s

    class GlobalStatsBM25(bm25s.BM25):
        def build_index_from_ids(self, unique_token_ids: list[int],  # noqa: ARG002
                                 corpus_token_ids: list[list[int]], show_progress: bool = True,
                                 leave_progress: bool = False) -> dict[str, Any]:
            vocab, local_df = self._shard_vocab, self._shard_df
            doc_frequencies = {i: global_df[t] for t, i in vocab.items()}
            idf_fn = bm25s._select_idf_scorer(self.idf_method)
            if self.method in self.methods_requiring_nonoccurrence:
                self.nonoccurrence_array = bm25s._build_nonoccurrence_array(
                    doc_frequencies=doc_frequencies, n_docs=n_docs, compute_idf_fn=idf_fn,
                    calculate_tfc_fn=bm25s._select_tfc_scorer(self.method), l_d=avg_len,
                    l_avg=avg_len, k1=self.k1, b=self.b, delta=self.delta, dtype=self.dtype)
            else:
                self.nonoccurrence_array = None
            idf = bm25s._build_idf_array(doc_frequencies=doc_frequencies, n_docs=n_docs,
                                         compute_idf_fn=idf_fn, dtype=self.dtype)
            scores, doc_idx, vocab_idx = bm25s._build_scores_and_indices_for_matrix(
                corpus_token_ids=corpus_token_ids, idf_array=idf, avg_doc_len=avg_len,
                doc_frequencies=local_df, k1=self.k1, b=self.b, delta=self.delta,
                show_progress=show_progress, leave_progress=leave_progress, dtype=self.dtype,
                int_dtype=self.int_dtype, method=self.method,
                nonoccurrence_array=self.nonoccurrence_array)
            shape = (len(corpus_token_ids), len(vocab))
            data, indices, indptr = self._np_csc(data=scores, rows=doc_idx, cols=vocab_idx,
                                                 shape=shape)
            return {"data": data.astype(self.dtype), "indices": indices, "indptr": indptr,
                    "num_docs": len(corpus_token_ids)}

    return GlobalStatsBM25(method=method, k1=k1, b=b)


def build_bm25_shards(texts: Sequence[str], s: BM25Settings, root: Path,
                      bounds: list[tuple[int, int]], progress: bool = False) -> dict[str, Any]:
    """Tokenise every shard, add up the global statistics, then write each shard's bm25s
    index scored with them; return the statistics the manifest records."""
    import bm25s

    shards = [_ShardTokens(bm25_token_ids(list(texts[a:e]), s.stopwords, s.stemmer,
                                          progress=progress, tokens=s.tokens))
              for a, e in bounds]
    if not any(sh.total_len for sh in shards):
        raise no_terms_error(s)
    global_df: Counter[str] = Counter()
    for sh in shards:
        for token, i in sh.vocab.items():
            global_df[token] += int(sh.df[i])
    n_docs = sum(e - a for a, e in bounds)
    # np.mean of the lengths, as bm25s computes it for one index
    avg_len = float(np.concatenate([sh.lengths for sh in shards]).mean())
    for i, sh in enumerate(shards):
        retriever = _global_bm25(s.k1, s.b, s.method, global_df, n_docs, avg_len)
        retriever._shard_vocab = sh.vocab
        # sizes the score arrays: the (document, term) pairs of this shard
        retriever._shard_df = {i: int(c) for i, c in enumerate(sh.df)}
        retriever.index(bm25s.tokenization.Tokenized(sh.ids, sh.vocab),
                        show_progress=progress)
        out = root / bm25_shard_dir(i)
        out.parent.mkdir(exist_ok=True)
        retriever.save(str(out))
        shards[i] = None  # type: ignore[call-overload]  # free the shard's tokens
    return {"n_docs": n_docs, "avg_len": avg_len, "vocabulary": len(global_df)}


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
