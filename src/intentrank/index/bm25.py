"""BM25 retrieval over a bm25s index with a chosen backend, ties ordered by row.

``numpy`` (the default) is bm25s's pure numpy scorer; ``numba`` is bm25s's own JIT-compiled
scorer and top-k heap (the ``scale`` extra installs numba). Both sum the same precomputed
float32 term scores in the same order, so their scores are identical; they break ties
differently, so every result here is ordered by (score descending, row ascending): numpy's
from each query's whole score array (bm25s's ``get_scores_from_ids``, then an exact top k
here, without bm25s's ``retrieve`` and its per-call progress bars), numba's from bm25s's
top k, re-ordered and, where a tie straddles the k-th place, retrieved deeper until it does
not: both backends return the same rows. The backend is a search-time choice: an index
built with one can be searched with the other
(:meth:`intentrank.index.Index.set_bm25_backend`). The numba functions are compiled on the
first query of each process (bm25s does not cache them on disk).

:func:`build_bm25` writes an unsharded BM25 leg: the corpus tokenised straight to term ids
(:func:`intentrank.index.hits.bm25_token_ids`), its term rows, and bm25s's index of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from intentrank.errors import DataError, IntentrankError
from intentrank.index.hits import NO_HITS, Hits, TokenIds, bm25_token_ids
from intentrank.index.settings import BM25Settings, check_bm25_backend

_EXTRA = 16  # results retrieved beyond k, to see whether a tie crosses the k-th place


def check_backend(backend: str) -> str:
    """``backend`` if it is known and usable here; a named error otherwise. Checked once,
    when a backend is chosen (:meth:`intentrank.index.Index.set_bm25_backend`, or the
    index's own setting when its BM25 leg loads); searches trust the chosen value."""
    if check_bm25_backend(backend) == "numba":
        try:
            import numba  # noqa: F401
        except ImportError as exc:
            raise IntentrankError("bm25.backend 'numba' needs numba: pip install "
                                  "'intentrank[scale]' (or pip install numba)") from exc
    return backend


def _top_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` largest positive ``scores``, best first, ties by row: every row
    scoring at least the k-th largest score (found by a partition), sorted stably by score
    descending (the rows are in order already), cut at ``k``."""
    n = len(scores)
    kth = scores[np.argpartition(scores, n - k)[n - k]] if k < n else scores.min()
    rows = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores > 0)
    return rows[np.argsort(-scores[rows], kind="stable")[:k]]


def retrieve(retriever: Any, tokens: list[list[str]], k: int, backend: str = "numpy",
             offset: int = 0, allow: np.ndarray | None = None) -> list[Hits]:
    """Each tokenised query's positive top ``k`` from one bm25s index, best first, ties by
    row; rows are shifted by ``offset`` (a shard's first row). Queries without a term of the
    index's vocabulary get no hits. ``allow`` (a bool mask over the index's rows) keeps the
    search to those rows: the top ``k`` among them (bm25s's ``weight_mask``)."""
    out: list[Hits] = [NO_HITS for _ in tokens]
    n = int(retriever.scores["num_docs"])
    k = min(k, n)
    vocab = retriever.vocab_dict
    term_ids = [[vocab[t] for t in toks if t in vocab] for toks in tokens]
    live = [i for i, t in enumerate(term_ids) if t]
    if not live or k < 1 or (allow is not None and not allow.any()):
        return out
    mask = None if allow is None else allow.astype(np.float32)
    if backend == "numpy":
        for i in live:
            scores = retriever.get_scores_from_ids(term_ids[i], weight_mask=mask)
            rows = _top_rows(scores, k)
            out[i] = Hits(rows + offset, scores[rows]) if len(rows) else NO_HITS
        return out
    return retrieve_deeper(retriever, tokens, live, k, backend, offset, mask, out)


def retrieve_deeper(retriever: Any, tokens: list[list[str]], live: list[int], k: int,
                    backend: str, offset: int, mask: np.ndarray | None, out: list[Hits]
                    ) -> list[Hits]:
    """:func:`retrieve` through bm25s's own ``retrieve`` (its top k, ``backend`` numba or
    numpy) for the queries ``live`` (each with a term of the vocabulary; ``k`` at most the
    number of documents): re-ordered by row within ties, retrieved deeper where a tie
    straddles the k-th place. Fills and returns ``out``."""
    n = int(retriever.scores["num_docs"])
    retriever.backend = backend  # bm25s reads it in retrieve(); the index is unchanged
    depth = min(n, k + _EXTRA)
    pending = live
    while pending:
        res = retriever.retrieve([tokens[i] for i in pending], k=depth, show_progress=False,
                                 weight_mask=mask)
        again = []
        for j, i in enumerate(pending):
            rows = np.asarray(res.documents[j], dtype=np.int64)
            scores = np.asarray(res.scores[j])
            kth, last = scores[k - 1], scores[-1]
            if depth < n and kth > 0 and last >= kth:
                again.append(i)  # the k-th score's tie may reach beyond what was retrieved
                continue
            order = np.lexsort((rows, -scores))[:k]
            rows, scores = rows[order], scores[order]
            keep = scores > 0
            out[i] = Hits(rows[keep] + offset, scores[keep]) if keep.any() else NO_HITS
        pending = again
        depth = min(n, depth * 2)
    return out


def no_terms_error(s: BM25Settings) -> DataError:
    """The error of a corpus in which no document keeps a BM25 term."""
    return DataError(f"no document has a BM25 term after tokenising (stopwords "
                     f"{s.stopwords!r}, stemmer {s.stemmer!r}); the corpus text is empty or "
                     f"only stopwords")


def term_rows(tok: TokenIds) -> Any:
    """The :class:`intentrank.index.terms.TermRows` of a tokenised corpus: what
    ``TermRows.from_tokens`` gives for its terms (the same vocabulary order and counts),
    without a pass over the terms as strings."""
    import scipy.sparse as sp

    from intentrank.index.terms import TermRows

    rows = np.repeat(np.arange(len(tok.lengths)), tok.lengths)
    counts = sp.csr_matrix((np.ones(len(tok.ids), dtype=np.float32), (rows, tok.ids)),
                           shape=(len(tok.lengths), len(tok.vocab)), dtype=np.float32)
    counts.sum_duplicates()
    return TermRows(counts, list(tok.vocab))


def build_bm25(texts: list[str], s: BM25Settings, out: Path, progress: bool = False) -> None:
    """Write the unsharded BM25 leg of ``texts`` into ``out`` (``<generation>/bm25``) and its
    term rows (``terms/bm25*``, what updates start from). The corpus is tokenised once,
    straight to ids; the impact scores are computed vectorised from the term rows
    (:func:`intentrank.index.bm25_scorer.bm25_from_rows`, element for element bm25s's own
    ``BM25.index`` for every method, as updates compute them). The index equals bm25s's index
    of :func:`intentrank.index.hits.bm25_tokenize`'s tokens array for array
    (tests/test_bm25_tokens.py)."""
    from intentrank.index.bm25_scorer import bm25_from_rows

    tok = bm25_token_ids(texts, s.stopwords, s.stemmer, progress=progress, tokens=s.tokens)
    if not len(tok.ids):
        raise no_terms_error(s)
    rows = term_rows(tok)
    rows.save(out.parent, "bm25")
    save_bm25s(bm25_from_rows(rows, s), out)


def save_bm25s(retriever: Any, out: Path) -> None:
    """Save a bm25s index with bm25s.BM25.index's empty token in its vocabulary (unless a
    word stems to "": Porter's "s"): it scores no document; kept so that the files are
    bm25s's."""
    retriever.vocab_dict.setdefault("", len(retriever.vocab_dict))
    retriever.save(str(out), show_progress=False)
