"""A real index of Cranfield: every leg, manifest checks, atomic builds and the embedding cache."""

from __future__ import annotations

import json

import bm25s
import ir_measures
import numpy as np
import pytest
import Stemmer

from intentrank.data.trec import ranked_scores
from intentrank.errors import DataError, IndexMismatchError
from intentrank.index import Index, IndexSettings, build_index
from intentrank.index.entities import entity_edges, extract_entities
from intentrank.measures.metrics import evaluate
from intentrank.retrieve.retrievers import (
    BM25Retriever,
    DenseRetriever,
    GraphRetriever,
    TfidfRetriever,
    sparse_retriever,
)
from intentrank.types import Document, Query


def test_manifest_records_corpus_settings_and_versions(cranfield_index):
    m = cranfield_index.manifest
    assert m["n_docs"] == len(cranfield_index) == 1400
    assert len(m["corpus_sha256"]) == 64
    assert m["settings"]["bm25"] == {"method": "lucene", "k1": 1.5, "b": 0.75,
                                     "stemmer": "english", "stopwords": "en", "tokens": "bm25s",
                                     "backend": "numpy"}
    assert set(m["build_seconds"]) >= {"bm25", "dense", "tfidf", "graph"}
    assert "bm25s" in m["versions"] and "sentence-transformers" in m["versions"]
    emb = np.load(cranfield_index.gen_dir / "dense" / "embeddings.npy")
    assert emb.shape == (1400, 384)
    nonempty = np.linalg.norm(emb, axis=1)
    assert np.allclose(nonempty[nonempty > 0], 1.0, atol=1e-4)


def test_bm25_matches_bm25s_called_directly(cranfield, cranfield_index):
    queries, qrels = cranfield.split("test")
    ours = BM25Retriever(cranfield_index, depth=100).run(queries).to_run()
    docs = list(cranfield.corpus())
    stem = Stemmer.Stemmer("english")
    direct = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    direct.index(bm25s.tokenize([d.full_text() for d in docs], stopwords="en", stemmer=stem,
                                show_progress=False), show_progress=False)
    res = direct.retrieve(bm25s.tokenize([q.text for q in queries], stopwords="en",
                                         stemmer=stem, show_progress=False),
                          k=len(docs), show_progress=False)
    # every score from bm25s; its top 100 with ties broken by row, as the index does
    top = [np.lexsort((res.documents[j], -res.scores[j]))[:100] for j in range(len(queries))]
    theirs = {q.id: ranked_scores((docs[i].id, float(s)) for i, s in zip(
                  res.documents[j][top[j]], res.scores[j][top[j]], strict=True) if s > 0)
              for j, q in enumerate(queries)}  # in that order, as a run from rankings is
    assert ours.keys() == theirs.keys()
    for qid in ours:
        assert ours[qid] == pytest.approx(theirs[qid], rel=1e-5)
    # Metrics through intentrank equal a direct ir-measures computation.
    measures = [ir_measures.nDCG @ 10, ir_measures.R @ 100, ir_measures.RR @ 10]
    direct_scores = ir_measures.calc_aggregate(measures, qrels, theirs)
    ours_scores = evaluate(ours, qrels, ["nDCG@10", "Recall@100", "MRR@10"]).aggregate
    assert ours_scores["nDCG@10"] == pytest.approx(direct_scores[ir_measures.nDCG @ 10])
    assert ours_scores["Recall@100"] == pytest.approx(direct_scores[ir_measures.R @ 100])
    assert ours_scores["MRR@10"] == pytest.approx(direct_scores[ir_measures.RR @ 10])
    assert ours_scores["nDCG@10"] == pytest.approx(0.3727, abs=0.002)  # published here: 37.27


def test_every_leg_retrieves_relevant_documents(cranfield, cranfield_index):
    queries, qrels = cranfield.split("test")
    ndcg = {}
    for stage in (DenseRetriever(cranfield_index), TfidfRetriever(cranfield_index),
                  sparse_retriever(cranfield_index),
                  BM25Retriever(cranfield_index) | DenseRetriever(cranfield_index)):
        ndcg[stage.describe()] = evaluate(stage.run(queries).to_run(), qrels,
                                          ["nDCG@10"]).aggregate["nDCG@10"]
    assert all(v > 0.3 for v in ndcg.values()), ndcg
    # RRF of BM25 and dense beats BM25 alone on Cranfield (0.42 vs 0.37 measured).
    assert ndcg["rrf(bm25(depth=100) | dense(depth=100), rrf_k=60)"] > 0.39


def test_dense_scores_are_cosines(cranfield_index):
    hit = DenseRetriever(cranfield_index, depth=5).search("boundary layer transition")
    qv = cranfield_index.encode_queries(["boundary layer transition"])[0]
    row = cranfield_index.row_of[hit.doc_ids[0]]
    assert hit.docs[0].score == pytest.approx(float(cranfield_index.embeddings[row] @ qv),
                                              abs=1e-5)
    assert hit.docs[0].score >= hit.docs[-1].score


def test_graph_leg_scores_shared_entities_times_pagerank(cranfield_index):
    # Cranfield is lower-cased, so its entities are numbers ("mach 5" -> "5").
    inverted, pr = cranfield_index.graph
    ranking = GraphRetriever(cranfield_index, depth=10).search("flow at mach number 3 and 1.5")
    assert ranking.docs
    ents = extract_entities("flow at mach number 3 and 1.5")
    top = cranfield_index.row_of[ranking.doc_ids[0]]
    shared = sum(1 for e in ents if top in inverted.get(e, ()))
    assert ranking.docs[0].score == pytest.approx(shared * (1 + pr[top]))


def test_entity_extraction_and_graph_edges():
    assert extract_entities("The World Health Organization reported 12.5% in 2020.") == {
        "world health organization", "12.5%", "2020"}
    ents = [{"a", "b", "c"}, {"a", "b"}, {"a"}, {"b", "c"}]
    # (0, 1) share 2 entities; (0, 3) share 2 but are 3 apart > window 2
    assert entity_edges(ents, window=2, min_shared=2).tolist() == [[0, 1, 2]]


def test_reopen_checks_settings_and_corpus(cranfield_index, tmp_path):
    other = IndexSettings(legs=("bm25",))
    with pytest.raises(IndexMismatchError, match="legs"):
        Index.open(cranfield_index.path, settings=other)
    with pytest.raises(IndexMismatchError, match="another corpus"):
        Index.open(cranfield_index.path, corpus_sha256="0" * 64)
    docs = [Document("a", "one text"), Document("b", "two text")]
    path = tmp_path / "small"
    build_index(docs, path, IndexSettings(legs=("bm25", "tfidf")))
    with pytest.raises(IndexMismatchError, match="other settings"):
        build_index(docs, path, IndexSettings(legs=("bm25",)))
    with pytest.raises(IndexMismatchError, match="another corpus"):
        build_index(docs[:1], path, IndexSettings(legs=("bm25", "tfidf")))
    rebuilt = build_index(docs[:1], path, IndexSettings(legs=("bm25", "tfidf")), overwrite=True)
    assert len(rebuilt) == 1 and not list(tmp_path.glob(".small.*"))
    assert sorted(p.name for p in path.iterdir()) == [".lock", "CURRENT", rebuilt.generation]


def test_malformed_corpus_leaves_no_index_behind(tmp_path):
    from intentrank.data.corpus import iter_corpus

    src = tmp_path / "corpus.jsonl"
    src.write_text('{"_id": "1", "text": "fine"}\n{"_id": "2", "text": "broken\n')
    with pytest.raises(DataError, match=r"corpus.jsonl:2: malformed JSON"):
        build_index(iter_corpus(src), tmp_path / "idx", IndexSettings(legs=("bm25",)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]


def test_duplicate_chunk_ids_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="duplicate document id"):
        build_index([Document("a", "x"), Document("a", "y")], tmp_path / "i",
                    IndexSettings(legs=("bm25",)))
    assert not list(tmp_path.iterdir())


def test_embedding_cache_is_reused(cranfield, tmp_path):
    docs = list(cranfield.corpus())[:40]
    settings = IndexSettings(legs=("dense",))
    first = build_index(docs, tmp_path / "a", settings)
    second = build_index(docs, tmp_path / "b", settings)
    assert second.manifest["stats"]["dense"] == {"cache_hits": 40, "encoded": 0}
    assert np.array_equal(np.load(first.gen_dir / "dense/embeddings.npy"),
                          np.load(second.gen_dir / "dense/embeddings.npy"))
    same = build_index(docs, tmp_path / "a", settings)  # up to date: reused, not rebuilt
    assert same.generation == first.generation
    assert json.loads((same.gen_dir / "manifest.json").read_text())["created"] == \
        first.manifest["created"]


def test_chunked_index_maps_back_to_parents(cranfield, tmp_path):
    from intentrank.retrieve.parents import ParentDocuments

    docs = list(cranfield.corpus())[:50]
    idx = build_index(docs, tmp_path / "chunks", IndexSettings(legs=("bm25",), chunk_size=60,
                                                               chunk_overlap=10))
    assert len(idx) > 50 and any("#" in i for i in idx.ids)
    ranking = (BM25Retriever(idx, depth=50) >> ParentDocuments(idx)).search("wing slipstream lift")
    assert ranking.doc_ids and all("#" not in d for d in ranking.doc_ids)
    assert len(set(ranking.doc_ids)) == len(ranking.doc_ids)


def test_empty_and_huge_queries_are_clear_errors(cranfield_index):
    with pytest.raises(DataError, match="query 'q' is empty"):
        BM25Retriever(cranfield_index).search("   ")
    with pytest.raises(DataError, match="limit is 20000"):
        BM25Retriever(cranfield_index).search("wing " * 5000)
    # A query made only of stopwords is valid and simply finds nothing.
    assert BM25Retriever(cranfield_index).run([Query("s", "the of and")]).rankings[0].docs == []
