"""An on-disk hybrid index: documents, BM25, dense vectors, TF-IDF and the entity graph.

An index directory holds generations; ``CURRENT`` names the live one. The files of a
generation, and how writers and readers share them: :mod:`intentrank.index.layout`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import numpy as np

from intentrank.core.closing import Closing
from intentrank.core.params import check_int
from intentrank.errors import IndexMismatchError, IntentrankError
from intentrank.index import layout
from intentrank.index.bm25_scorer import bm25_from_rows, postings_of
from intentrank.index.errors import (
    IndexCorruptError,
    IndexFormatError,
    rebuild_hint,
)
from intentrank.index.hits import (
    NO_HITS,
    Hits,
    bm25_tokenize,
    check_allow,
    check_k,
    filter_record,
    top_k,
)
from intentrank.index.id_keys import IdLookup
from intentrank.index.layout import MANIFEST
from intentrank.index.segments import (
    BASE,
    SegmentVectors,
    entries_of,
    load_term_rows,
    open_segments,
    segment_files,
    segment_lists,
    segment_vectors,
)
from intentrank.index.settings import IndexSettings
from intentrank.index.shards import search_bm25s
from intentrank.index.subset import graph_hits, inverted
from intentrank.index.tfidf_segments import TfidfParts, live_leg
from intentrank.index.tombstones import LiveRows, RowView, lines_sha256
from intentrank.types import Document

FORMAT_VERSION = 3
READABLE_FORMATS = (2, 3)  # 2: one segment at the top level, before segments were listed
_MANIFEST_KEYS = ("format", "corpus_sha256", "n_docs", "settings", "files")


class Index(Closing, IdLookup):
    """A built index, pinned to the generation that was live when it was opened.

    Legs are loaded lazily on first use, always from that generation: a rebuild of the same
    directory does not change what an open Index reads (the generation is kept on disk while
    any Index has it open). Opening checks that every file the manifest records exists with
    its recorded size; :meth:`verify` also checks their sha256.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._bm25_backend: str | None = None  # checked when set or when the leg loads
        self.generation, self.gen_dir, lock = layout.pin_generation(self.path)
        self._lock: IO[bytes] | None = lock or None
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def exists(path: str | Path) -> bool:
        """Whether ``path`` holds an index (current or older format; it may still fail to
        open, e.g. if it is damaged or of an older format: opening says why)."""
        path = Path(path)
        return (path / layout.CURRENT).is_file() or layout.is_legacy(path)

    def _load(self) -> None:
        self.manifest: dict[str, Any] = layout.load_manifest(self.gen_dir)
        shown = self.gen_dir / MANIFEST
        if self.manifest.get("format") not in READABLE_FORMATS:
            raise IndexFormatError(f"{shown}: index format {self.manifest.get('format')!r} is "
                                   f"not supported (this version reads {list(READABLE_FORMATS)}"
                                   f"); {self._hint}")
        missing = [k for k in _MANIFEST_KEYS if k not in self.manifest]
        if missing or not isinstance(self.manifest["files"], dict):
            raise IndexCorruptError(f"{shown} lacks {missing or ['files']}; {self._hint}")
        try:
            self.settings = IndexSettings.from_dict(_dated(self.manifest["settings"]))
            self._files = {rel: {"size": int(r["size"]), "sha256": str(r["sha256"])}
                           for rel, r in self.manifest["files"].items()}
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise IndexCorruptError(f"{shown} holds invalid settings or file records ({exc}); "
                                    f"{self._hint}") from exc
        layout.check_sizes(self.gen_dir, self._files)
        try:
            self.segments = entries_of(self.manifest)
        except (TypeError, ValueError, KeyError) as exc:
            raise IndexCorruptError(f"{shown} holds invalid segment records ({exc}); "
                                    f"{self._hint}") from exc
        self._seg_start = np.cumsum([0] + [e.rows for e in self.segments])
        self._n_phys = int(self._seg_start[-1])
        if (n := sum(e.live for e in self.segments)) != self.manifest["n_docs"]:
            raise IndexCorruptError(f"{shown} records {self.manifest['n_docs']} documents, "
                                    f"its segments hold {n} live; {self._hint}")
        self._n_live = n
        dead, self._seg_offsets, self._docs_fhs, self._docs_sizes = open_segments(self)
        self.live: LiveRows | None = (LiveRows(np.concatenate(dead), self._n_phys) if dead
                                      else None)
        self._term_rows: dict[str, Any] = {}  # term_rows(name), once loaded
        self._id_keys: dict[int, Any] = {}  # id_keys.segment_keys(seg), once opened

    @property
    def _hint(self) -> str:
        return rebuild_hint(self.path)

    @contextlib.contextmanager
    def _reading(self, rel: str) -> Iterator[Path]:
        """Yield the generation's file ``rel``, turning a failure to read it into a named error."""
        try:
            yield self.gen_dir / rel
        except (IntentrankError, MemoryError):
            raise
        except Exception as exc:  # numpy, pickle, json, bm25s, scipy all raise their own
            raise IndexCorruptError(f"{self.gen_dir / rel} cannot be read ({type(exc).__name__}:"
                                    f" {exc}); {self._hint}") from exc

    def verify(self) -> dict[str, int]:
        """Check size and sha256 of every file the manifest records (reads the whole index).

        Raises :class:`IndexCorruptError` naming every file that does not match."""
        return layout.verify_files(self.gen_dir, self._files)

    @classmethod
    def open(
        cls, path: str | Path, settings: IndexSettings | None = None,
        corpus_sha256: str | None = None,
    ) -> Index:
        """Open an index; if ``settings`` or a corpus hash are given they must match."""
        index = cls(path)
        try:
            index.check(settings, corpus_sha256)
        except BaseException:
            index.close()
            raise
        return index

    def check(self, settings: IndexSettings | None = None,
              corpus_sha256: str | None = None) -> None:
        """Raise :class:`IndexMismatchError` unless built with ``settings`` / this corpus."""
        if settings is not None and (diff := self.settings.differences(settings)):
            raise IndexMismatchError(
                f"{self.path} was built with other settings: " + "; ".join(diff)
                + ". Use another directory or rebuild with --overwrite."
            )
        if corpus_sha256 is not None and corpus_sha256 != self.corpus_sha256:
            raise IndexMismatchError(
                f"{self.path} was built from another corpus (sha256 {self.corpus_sha256[:12]}"
                f"... != {corpus_sha256[:12]}...). Use another directory or --overwrite."
            )

    def __len__(self) -> int:
        return self._n_live

    @cached_property
    def corpus_sha256(self) -> str:
        """sha256 of the documents' docs.jsonl lines in row order (a generation with
        tombstones computes it from its live lines when first asked)."""
        recorded = self.manifest["corpus_sha256"]
        return recorded if recorded is not None else lines_sha256(map(self.doc_line,
                                                                      range(len(self))))

    @property
    def rows_deleted(self) -> int:
        """Rows this generation's files hold that are deleted (tombstones; 0 once merged)."""
        return 0 if self.live is None else len(self.live.deleted)

    def has(self, leg: str) -> bool:
        return leg in self.settings.legs

    def _require(self, leg: str) -> None:
        if not self.has(leg):
            raise IntentrankError(f"{self.path} has no {leg} leg (built with legs "
                                  f"{list(self.settings.legs)}); rebuild with --legs including "
                                  f"{leg}")

    # -- documents ---------------------------------------------------------------------
    def doc(self, doc_id: str, row: int | None = None) -> Document:
        """Fetch one document by id (``row``: its row, when known: no lookup)."""
        row = self.row_of.get(doc_id) if row is None else row
        if row is None:
            raise KeyError(f"unknown document id {doc_id!r} in {self.path}")
        line = self.doc_line(row)
        try:
            rec = json.loads(line)
            if rec["id"] != doc_id:
                raise ValueError(f"row {row}'s line holds id {rec['id']!r}, not {doc_id!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise IndexCorruptError(f"{self.gen_dir}'s docs.jsonl is damaged ({exc}); "
                                    f"{self._hint}") from exc
        return Document(id=rec["id"], text=rec["text"], title=rec.get("title", ""),
                        parent_id=rec.get("parent_id"), metadata=rec.get("metadata") or {})

    def doc_line(self, row: int, physical: bool = False) -> bytes:
        """Row ``row``'s line of docs.jsonl (``physical``: a row of the segments, deleted
        ones included), as stored (a positional read: safe from many threads at once)."""
        if self.live is not None and not physical:
            row = int(self.live.phys[row])
        seg = int(np.searchsorted(self._seg_start, row, side="right")) - 1
        offsets, row = self._seg_offsets[seg], row - int(self._seg_start[seg])
        start = int(offsets[row])
        end = int(offsets[row + 1]) if row + 1 < len(offsets) else self._docs_sizes[seg]
        return os.pread(self._docs_fhs[seg].fileno(), end - start, start)

    @property
    def flat(self) -> bool:
        """One top-level segment without deletes: its whole-corpus files (bm25/, tfidf/, graph/)
        are the live corpus's (else the lexical legs' come from every segment's term data)."""
        return self.live is None and len(self.segments) == 1 and self.segments[0].dir == BASE

    def documents(self) -> Iterator[Document]:
        """Every document, in row order."""
        return map(self.doc, self.ids)

    @cached_property
    def parent_of_rows(self) -> list[str | None]:
        """Each row's parent document id (None for a passage without a parent): parents.json,
        or each docs.jsonl line's for an index built before it was written."""
        if any(rel not in self._files for rel in segment_files(self.segments, "parents.json")):
            return [json.loads(self.doc_line(r)).get("parent_id") for r in range(len(self))]
        parents = segment_lists(self, "parents.json")
        return parents if self.live is None else [parents[r] for r in self.live.phys.tolist()]

    @cached_property
    def metadata_columns(self) -> Any:
        """The documents' metadata (and ``id``, ``parent_id``) as filter columns."""
        from intentrank.filters import MetadataColumns

        return MetadataColumns.from_records([filter_record(json.loads(self.doc_line(r)))
                                             for r in range(len(self))])

    def allowed_rows(self, filter: Any) -> np.ndarray | None:
        """The rows a filter (:mod:`intentrank.filters`: a Filter, its text, or None)
        matches, as a bool mask; None for no filter."""
        from intentrank.filters import Filter

        parsed = Filter.from_value(filter)
        return None if parsed is None else np.asarray(parsed.mask(self.metadata_columns),
                                                      dtype=bool)

    @cached_property
    def parent_of(self) -> dict[str, str]:
        """Passage id -> parent document id, for chunked indexes (empty otherwise)."""
        if not self.settings.chunk_size:
            return {}
        return {i: p for i, p in zip(self.ids, self.parent_of_rows, strict=True) if p}

    @property
    def doc_and_parent_ids(self) -> set[str]:
        """Every id a judgment may name: passage ids and their parents' ids."""
        return set(self.ids) | set(self.parent_of.values())

    def doc_text(self, doc_id: str) -> str:  # title and text as the dense leg encodes them
        return self.doc(doc_id).full_text(self.settings.dense.title_sep)

    # -- legs ---------------------------------------------------------------------------
    @cached_property
    def bm25(self) -> Any:
        """The bm25s index (a list of them, one per shard, for a sharded index); loading it
        checks that the index's own ``bm25.backend`` is usable here, unless one was set."""
        import bm25s

        self._require("bm25")
        if self._bm25_backend is None:
            self.set_bm25_backend(self.settings.bm25.backend)

        def load(rel: str) -> Any:
            with self._reading(rel) as d:
                return bm25s.BM25.load(str(d), mmap=False)

        if not self.flat:  # the live rows' statistics, as a fresh build computes them
            return bm25_from_rows(self.term_rows("bm25"), self.settings.bm25)  # (API only)
        if self.sharded:
            from intentrank.index.shards import bm25_shard_dir

            return [load(bm25_shard_dir(i)) for i in range(self.settings.shards)]
        return load("bm25")

    @cached_property
    def bm25_postings(self) -> Any:
        """The live rows' BM25 :class:`~intentrank.index.bm25_scorer.Postings` (filters,
        segments, deletes, shards score from them); None: built before term rows were kept."""
        return postings_of(self.term_rows("bm25"), self.settings.bm25)

    @property
    def sharded(self) -> bool:
        return self.settings.shards > 1

    @cached_property
    def shard_bounds(self) -> list[tuple[int, int]]:
        """(start, end) physical rows of each dense part: each shard of the top-level segment
        (one range if unsharded), then each other segment."""
        from intentrank.index.dense_search import part_bounds

        return part_bounds(self)

    @cached_property
    def ann(self) -> list[Any]:
        """One faiss searcher per dense part (dense.ann.method hnsw / ivfpq; None: a segment
        too small for one, searched exactly)."""
        from intentrank.index.dense_search import ann_searchers

        self._require("dense")
        return ann_searchers(self)

    def set_ann_search(self, **params: int | None) -> None:
        """Search-time ANN parameters (``ef_search``, ``nprobe``, ``refine``) overriding the
        index's settings for this open Index."""
        unknown = sorted(set(params) - {"ef_search", "nprobe", "refine"})
        if unknown:
            raise ValueError(f"unknown ANN search parameter(s) {unknown}; use ef_search, "
                             f"nprobe or refine")
        self._ann_params = {k: check_int(k, v) for k, v in params.items() if v is not None}

    @cached_property
    def embeddings(self) -> np.ndarray:
        """The documents' vectors, row i = document i (memory-mapped)."""
        return self._vectors if self.live is None else RowView(self._vectors, self.live)

    @cached_property
    def _vectors(self) -> np.ndarray:
        """The vectors file's rows (with tombstones: the deleted rows' too)."""
        self._require("dense")
        parts = segment_vectors(self)
        return parts[0] if len(parts) == 1 else SegmentVectors(parts)

    @cached_property
    def embedder(self) -> Any:
        return self.settings.dense.load_embedder()

    @cached_property
    def _tfidf_leg(self) -> TfidfParts:
        """What TF-IDF searches: the segments' combined rows, or the build's one matrix."""
        return live_leg(self) if not self.flat else TfidfParts(*self.tfidf)

    @cached_property
    def tfidf(self) -> tuple[Any, Any]:
        import scipy.sparse

        self._require("tfidf")
        if not self.flat:  # the live rows' idf and norms, as a fresh build's
            return (leg := live_leg(self)).vectorizer, leg.matrix  # from each segment's
        with self._reading("tfidf/vectorizer.pkl") as file:
            vectorizer = pickle.loads(file.read_bytes())
        with self._reading("tfidf/matrix.npz") as file:
            matrix = scipy.sparse.load_npz(file).tocsr()
        return vectorizer, matrix

    @cached_property
    def graph(self) -> tuple[Any, np.ndarray]:
        """Entity -> rows (a dict, or graph_segments.EntityRows) and PageRank per row."""
        self._require("graph")
        if not self.flat:  # the live rows' edges and PageRank, as a fresh build's
            from intentrank.index.graph_segments import live_graph

            return live_graph(self)
        with self._reading("graph/pagerank.npy") as file:
            pr = np.load(file)
        return inverted(self.entities()), pr

    def entities(self) -> list[list[str]]:
        """Each document's entities (the graph leg's), in row order."""
        self._require("graph")
        entities = segment_lists(self, "graph/entities.json")
        return entities if self.live is None else [entities[r] for r in self.live.phys.tolist()]

    def term_rows(self, name: str) -> Any:
        """The documents' kept term data (:class:`~intentrank.index.terms.TermRows`, ``bm25``
        or ``tfidf``) in row order; None for an index built before it was kept."""
        if name in self._term_rows:
            return self._term_rows[name]
        rows = load_term_rows(self, name)
        if rows is not None and self.live is not None:
            rows = rows.take(self.live.phys).used_terms()
        self._term_rows[name] = rows
        return rows

    @cached_property
    def _subsets(self) -> Any:
        """Filtered lexical searches with the allowed rows' statistics."""
        from intentrank.index.subset import SubsetLegs

        return SubsetLegs(self)

    # -- search (row indices and scores) -------------------------------------------------
    @property
    def bm25_backend(self) -> str:
        """The bm25s retrieval backend searches use: the index's ``bm25.backend`` setting
        unless :meth:`set_bm25_backend` chose another."""
        return self._bm25_backend or self.settings.bm25.backend

    def set_bm25_backend(self, backend: str) -> None:
        """Search this open Index's BM25 leg with ``backend`` (``numpy`` or ``numba``): a
        search-time choice, the index is not rebuilt. Refused with the backend named if it
        is unknown, or ``numba`` is not installed."""
        from intentrank.index.bm25 import check_backend

        self._bm25_backend = check_backend(backend)

    # Every leg's search takes ``allow`` (hits.check_allow): the top k among those rows.
    def search_bm25(self, texts: list[str], k: int, allow: np.ndarray | None = None
                    ) -> list[Hits]:
        check_k(k)
        allow = check_allow(allow, len(self))
        s = self.settings.bm25
        self._require("bm25")
        self.set_bm25_backend(self.bm25_backend)  # checks that it is usable here
        tokens = bm25_tokenize(texts, s.stopwords, s.stemmer, tokens=s.tokens)
        every = np.ones(len(self), dtype=bool) if allow is None else allow
        if (allow is not None or not self.flat) and (  # segments, deletes: from the postings
                hits := self._subsets.bm25(tokens, k, every)) is not None:
            return hits
        # one segment without deletes: bm25s's precomputed impacts (each shard's, merged)
        return search_bm25s(self.bm25, self.shard_bounds, tokens, k, self.bm25_backend, allow)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode_queries(texts)

    def search_dense(self, texts: list[str], k: int,
                     query_vectors: np.ndarray | None = None,
                     allow: np.ndarray | None = None) -> list[Hits]:
        check_k(k)
        allow = check_allow(allow, len(self))
        q = self.encode_queries(texts) if query_vectors is None else query_vectors
        if q.ndim != 2 or q.shape[1] != self._vectors.shape[1]:
            raise ValueError(f"query vectors of shape {q.shape} do not fit {self.path}'s "
                             f"{self._vectors.shape[1]}-dimensional embeddings")
        if allow is not None and not allow.any():
            return [NO_HITS for _ in range(q.shape[0])]
        from intentrank.index.dense_search import search_vectors

        if self.live is None:
            return search_vectors(self, q, k, allow)
        return self.live.virtual_hits(search_vectors(self, q, k,
                                                     self.live.physical_allow(allow)))

    def search_tfidf(self, texts: list[str], k: int, allow: np.ndarray | None = None
                     ) -> list[Hits]:
        check_k(k)
        allow = check_allow(allow, len(self))
        if allow is not None and (hits := self._subsets.tfidf(texts, k, allow)) is not None:
            return hits
        scores = self._tfidf_leg.scores(texts)
        if allow is not None:  # an index without term rows: the whole index's statistics
            scores[:, ~allow] = 0
        return [top_k(scores[j], k) for j in range(len(texts))]

    def search_graph(self, texts: list[str], k: int, allow: np.ndarray | None = None
                     ) -> list[Hits]:
        check_k(k)
        allow = check_allow(allow, len(self))
        if allow is not None:
            return self._subsets.graph(texts, k, allow)
        return graph_hits(texts, k, *self.graph)

    def close(self) -> None:
        """Close the documents file and release the generation (a later build may delete it;
        legs already loaded stay usable)."""
        for fh in getattr(self, "_docs_fhs", ()):
            fh.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _dated(settings: Any) -> Any:
    """Manifest settings with what an index built before a setting existed was built with:
    dense passages were fp32 before ``dense.precision``."""
    dense = settings.get("dense") if isinstance(settings, dict) else None
    if isinstance(dense, dict) and "precision" not in dense:
        return {**settings, "dense": {**dense, "precision": "fp32"}}
    return settings

