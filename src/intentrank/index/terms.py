"""Per-document term data, and the lexical legs built from it.

A generation keeps what each document contributes, row by row, besides the legs themselves:
its BM25 term frequencies (``terms/bm25.npz`` + ``terms/bm25_vocab.json``) and its TF-IDF
counts (``terms/tfidf.npz`` + ``terms/tfidf_vocab.json``); the entity graph keeps
``graph/entities.json``. The legs' corpus-wide parts (BM25 impact scores with the corpus's
document frequencies and average length, TF-IDF weights and norms, the graph's edges and
PageRank) are computed from these rows (BM25 by :mod:`intentrank.index.bm25_scorer`, the
others by the functions here; over several segments, deletes or a filter by
:mod:`intentrank.index.tfidf_segments` and :mod:`intentrank.index.graph_segments`, to the
same result), the same way for a fresh build and for an update
(:mod:`intentrank.index.update`), which therefore never tokenises or encodes a document it
already holds and gives every leg exactly what a fresh build of the final corpus gives.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from intentrank.index.entities import entity_edges, pagerank_sparse
from intentrank.index.settings import GraphSettings, TfidfSettings

TERMS_DIR = "terms"


class TermRows:
    """Documents as rows of term counts (CSR, float32 counts) over a vocabulary of terms."""

    def __init__(self, counts: sp.csr_matrix, vocab: list[str]) -> None:
        self.counts, self.vocab = counts.tocsr(), vocab

    @classmethod
    def from_tokens(cls, tokens: Sequence[Sequence[str]]) -> TermRows:
        """Rows of each document's token counts; terms numbered in order of appearance."""
        index: dict[str, int] = {}
        cols = [index.setdefault(t, len(index)) for doc in tokens for t in doc]
        rows = np.repeat(np.arange(len(tokens)), [len(doc) for doc in tokens])
        counts = sp.csr_matrix((np.ones(len(cols), dtype=np.float32), (rows, cols)),
                               shape=(len(tokens), len(index)), dtype=np.float32)
        counts.sum_duplicates()
        return cls(counts, list(index))

    def __len__(self) -> int:
        return self.counts.shape[0]

    def save(self, gen: Path, name: str) -> None:
        out = gen / TERMS_DIR
        out.mkdir(exist_ok=True)
        sp.save_npz(out / f"{name}.npz", self.counts, compressed=False)
        (out / f"{name}_vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False))

    @classmethod
    def load(cls, gen: Path, name: str) -> TermRows | None:
        """The rows saved under ``name``, or None if the generation has none (an index built
        before they were kept)."""
        base = gen / TERMS_DIR
        if not (base / f"{name}.npz").is_file():
            return None
        vocab = json.loads((base / f"{name}_vocab.json").read_text(encoding="utf-8"))
        return cls(sp.load_npz(base / f"{name}.npz").tocsr(), vocab)

    def take(self, rows: Sequence[int] | np.ndarray) -> TermRows:
        """These rows, in this order (same vocabulary)."""
        return TermRows(self.counts[np.asarray(rows, dtype=np.int64)], self.vocab)

    @staticmethod
    def stack(parts: Sequence[TermRows]) -> TermRows:
        """The rows of every part, in order, over the first part's vocabulary followed by the
        other parts' new terms (terms no row uses are dropped)."""
        vocab = list(parts[0].vocab) if parts else []
        more = any(part.vocab for part in parts[1:])
        index = {t: i for i, t in enumerate(vocab)} if more else {}
        blocks = []
        for n, part in enumerate(parts):
            if n == 0:
                cols = np.arange(len(vocab), dtype=np.int64)
            else:
                cols = np.array([index.setdefault(t, len(index)) for t in part.vocab],
                                dtype=np.int64)
            c = part.counts.tocoo()
            blocks.append((c.row, cols[c.col] if len(cols) else c.col, c.data, c.shape[0]))
        vocab = list(index) if more else vocab
        offsets = np.cumsum([0] + [b[3] for b in blocks])
        rows = np.concatenate([b[0] + o for b, o in zip(blocks, offsets, strict=False)]
                              or [np.zeros(0, np.int64)])
        cols = np.concatenate([b[1] for b in blocks] or [np.zeros(0, np.int64)])
        data = np.concatenate([b[2] for b in blocks] or [np.zeros(0, np.float32)])
        counts = sp.csr_matrix((data, (rows, cols)), shape=(int(offsets[-1]), len(vocab)),
                               dtype=np.float32)
        return TermRows(counts, vocab).used_terms()

    def used_terms(self) -> TermRows:
        """The same rows over the terms some row uses (in the same order)."""
        used = np.bincount(self.counts.indices, minlength=len(self.vocab)) > 0
        if used.all():
            return self
        keep = np.flatnonzero(used)
        return TermRows(self.counts[:, keep], [self.vocab[i] for i in keep.tolist()])

    def sorted_vocab(self) -> TermRows:
        """The same rows with the vocabulary in sorted order (scikit-learn's column order),
        indices sorted within each row."""
        if sorted(self.vocab) == self.vocab:  # (distinct terms: sorted means ascending)
            return self
        order = sorted(range(len(self.vocab)), key=self.vocab.__getitem__)
        counts = self.counts[:, order].tocsr()
        counts.sort_indices()
        return TermRows(counts, [self.vocab[i] for i in order])


# -- TF-IDF -------------------------------------------------------------------------------
def tfidf_vectorizer(s: TfidfSettings) -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, s.ngram_max), max_features=s.max_features,
                           stop_words=s.stop_words, sublinear_tf=s.sublinear_tf,
                           dtype=np.float32)


def tfidf_rows(texts: Sequence[str], s: TfidfSettings) -> TermRows:
    """Each text's counts of the TF-IDF leg's terms (its analyzer: n-grams, stop words)."""
    from sklearn.feature_extraction.text import CountVectorizer

    counter = CountVectorizer(ngram_range=(1, s.ngram_max), stop_words=s.stop_words,
                              dtype=np.float32)
    try:
        counts = counter.fit_transform(texts)
        vocab = counter.get_feature_names_out().tolist()
    except ValueError:  # no text has a term (e.g. only stop words)
        counts, vocab = sp.csr_matrix((len(texts), 0), dtype=np.float32), []
    return TermRows(counts, vocab)


def tfidf_from_rows(rows: TermRows, s: TfidfSettings) -> tuple[Any, sp.csr_matrix]:
    """The fitted vectorizer and document matrix scikit-learn's ``TfidfVectorizer`` gives for
    the texts these counts came from: the ``max_features`` most frequent terms, idf and
    row norms over these rows."""
    from sklearn.feature_extraction.text import TfidfTransformer

    rows = rows.sorted_vocab()
    vectorizer = tfidf_vectorizer(s)
    if not rows.vocab:
        raise ValueError("empty vocabulary; perhaps the documents only contain stop words")
    keep = _most_frequent(rows.counts, s.max_features)
    counts = rows.counts[:, keep].tocsr()
    counts.sort_indices()
    vectorizer.vocabulary_ = {rows.vocab[i]: n for n, i in enumerate(keep.tolist())}
    vectorizer.fixed_vocabulary_ = False
    transformer = TfidfTransformer(norm=vectorizer.norm, use_idf=vectorizer.use_idf,
                                   smooth_idf=vectorizer.smooth_idf,
                                   sublinear_tf=vectorizer.sublinear_tf)
    matrix = transformer.fit_transform(counts)
    vectorizer._tfidf = transformer
    return vectorizer, sp.csr_matrix(matrix, dtype=np.float32)


def _most_frequent(counts: sp.csr_matrix, limit: int | None) -> np.ndarray:
    """The columns scikit-learn's ``CountVectorizer._limit_features`` keeps for
    ``max_features=limit`` (min_df 1, max_df 1.0), computed the same way, in order."""
    if limit is None or counts.shape[1] <= limit:
        return np.arange(counts.shape[1])
    return most_frequent_of(np.asarray(counts.sum(axis=0)).ravel(), limit)


def most_frequent_of(tfs: np.ndarray, limit: int | None) -> np.ndarray:
    """The positions of the ``limit`` largest term totals ``tfs`` (in sorted-vocabulary
    order, float32 as scikit-learn sums float32 counts), ascending, ties as its unstable
    argsort breaks them."""
    if limit is None or len(tfs) <= limit:
        return np.arange(len(tfs))
    return np.sort((-tfs).argsort()[:limit])


def save_tfidf(vectorizer: Any, matrix: sp.csr_matrix, out: Path) -> None:
    out.mkdir()
    with open(out / "vectorizer.pkl", "wb") as fh:
        pickle.dump(vectorizer, fh)
    sp.save_npz(out / "matrix.npz", matrix.tocsr(), compressed=False)


# -- entity graph -------------------------------------------------------------------------
def save_graph(entities: Sequence[set[str] | Sequence[str]], s: GraphSettings, out: Path
               ) -> dict[str, int]:
    """The graph leg of documents with these entities: edges, PageRank, the entity lists."""
    sets = [set(e) for e in entities]
    edges, pr = graph_of(sets, s)
    out.mkdir()
    (out / "entities.json").write_text(json.dumps([sorted(e) for e in sets]))
    np.save(out / "pagerank.npy", pr)
    np.save(out / "edges.npy", edges)
    return {"edges": int(len(edges)), "docs_with_entities": int(sum(1 for e in sets if e))}


def graph_of(entities: Sequence[set[str] | Sequence[str]], s: GraphSettings
             ) -> tuple[np.ndarray, np.ndarray]:
    """The entity graph's edges and each document's PageRank."""
    sets = [set(e) for e in entities]
    edges = entity_edges(sets, window=s.window, min_shared=s.min_shared)
    return edges, pagerank_sparse(len(sets), edges, s.damping)
