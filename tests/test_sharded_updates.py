"""A sharded index's dense leg across updates (Cranfield abstracts): the build's shards keep
their ANN files, a segment an add writes gets one ANN structure of its own (not one per
shard), and a full merge writes the shards again. Vectors come from a small hashing encoder
(speed: no model runs); BM25 of sharded updates is tests/test_bm25_scorer.py's."""

from __future__ import annotations

import zlib

import numpy as np

import intentrank.index.writer as writer
from intentrank.index import Index, IndexSettings, build_index
from intentrank.index.settings import AnnSettings, DenseSettings
from intentrank.index.update import delete, merge, upsert

DIM = 64


def hashed(texts: list[str]) -> np.ndarray:
    """Each text's words hashed into DIM buckets, L2-normalised (float32)."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode()) % DIM] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_a_sharded_dense_index_takes_an_add_a_delete_and_a_merge(cranfield, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setattr(writer, "encode_passages",
                        lambda texts, *a, **k: (hashed(texts), {"encoded": len(texts)}))
    docs = list(cranfield.corpus())
    path = tmp_path / "idx"
    settings = IndexSettings(legs=("dense",), shards=2,
                             dense=DenseSettings(ann=AnnSettings(method="hnsw")))
    build_index(docs[:300], path, settings, encoder=hashed, embedding_cache=False).close()
    upsert(path, docs[300:])  # 1,100 rows: a segment with an ANN structure
    delete(path, [d.id for d in docs[:5]])
    with Index(path) as index:
        seg = index.segments[1].dir
        assert f"{seg}/dense/ann.faiss" in index._files
        assert not any(rel.startswith(f"{seg}/dense/ann-") for rel in index._files)
        assert len(index.ann) == 3 and all(a is not None for a in index.ann)
        want = hashed([index.doc_text(i) for i in index.ids])
        assert np.array_equal(np.asarray(index.embeddings), want)
        probe = [10, 400, 1300]  # rows of the base's two shards and of the segment
        hits = index.search_dense([""] * 3, 1, query_vectors=want[probe])
        # each finds its own vector (or an identical one: a duplicate text)
        assert [round(float(h.scores[0]), 5) for h in hits] == [1.0] * 3
    merge(path)
    with Index(path) as index:
        assert index.flat and len(index.ann) == 2
        assert {"dense/ann-000.faiss", "dense/ann-001.faiss"} <= set(index._files)
        assert np.array_equal(np.asarray(index.embeddings),
                              hashed([index.doc_text(i) for i in index.ids]))
