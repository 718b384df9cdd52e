"""An on-disk hybrid index: documents, BM25, dense vectors, TF-IDF and the entity graph.

Layout of an index directory::

    manifest.json        corpus hash, settings, versions, build times
    docs.jsonl           one document per line (id, title, text, parent_id)
    doc_offsets.npy      byte offset of each line in docs.jsonl
    bm25/                bm25s index
    dense/embeddings.npy L2-normalised float32 vectors, row i = document i
    tfidf/vectorizer.pkl, tfidf/matrix.npz
    graph/entities.json, graph/pagerank.npy, graph/edges.npy
"""

from __future__ import annotations

import functools
import json
import pickle
import threading
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from intentrank.errors import IndexMismatchError, IntentrankError
from intentrank.index.entities import extract_entities
from intentrank.index.settings import IndexSettings
from intentrank.types import Document

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
class Hits(NamedTuple):
    """One query's results from a leg: index rows and their scores, best first."""

    rows: np.ndarray
    scores: np.ndarray

    def pairs(self) -> list[tuple[int, float]]:
        return list(zip(self.rows.tolist(), self.scores.tolist(), strict=True))


NO_HITS = Hits(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


def top_k(scores: np.ndarray, k: int, positive_only: bool = True) -> Hits:
    """Indices and scores of the ``k`` largest scores, best first (ties by index).

    With ``positive_only`` (lexical legs) documents scoring 0 are not returned."""
    k = min(k, scores.shape[0])
    if k <= 0:
        return NO_HITS
    idx = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(len(scores))
    idx = idx[np.lexsort((idx, -scores[idx]))]
    if positive_only:
        idx = idx[scores[idx] > 0]
    return Hits(idx.astype(np.int64), scores[idx].astype(np.float64))


def bm25_tokenize(texts: list[str], stopwords: str | None, stemmer: str | None,
                  progress: bool = False) -> list[list[str]]:
    """The tokenizer used for both documents and queries (bm25s rules)."""
    import bm25s

    stem = _stemmer(stemmer, threading.get_ident())
    return bm25s.tokenize(texts, stopwords=stopwords or [], stemmer=stem, return_ids=False,
                          show_progress=progress)


@functools.lru_cache(maxsize=64)
def _stemmer(language: str | None, thread: int) -> Any:
    """One PyStemmer instance per language and thread (building one per query batch costs
    time; a stemmer is not safe to share between threads)."""
    import Stemmer

    return Stemmer.Stemmer(language) if language else None


class Index:
    """A built index; legs are loaded lazily on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not manifest_path.exists():
            raise IntentrankError(f"{self.path} is not an intentrank index (no {MANIFEST}); "
                                  f"build one with `intentrank index`")
        self.manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        if self.manifest.get("format") != FORMAT_VERSION:
            raise IndexMismatchError(f"{self.path}: index format {self.manifest.get('format')} "
                                     f"is not supported (expected {FORMAT_VERSION}); rebuild it")
        self.settings = IndexSettings.from_dict(self.manifest["settings"])
        self._offsets = np.load(self.path / "doc_offsets.npy")
        self._docs_fh = open(self.path / "docs.jsonl", "rb")  # noqa: SIM115 (kept open)
        self.ids: list[str] = json.loads((self.path / "ids.json").read_text())
        self.row_of = {doc_id: i for i, doc_id in enumerate(self.ids)}
        self.id_array = np.array(self.ids, dtype=object)  # rows -> ids without a Python loop

    @classmethod
    def open(
        cls, path: str | Path, settings: IndexSettings | None = None,
        corpus_sha256: str | None = None,
    ) -> Index:
        """Open an index; if ``settings`` or a corpus hash are given they must match."""
        index = cls(path)
        if settings is not None:
            diff = index.settings.differences(settings)
            if diff:
                raise IndexMismatchError(
                    f"{index.path} was built with other settings: " + "; ".join(diff)
                    + ". Use another directory or rebuild with --overwrite."
                )
        if corpus_sha256 is not None and corpus_sha256 != index.corpus_sha256:
            raise IndexMismatchError(
                f"{index.path} was built from another corpus (sha256 {index.corpus_sha256[:12]}"
                f"... != {corpus_sha256[:12]}...). Use another directory or --overwrite."
            )
        return index

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def corpus_sha256(self) -> str:
        return self.manifest["corpus_sha256"]

    def has(self, leg: str) -> bool:
        return leg in self.settings.legs

    def _require(self, leg: str) -> None:
        if not self.has(leg):
            raise IntentrankError(f"{self.path} has no {leg} leg (built with legs "
                                  f"{list(self.settings.legs)}); rebuild with --legs including "
                                  f"{leg}")

    # -- documents ---------------------------------------------------------------------
    def doc(self, doc_id: str) -> Document:
        """Fetch one document by id."""
        row = self.row_of.get(doc_id)
        if row is None:
            raise KeyError(f"unknown document id {doc_id!r} in {self.path}")
        self._docs_fh.seek(int(self._offsets[row]))
        rec = json.loads(self._docs_fh.readline())
        return Document(id=rec["id"], text=rec["text"], title=rec.get("title", ""),
                        parent_id=rec.get("parent_id"))

    @cached_property
    def parent_of(self) -> dict[str, str]:
        """Passage id -> parent document id, for chunked indexes (empty otherwise)."""
        if not self.settings.chunk_size:
            return {}
        return {d.id: d.parent_id for d in map(self.doc, self.ids) if d.parent_id}

    @property
    def doc_and_parent_ids(self) -> set[str]:
        """Every id a judgment may name: passage ids and their parents' ids."""
        return set(self.ids) | set(self.parent_of.values())

    def doc_text(self, doc_id: str) -> str:
        """Title and text as the dense leg encodes them."""
        return self.doc(doc_id).full_text(self.settings.dense.title_sep)

    # -- legs ---------------------------------------------------------------------------
    @cached_property
    def bm25(self) -> Any:
        import bm25s

        self._require("bm25")
        return bm25s.BM25.load(str(self.path / "bm25"), mmap=False)

    @cached_property
    def embeddings(self) -> np.ndarray:
        self._require("dense")
        return np.load(self.path / "dense" / "embeddings.npy", mmap_mode="r")

    @cached_property
    def embedder(self) -> Any:
        from intentrank.models.embedder import load_embedder

        s = self.settings.dense
        return load_embedder(s.model, s.backend, query_prefix=s.query_prefix,
                             passage_prefix=s.passage_prefix)

    @cached_property
    def tfidf(self) -> tuple[Any, Any]:
        import scipy.sparse

        self._require("tfidf")
        with open(self.path / "tfidf" / "vectorizer.pkl", "rb") as fh:
            vectorizer = pickle.load(fh)
        matrix = scipy.sparse.load_npz(self.path / "tfidf" / "matrix.npz").tocsr()
        return vectorizer, matrix

    @cached_property
    def graph(self) -> tuple[dict[str, list[int]], np.ndarray]:
        """Inverted entity index (entity -> rows) and PageRank per row."""
        self._require("graph")
        entities = json.loads((self.path / "graph" / "entities.json").read_text())
        inverted: dict[str, list[int]] = {}
        for row, ents in enumerate(entities):
            for e in ents:
                inverted.setdefault(e, []).append(row)
        return inverted, np.load(self.path / "graph" / "pagerank.npy")

    # -- search (row indices and scores) -------------------------------------------------
    def search_bm25(self, texts: list[str], k: int) -> list[Hits]:
        s = self.settings.bm25
        tokens = bm25_tokenize(texts, s.stopwords, s.stemmer)
        out: list[Hits] = [NO_HITS for _ in texts]
        live = [i for i, t in enumerate(tokens) if any(tok in self.bm25.vocab_dict for tok in t)]
        if live:
            res = self.bm25.retrieve([tokens[i] for i in live], k=min(k, len(self)),
                                     show_progress=False)
            positive = res.scores > 0  # scores are sorted: keep each row's positive prefix
            ends = positive.sum(axis=1).tolist()
            for j, i in enumerate(live):
                out[i] = Hits(res.documents[j, :ends[j]], res.scores[j, :ends[j]])
        return out

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode_queries(texts)

    def search_dense(self, texts: list[str], k: int,
                     query_vectors: np.ndarray | None = None) -> list[Hits]:
        q = self.encode_queries(texts) if query_vectors is None else query_vectors
        scores = np.asarray(self.embeddings @ q.T, dtype=np.float32)  # (n_docs, n_queries)
        return [top_k(scores[:, j], k, positive_only=False) for j in range(q.shape[0])]

    def search_tfidf(self, texts: list[str], k: int) -> list[Hits]:
        vectorizer, matrix = self.tfidf
        scores = (vectorizer.transform(texts) @ matrix.T).toarray()
        return [top_k(scores[j], k) for j in range(len(texts))]

    def search_graph(self, texts: list[str], k: int) -> list[Hits]:
        inverted, pr = self.graph
        out: list[Hits] = []
        for text in texts:
            overlap: dict[int, int] = {}
            for e in extract_entities(text):
                for row in inverted.get(e, ()):
                    overlap[row] = overlap.get(row, 0) + 1
            scores = np.zeros(len(self), dtype=np.float64)
            if overlap:
                rows = np.fromiter(overlap, dtype=np.int64)
                counts = np.fromiter(overlap.values(), dtype=np.float64)
                scores[rows] = counts * (1.0 + pr[rows])
            out.append(top_k(scores, k))
        return out

    def close(self) -> None:
        self._docs_fh.close()

