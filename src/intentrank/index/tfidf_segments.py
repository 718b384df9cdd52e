"""TF-IDF over segments: the leg's statistics combined from each segment's kept counts.

Each segment keeps its rows' TF-IDF counts (``terms/tfidf.npz`` + ``terms/tfidf_vocab.json``,
written with the segment). A reader of an index of several segments, with deleted rows, or
searching a filter, combines them (:func:`combine`) instead of stacking every row into one
matrix: the document frequencies, count and term totals (``max_features``) are those of the
included (live, allowed) rows of every segment, each segment's term numbering is mapped onto
the whole vocabulary once per segment, and each segment's rows are weighted with the combined
idf and normalised on their own. The vocabulary, its order, the terms ``max_features`` keeps
(ties included), the idf and every row are element for element those of scikit-learn's
``TfidfVectorizer`` fitted on the included documents (a fresh build), so scores are the same
bit for bit.

A segment's files never change, so what a reader derives from them alone (its counts, the
term -> column map, the sorted order of its terms) is kept for the process while any reader
holds it (:func:`segment_terms`): the reader of the next commit, opened while the previous
one still serves (``serve --watch-index``), loads only the new segment's counts; what it
recomputes per commit is proportional to the included postings (numpy), not a re-stacking
of the vocabulary.
"""

from __future__ import annotations

import bisect
import os
import threading
import weakref
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from intentrank.index.settings import TfidfSettings
from intentrank.index.terms import TermRows, most_frequent_of, tfidf_vectorizer


class SegmentTerms:
    """One segment's kept TF-IDF counts (CSR, float32) and vocabulary, with the maps derived
    from them alone (built on first use, kept with the object)."""

    def __init__(self, rows: TermRows) -> None:
        self.counts, self.vocab = rows.counts, rows.vocab
        self.counts.sort_indices()

    def __len__(self) -> int:
        return self.counts.shape[0]

    @cached_property
    def column(self) -> dict[str, int]:
        """Term -> this segment's column."""
        return {t: i for i, t in enumerate(self.vocab)}

    @cached_property
    def sorted_vocab(self) -> list[str]:
        return sorted(self.vocab)

    @cached_property
    def rank(self) -> np.ndarray:
        """Each column's position in the sorted vocabulary."""
        order = np.array(sorted(range(len(self.vocab)), key=self.vocab.__getitem__),
                         dtype=np.int64) if self.vocab != self.sorted_vocab else None
        if order is None:
            return np.arange(len(self.vocab), dtype=np.int64)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return rank


_KEPT: weakref.WeakValueDictionary[tuple[Any, ...], SegmentTerms] = \
    weakref.WeakValueDictionary()
_KEPT_LOCK = threading.Lock()


def segment_terms(seg_dir: Path) -> SegmentTerms | None:
    """The TF-IDF counts kept in segment directory ``seg_dir`` (None: it kept none), shared
    with every reader of this process that holds the same file (same device, inode, size and
    mtime: a hard link in a later generation is the same file)."""
    npz = seg_dir / "terms" / "tfidf.npz"
    try:
        st = os.stat(npz)
    except FileNotFoundError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _KEPT_LOCK:
        found = _KEPT.get(key)
    if found is not None:
        return found
    rows = TermRows.load(seg_dir, "tfidf")
    if rows is None:  # pragma: no cover - removed between stat and load
        return None
    made = SegmentTerms(rows)
    with _KEPT_LOCK:
        return _KEPT.setdefault(key, made)


def index_segments(index: Any) -> list[SegmentTerms] | None:
    """Each segment's kept TF-IDF counts of an open Index (shared with this process's other
    readers, kept on the Index); None for an index built before they were kept."""
    from intentrank.index.errors import IndexCorruptError

    if "_tfidf_segments" in index.__dict__:
        return index.__dict__["_tfidf_segments"]
    out = []
    for entry in index.segments:
        with index._reading(f"{entry.dir}/terms/tfidf.npz"):
            out.append(segment_terms(index.gen_dir / entry.dir))
    if None in out and not index.flat:
        raise IndexCorruptError(f"{index.gen_dir} has deleted rows or several segments but "
                                f"not every segment has terms/tfidf.npz; {index._hint}")
    index.__dict__["_tfidf_segments"] = found = None if None in out else out
    return found


def split(index: Any, rows: np.ndarray | None) -> list[tuple[SegmentTerms, np.ndarray]] | None:
    """An open Index's rows (all live rows if None; ascending) as (segment's TF-IDF counts,
    its local rows) per segment; None for an index built before the counts were kept."""
    from intentrank.index.segments import local_rows

    segs = index_segments(index)
    return None if segs is None else list(zip(segs, local_rows(index, rows), strict=True))


def live_leg(index: Any) -> TfidfParts:
    """The TF-IDF leg of an open Index's live rows (computed once, kept on the Index)."""
    with _KEPT_LOCK:
        lock = index.__dict__.setdefault("_tfidf_lock", threading.Lock())
    with lock:
        if "_tfidf_parts_leg" not in index.__dict__:
            parts = combine(split(index, None) or [], index.settings.tfidf)
            if parts is None:
                raise ValueError("empty vocabulary; perhaps the documents only contain stop "
                                 "words")
            index.__dict__["_tfidf_parts_leg"] = parts
        return index.__dict__["_tfidf_parts_leg"]


class TfidfParts:
    """The TF-IDF leg of the included rows of several segments (or of a build's one matrix):
    the fitted vectorizer (the whole vocabulary's columns) and each part's weighted,
    normalised rows."""

    def __init__(self, vectorizer: Any, matrices: list[sp.csr_matrix]) -> None:
        self.vectorizer = vectorizer
        self.matrices = matrices
        self._transposed = [m.T.tocsr() for m in matrices]  # q @ m.T, as scipy computes it

    @cached_property
    def matrix(self) -> sp.csr_matrix:
        """Every part's rows as one matrix (what a fresh build writes as tfidf/matrix.npz)."""
        return sp.csr_matrix(sp.vstack(self.matrices, format="csr"), dtype=np.float32)

    def scores(self, texts: list[str]) -> np.ndarray:
        """float32 scores (queries x included rows, in part order)."""
        q = self.vectorizer.transform(texts)
        return np.hstack([(q @ t).toarray() for t in self._transposed])


def combine(parts: Sequence[tuple[SegmentTerms, np.ndarray]], s: TfidfSettings
            ) -> TfidfParts | None:
    """The TF-IDF leg of ``parts`` (each a segment and its included local rows, ascending),
    as scikit-learn's ``TfidfVectorizer`` fitted on those rows' documents in order gives it;
    None when they hold no term."""
    from sklearn.feature_extraction.text import TfidfTransformer

    parts = [(seg, np.asarray(rows, dtype=np.int64)) for seg, rows in parts if len(rows)]
    if not parts:
        return None
    base = max((seg for seg, _ in parts), key=lambda seg: len(seg.vocab))
    nb = len(base.vocab)
    extra: dict[str, int] = {}  # terms the largest segment lacks -> nb + their number
    gids, subs = [], []
    for seg, rows in parts:
        subs.append(seg.counts if len(rows) == len(seg) else seg.counts[rows])
        if seg is base:
            gids.append(np.arange(nb, dtype=np.int64))
            continue
        col = base.column
        g = np.fromiter((col.get(t, -1) for t in seg.vocab), dtype=np.int64,
                        count=len(seg.vocab))
        for m in np.flatnonzero(g < 0).tolist():
            g[m] = nb + extra.setdefault(seg.vocab[m], len(extra))
        gids.append(g)
    n_terms = nb + len(extra)
    df = np.zeros(n_terms, dtype=np.int64)
    tf = np.zeros(n_terms, dtype=np.float64)
    for g, sub in zip(gids, subs, strict=True):
        cols = g[sub.indices]
        df += np.bincount(cols, minlength=n_terms)
        tf += np.bincount(cols, weights=sub.data, minlength=n_terms)
    ordered = _sorted_terms(base, list(extra), n_terms)
    ordered = ordered[df[ordered] > 0]  # the included rows' vocabulary, sorted
    if not len(ordered):
        return None
    selected = ordered[most_frequent_of(tf[ordered].astype(np.float32), s.max_features)]
    new_col = np.full(n_terms, -1, dtype=np.int64)
    new_col[selected] = np.arange(len(selected))
    extra_terms = list(extra)
    vectorizer = tfidf_vectorizer(s)
    vectorizer.vocabulary_ = {(base.vocab[g] if g < nb else extra_terms[g - nb]): n
                              for n, g in enumerate(selected.tolist())}
    vectorizer.fixed_vocabulary_ = False
    transformer = TfidfTransformer(norm=vectorizer.norm, use_idf=vectorizer.use_idf,
                                   smooth_idf=vectorizer.smooth_idf,
                                   sublinear_tf=vectorizer.sublinear_tf)
    transformer.fit(sp.csr_matrix((1, len(selected)), dtype=np.float32))  # shapes; idf below
    if transformer.use_idf:
        transformer.idf_ = fitted_idf(df[selected], sum(len(r) for _, r in parts),
                                      transformer.smooth_idf)
    vectorizer._tfidf = transformer
    width = len(selected)
    matrices = [sp.csr_matrix(transformer.transform(_columns(sub, new_col[g], width), copy=False),
                              dtype=np.float32) for g, sub in zip(gids, subs, strict=True)]
    return TfidfParts(vectorizer, matrices)


def fitted_idf(df: np.ndarray, n: int, smooth: bool) -> np.ndarray:
    """The ``idf_`` scikit-learn's ``TfidfTransformer.fit`` computes from float32 counts with
    these document frequencies over ``n`` documents, step for step (float32)."""
    d = np.asarray(df).astype(np.float32)
    d += float(smooth)
    idf = np.full_like(d, fill_value=n + int(smooth), dtype=np.float32)
    idf /= d
    np.log(idf, out=idf)
    idf += 1.0
    return idf


def _sorted_terms(base: SegmentTerms, extra: list[str], n_terms: int) -> np.ndarray:
    """The term numbers (``base``'s columns, then ``nb + i`` for ``extra[i]``) in the sorted
    order of their terms: ``base``'s sorted order with each extra term inserted where it
    belongs (a binary search per extra term, no sort of the whole vocabulary)."""
    nb = len(base.vocab)
    by_text = sorted(range(len(extra)), key=extra.__getitem__)
    pos = np.array([bisect.bisect_left(base.sorted_vocab, extra[i]) for i in by_text],
                   dtype=np.int64)
    final = np.empty(n_terms, dtype=np.int64)
    rank = base.rank
    final[:nb] = rank + np.searchsorted(pos, rank, side="right")
    final[nb + np.array(by_text, dtype=np.int64)] = pos + np.arange(len(extra))
    ordered = np.empty(n_terms, dtype=np.int64)
    ordered[final] = np.arange(n_terms)
    return ordered


def _columns(sub: sp.csr_matrix, cols: np.ndarray, width: int) -> sp.csr_matrix:
    """``sub`` with column ``c`` moved to ``cols[c]`` (dropped where -1) in a matrix ``width``
    columns wide, indices sorted."""
    mapped = cols[sub.indices]
    keep = mapped >= 0
    kept = np.concatenate([[0], np.cumsum(keep)])
    out = sp.csr_matrix((sub.data[keep], mapped[keep], kept[sub.indptr]),
                        shape=(sub.shape[0], width), dtype=np.float32)
    out.sort_indices()  # (a no-op where the segment's vocabulary is sorted)
    return out
