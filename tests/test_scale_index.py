"""Scale-out index features on real corpora: approximate dense search (faiss HNSW, IVF-PQ)
against exact search, sharded bm25/dense legs against the unsharded index, the sparse
PageRank against networkx, and the settings that choose them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tolerances import F32_ABS as ABS
from tolerances import F32_REL as REL

from intentrank.index import IndexSettings, IndexSettingsError, build_index
from intentrank.index.ann import exact_search
from intentrank.index.entities import entity_edges, extract_entities, pagerank_sparse
from intentrank.index.settings import AnnSettings, DenseSettings
from intentrank.index.shards import shard_bounds
from intentrank.types import Document

pytestmark = pytest.mark.slow


def _dense(method: str, **kw: int) -> IndexSettings:
    return IndexSettings(legs=("dense",), dense=DenseSettings(ann=AnnSettings(method, **kw)))


@pytest.fixture(scope="module")
def scifact_exact(scifact, tmp_path_factory):
    return build_index(scifact.corpus(), tmp_path_factory.mktemp("sf") / "exact",
                       IndexSettings(legs=("dense",)))


@pytest.fixture(scope="module")
def scifact_queries(scifact, scifact_exact):
    queries, _ = scifact.split("test")
    return scifact_exact.encode_queries([q.text for q in queries])


def _recall(exact, approx, k=100) -> float:
    return float(np.mean([len(set(e.rows[:k].tolist()) & set(a.rows[:k].tolist())) / k
                          for e, a in zip(exact, approx, strict=True)]))


# ivfpq with 6-bit codes: PQ training is 4x cheaper than the default 8 bits (test time)
@pytest.mark.parametrize(("method", "params"), [("hnsw", {}),
                                                ("ivfpq", {"pq_bits": 6, "refine": 8})])
def test_ann_top100_matches_exact_on_scifact(method, params, scifact, scifact_exact,
                                             scifact_queries, tmp_path):
    ann = build_index(scifact.corpus(), tmp_path / method, _dense(method, **params))
    assert ann.manifest["settings"]["dense"]["ann"]["method"] == method
    assert (ann.gen_dir / "dense" / "ann.faiss").is_file()
    exact = scifact_exact.search_dense([], 100, query_vectors=scifact_queries)
    approx = ann.search_dense([], 100, query_vectors=scifact_queries)
    assert _recall(exact, approx) >= 0.95
    # ANN scores are the true cosines of the rows returned, best first
    for j, hits in enumerate(approx[:20]):
        cos = ann.embeddings[hits.rows] @ scifact_queries[j]
        np.testing.assert_allclose(hits.scores, cos, rtol=REL, atol=1e-5)
        assert np.all(np.diff(hits.scores) <= 1e-6)
    # a weaker search reaches fewer of the exact neighbours
    ann.set_ann_search(ef_search=8, nprobe=1, refine=1)
    weak = ann.search_dense([], 100, query_vectors=scifact_queries)
    assert _recall(exact, weak) < _recall(exact, approx)
    ann.close()


def test_exact_search_in_blocks_equals_one_matmul(scifact_exact, scifact_queries):
    vecs = scifact_exact.embeddings
    assert isinstance(vecs, np.memmap)  # memory-mapped, not loaded
    whole = scifact_exact.search_dense([], 50, query_vectors=scifact_queries[:30])
    rows, scores = exact_search(vecs, scifact_queries[:30], 50, block=700)
    for h, r, s in zip(whole, rows, scores, strict=True):
        assert r.tolist() == h.rows.tolist()
        np.testing.assert_allclose(s, h.scores, rtol=REL, atol=ABS)


# -- shards ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cranfield_sharded(cranfield, tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    legs = ("bm25", "dense")
    whole = build_index(cranfield.corpus(), root / "whole", IndexSettings(legs=legs))
    sharded = build_index(cranfield.corpus(), root / "sharded",
                          IndexSettings(legs=legs, shards=3))
    return whole, sharded


def test_sharded_bm25_scores_equal_the_unsharded_index(cranfield, cranfield_sharded):
    whole, sharded = cranfield_sharded
    assert [p.name for p in sorted((sharded.gen_dir / "bm25").iterdir())] == [
        "shard-000", "shard-001", "shard-002"]
    stats = sharded.manifest["stats"]["bm25"]
    assert stats["n_docs"] == 1400
    queries, _ = cranfield.split("test")
    texts = [q.text for q in queries]
    full_w = whole.search_bm25(texts, 1400)
    full_s = sharded.search_bm25(texts, 1400)
    for w, s in zip(full_w, full_s, strict=True):
        dw = dict(zip(w.rows.tolist(), w.scores.tolist(), strict=True))
        ds = dict(zip(s.rows.tolist(), s.scores.tolist(), strict=True))
        assert dw.keys() == ds.keys()
        np.testing.assert_allclose([ds[r] for r in dw], list(dw.values()), rtol=REL, atol=ABS)
    # merged top 10: the unsharded ranking's first 10 (ties broken by row on both sides)
    for w, s in zip(full_w, sharded.search_bm25(texts, 10), strict=True):
        order = np.lexsort((w.rows, -w.scores))[:10]
        assert s.rows.tolist() == w.rows[order].tolist()
        np.testing.assert_allclose(s.scores, w.scores[order], rtol=REL, atol=ABS)


def test_sharded_bm25_uses_global_statistics(cranfield_sharded):
    """A shard scored on its own statistics would differ: the idf of a term depends on the
    document frequency over every shard."""
    _, sharded = cranfield_sharded
    s = [bm.scores["num_docs"] for bm in sharded.bm25]
    assert s == [e - a for a, e in sharded.shard_bounds] and sum(s) == 1400
    avg = sharded.manifest["stats"]["bm25"]["avg_len"]
    assert avg > 0


def test_sharded_dense_merge_is_exact(cranfield, cranfield_sharded):
    whole, sharded = cranfield_sharded
    queries, _ = cranfield.split("test")
    q = whole.encode_queries([x.text for x in queries[:40]])
    for w, s in zip(whole.search_dense([], 100, query_vectors=q),
                    sharded.search_dense([], 100, query_vectors=q), strict=True):
        assert s.rows.tolist() == w.rows.tolist()
        np.testing.assert_allclose(s.scores, w.scores, rtol=REL, atol=ABS)


def test_sharded_hnsw_searches_every_shard(cranfield, tmp_path):
    settings = IndexSettings(legs=("dense",), shards=2,
                             dense=DenseSettings(ann=AnnSettings("hnsw")))
    idx = build_index(cranfield.corpus(), tmp_path / "h", settings)
    assert sorted(p.name for p in (idx.gen_dir / "dense").glob("ann-*.faiss")) == [
        "ann-000.faiss", "ann-001.faiss"]
    queries, _ = cranfield.split("test")
    q = idx.encode_queries([x.text for x in queries[:50]])
    exact_rows, _ = exact_search(idx.embeddings, q, 100)
    hits = idx.search_dense([], 100, query_vectors=q)
    recall = np.mean([len(set(h.rows.tolist()) & set(e.tolist())) / 100
                      for h, e in zip(hits, exact_rows, strict=True)])
    assert recall >= 0.95
    assert any((h.rows >= idx.shard_bounds[1][0]).any() for h in hits)


# -- settings --------------------------------------------------------------------------------
def test_ann_settings_round_trip_through_the_manifest(tmp_path):
    s = IndexSettings(legs=("bm25",), shards=2,
                      dense=DenseSettings(ann=AnnSettings("ivfpq", nlist=64, pq_m=24)))
    assert IndexSettings.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert DenseSettings(ann="hnsw").ann == AnnSettings("hnsw")
    assert DenseSettings(ann={"method": "hnsw", "ef_search": 50}).ann.ef_search == 50
    assert IndexSettings().dense.ann.method == "exact" and IndexSettings().shards == 1
    assert s.differences(IndexSettings(legs=("bm25",), shards=2)) == [
        "dense.ann.method: 'ivfpq' != 'exact'", "dense.ann.nlist: 64 != 0",
        "dense.ann.pq_m: 24 != 48"]
    docs = [Document(str(i), f"text number {i} about wings") for i in range(6)]
    idx = build_index(docs, tmp_path / "i", s)
    assert idx.settings == s
    idx.close()


@pytest.mark.parametrize(("make", "message"), [
    (lambda: AnnSettings("annoy"), r"dense.ann.method 'annoy' is not one of \['exact', "
                                   r"'hnsw', 'ivfpq'\]"),
    (lambda: AnnSettings("hnsw", hnsw_m=1), "dense.ann.hnsw_m must be an integer >= 2"),
    (lambda: AnnSettings("ivfpq", nprobe=0), "dense.ann.nprobe must be an integer >= 1"),
    (lambda: AnnSettings("ivfpq", pq_bits=20), "dense.ann.pq_bits must be at most 16"),
    (lambda: DenseSettings(ann={"method": "hnsw", "efsearch": 5}),
     r"unknown dense.ann setting\(s\) \['efsearch'\]"),
    (lambda: DenseSettings(ann=3), "dense.ann must be a method name or a mapping"),
    (lambda: IndexSettings(shards=0), "shards must be an integer >= 1, got 0"),
    (lambda: IndexSettings.from_dict({"dense": {"anm": "hnsw"}}),
     r"unknown dense setting\(s\) \['anm'\]"),
])
def test_bad_scale_settings_are_refused(make, message):
    with pytest.raises(IndexSettingsError, match=message):
        make()


def test_bad_settings_found_at_build_name_the_problem(tmp_path):
    docs = [Document(str(i), f"passage {i} on flow") for i in range(4)]
    with pytest.raises(IndexSettingsError, match="shards=5 is more than the 4 documents"):
        build_index(docs, tmp_path / "a", IndexSettings(legs=("bm25",), shards=5))
    assert not (tmp_path / "a").exists()
    with pytest.raises(IndexSettingsError, match="needs at least 256 vectors to train"):
        build_index(docs, tmp_path / "b", _dense("ivfpq"))
    assert not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match="unknown ANN search parameter"):
        from intentrank.index import Index

        idx = build_index(docs, tmp_path / "c", IndexSettings(legs=("bm25",)))
        Index.set_ann_search(idx, efsearch=3)


def test_ivfpq_refuses_pq_m_that_does_not_divide_the_dimension(cranfield, tmp_path):
    with pytest.raises(IndexSettingsError, match="pq_m=50 does not divide the vector "
                                                 "dimension 384"):
        build_index(cranfield.corpus(), tmp_path / "p", _dense("ivfpq", pq_m=50))


def test_shard_bounds_cover_every_row_once():
    assert shard_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_bounds(5, 1) == [(0, 5)]


# -- PageRank -------------------------------------------------------------------------------
def _networkx_pagerank(n: int, edges: np.ndarray) -> np.ndarray:
    """The reference: networkx's PageRank of the graph, weighted by shared-entity counts."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_weighted_edges_from((int(i), int(j), int(w)) for i, j, w in edges)
    pr = nx.pagerank(graph, alpha=0.85, weight="weight")
    return np.array([pr[i] for i in range(n)], dtype=np.float64)


@pytest.mark.parametrize("name", ["cranfield", "scifact", "vaswani"])
def test_sparse_pagerank_equals_networkx_on_shipped_corpora(name, data_dir):
    from intentrank.data.dataset import load_dataset

    texts = [d.full_text(" ") for d in load_dataset(data_dir / name).corpus()]
    edges = entity_edges([extract_entities(t) for t in texts])
    np.testing.assert_allclose(pagerank_sparse(len(texts), edges),
                               _networkx_pagerank(len(texts), edges), rtol=0, atol=1e-6)


def test_index_graph_leg_uses_sparse_pagerank(cranfield_index):
    entities = [set(e) for e in json.loads(
        (cranfield_index.gen_dir / "graph" / "entities.json").read_text())]
    ref = _networkx_pagerank(len(entities), entity_edges(entities))
    np.testing.assert_allclose(cranfield_index.graph[1], ref, rtol=0, atol=1e-6)
