"""Build an index directory atomically: write to a temporary sibling, then rename into place."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.data.corpus import chunk_documents
from intentrank.errors import IndexMismatchError
from intentrank.index.embedding_cache import EmbeddingCache
from intentrank.index.entities import build_entity_graph, extract_entities, pagerank
from intentrank.index.settings import IndexSettings
from intentrank.index.store import FORMAT_VERSION, MANIFEST, Index, bm25_tokenize
from intentrank.types import Document

Progress = Callable[[str], None]


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("intentrank", "bm25s", "sentence-transformers", "scikit-learn", "networkx",
                "numpy", "torch"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out


def _write_docs(docs: Iterable[Document], tmp: Path) -> tuple[list[Document], str]:
    """Write docs.jsonl, doc_offsets.npy and ids.json; return the docs and the corpus hash."""
    digest = hashlib.sha256()
    kept: list[Document] = []
    offsets: list[int] = []
    seen: set[str] = set()
    with open(tmp / "docs.jsonl", "wb") as fh:
        for doc in docs:
            if doc.id in seen:  # chunk ids can collide with real ids
                raise ValueError(f"duplicate document id {doc.id!r}")
            seen.add(doc.id)
            rec = {"id": doc.id, "title": doc.title, "text": doc.text}
            if doc.parent_id is not None:
                rec["parent_id"] = doc.parent_id
            line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
            digest.update(line)
            offsets.append(fh.tell())
            fh.write(line)
            kept.append(doc)
    np.save(tmp / "doc_offsets.npy", np.asarray(offsets, dtype=np.int64))
    (tmp / "ids.json").write_text(json.dumps([d.id for d in kept]))
    return kept, digest.hexdigest()


def _build_bm25(texts: list[str], settings: IndexSettings, out: Path, progress: bool) -> None:
    import bm25s

    s = settings.bm25
    tokens = bm25_tokenize(texts, s.stopwords, s.stemmer, progress=progress)
    retriever = bm25s.BM25(method=s.method, k1=s.k1, b=s.b)
    retriever.index(bm25s.tokenization.Tokenized(*_to_ids(tokens)), show_progress=progress)
    retriever.save(str(out))


def _to_ids(tokens: list[list[str]]) -> tuple[list[list[int]], dict[str, int]]:
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in tokens]
    return ids, vocab


def _build_dense(texts: list[str], settings: IndexSettings, out: Path, progress: bool,
                 cache: EmbeddingCache | None) -> dict[str, int]:
    from intentrank.models.embedder import load_embedder

    s = settings.dense
    embedder = load_embedder(s.model, s.backend, query_prefix=s.query_prefix,
                             passage_prefix=s.passage_prefix)

    def encode(batch: list[str]) -> np.ndarray:
        return embedder.encode_passages(batch, batch_size=s.batch_size, progress=progress)

    if cache is None:
        vecs, stats = encode(texts), {"cache_hits": 0, "encoded": len(texts)}
    else:
        key = f"{s.backend}:{s.model}:{s.passage_prefix}"
        before_hits, before_miss = cache.hits, cache.misses
        vecs = cache.encode(key, texts, encode)
        stats = {"cache_hits": cache.hits - before_hits, "encoded": cache.misses - before_miss}
    out.mkdir()
    np.save(out / "embeddings.npy", np.ascontiguousarray(vecs, dtype=np.float32))
    return stats


def _build_tfidf(texts: list[str], settings: IndexSettings, out: Path) -> None:
    import scipy.sparse
    from sklearn.feature_extraction.text import TfidfVectorizer

    s = settings.tfidf
    vectorizer = TfidfVectorizer(ngram_range=(1, s.ngram_max), max_features=s.max_features,
                                 stop_words=s.stop_words, sublinear_tf=s.sublinear_tf,
                                 dtype=np.float32)
    matrix = vectorizer.fit_transform(texts)
    out.mkdir()
    with open(out / "vectorizer.pkl", "wb") as fh:
        pickle.dump(vectorizer, fh)
    scipy.sparse.save_npz(out / "matrix.npz", matrix.tocsr())


def _build_graph(texts: list[str], settings: IndexSettings, out: Path) -> dict[str, int]:
    s = settings.graph
    entities = [extract_entities(t) for t in texts]
    graph = build_entity_graph(entities, window=s.window, min_shared=s.min_shared)
    pr = pagerank(graph, s.damping)
    out.mkdir()
    (out / "entities.json").write_text(json.dumps([sorted(e) for e in entities]))
    np.save(out / "pagerank.npy", pr)
    edges = np.array([(u, v, d["weight"]) for u, v, d in graph.edges(data=True)],
                     dtype=np.int64).reshape(-1, 3)
    np.save(out / "edges.npy", edges)
    return {"edges": int(graph.number_of_edges()),
            "docs_with_entities": int(sum(1 for e in entities if e))}


def build_index(
    docs: Iterable[Document],
    path: str | Path,
    settings: IndexSettings | None = None,
    *,
    overwrite: bool = False,
    progress: bool = False,
    embedding_cache: EmbeddingCache | None | bool = True,
    log: Progress | None = None,
) -> Index:
    """Build (or reuse) the index at ``path`` from ``docs``.

    An existing index built from the same corpus with the same settings is reused as is;
    one built differently raises :class:`IndexMismatchError` unless ``overwrite``. Any
    error while reading the corpus or building leaves nothing at ``path``.
    """
    settings = settings or IndexSettings()
    path = Path(path)
    say = log or (lambda msg: None)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        if settings.chunk_size:
            docs = chunk_documents(docs, settings.chunk_size, settings.chunk_overlap)
        kept, corpus_hash = _write_docs(docs, tmp)
        timings["docs"] = time.perf_counter() - t0
        if not kept:
            raise ValueError("the corpus holds no documents")
        if (path / MANIFEST).exists():
            existing = Index(path)
            same = (existing.corpus_sha256 == corpus_hash
                    and not existing.settings.differences(settings))
            if same and not overwrite:
                say(f"index at {path} is up to date ({len(existing)} documents); reusing it")
                shutil.rmtree(tmp)
                return existing
            if not overwrite:
                Index.open(path, settings=settings, corpus_sha256=corpus_hash)  # raises
        elif path.exists() and any(path.iterdir()):
            raise IndexMismatchError(f"{path} exists and is not an intentrank index; "
                                     f"choose an empty or new directory")
        texts = [d.full_text(settings.dense.title_sep) for d in kept]
        stats: dict[str, Any] = {}
        if isinstance(embedding_cache, bool):
            embedding_cache = EmbeddingCache() if embedding_cache else None
        for leg in settings.legs:
            say(f"building {leg} over {len(texts)} documents")
            t = time.perf_counter()
            if leg == "bm25":
                _build_bm25(texts, settings, tmp / "bm25", progress)
            elif leg == "dense":
                stats["dense"] = _build_dense(texts, settings, tmp / "dense", progress,
                                              embedding_cache)
            elif leg == "tfidf":
                _build_tfidf(texts, settings, tmp / "tfidf")
            elif leg == "graph":
                stats["graph"] = _build_graph(texts, settings, tmp / "graph")
            timings[leg] = time.perf_counter() - t
        manifest = {
            "format": FORMAT_VERSION,
            "corpus_sha256": corpus_hash,
            "n_docs": len(kept),
            "settings": settings.to_dict(),
            "versions": _versions(),
            "build_seconds": timings,
            "stats": stats,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        _swap_into_place(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Index(path)


def _swap_into_place(tmp: Path, path: Path) -> None:
    if path.exists():
        old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
