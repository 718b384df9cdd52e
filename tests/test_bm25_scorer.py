"""The one BM25 formula (index/bm25_scorer.py) against bm25s itself, for every method the
index offers, on the Cranfield collection: an index grown by adds into several segments,
with deleted rows, searched whole and through a filter, sharded or not, returns bm25s's own
top k of the live (allowed) documents: the same ids and ranks, float32-close scores."""

from __future__ import annotations

from dataclasses import replace

import bm25s
import numpy as np
import pytest
from tolerances import F32_ABS as ABS
from tolerances import F32_REL as REL

from intentrank.index import Index, IndexSettings, build_index
from intentrank.index.bm25_scorer import BM25Formula
from intentrank.index.hits import NO_HITS, Hits, bm25_tokenize, top_k
from intentrank.index.settings import BM25_METHODS, BM25Settings
from intentrank.index.shards import token_ids
from intentrank.index.update import delete, merge, upsert

FILTER = 'id PREFIX "1"'  # Cranfield's ids are 1..1400: about a third of them


def bm25s_top(texts: list[str], s: BM25Settings, queries: list[str], k: int) -> list[Hits]:
    """bm25s's own index of ``texts`` and its scores for each query, top ``k`` by row."""
    ids, vocab = token_ids(bm25_tokenize(texts, s.stopwords, s.stemmer, tokens=s.tokens))
    ref = bm25s.BM25(method=s.method, k1=s.k1, b=s.b)
    ref.index(bm25s.tokenization.Tokenized(ids, vocab), show_progress=False)
    out = []
    for toks in bm25_tokenize(queries, s.stopwords, s.stemmer, tokens=s.tokens):
        known = ref.get_tokens_ids(toks)
        out.append(top_k(ref.get_scores_from_ids(known), k) if known else NO_HITS)
    return out


def assert_like_bm25s(index: Index, queries: list[str], k: int = 10) -> None:
    """The index's BM25 hits, whole and filtered, are bm25s's of its live documents."""
    for allow in (None, index.allowed_rows(FILTER)):
        rows = np.arange(len(index)) if allow is None else np.flatnonzero(allow)
        texts = [index.doc_text(index.ids[r]) for r in rows.tolist()]
        want = bm25s_top(texts, index.settings.bm25, queries, k)
        got = index.search_bm25(queries, k, allow)
        assert sum(len(h.rows) for h in got) > len(queries)  # the queries find documents
        for g, w in zip(got, want, strict=True):
            assert index.id_array[g.rows].tolist() == index.id_array[rows[w.rows]].tolist()
            np.testing.assert_allclose(g.scores, w.scores, rtol=REL, atol=ABS)


@pytest.fixture(scope="module")
def queries(cranfield) -> list[str]:
    return [q.text for q in cranfield.split("test")[0][:25]]


@pytest.mark.parametrize("method", BM25_METHODS)
def test_every_method_over_segments_deletes_and_a_filter_is_bm25s(cranfield, tmp_path,
                                                                   method, queries):
    docs = list(cranfield.corpus())
    path = tmp_path / method
    settings = IndexSettings(legs=("bm25",), bm25=BM25Settings(method=method))
    with build_index(docs[:900], path, settings) as index:  # one segment: bm25s's impacts
        assert index.flat
        assert_like_bm25s(index, queries)
    upsert(path, docs[900:1200])
    upsert(path, docs[1200:])
    rng = np.random.default_rng(7)
    delete(path, [docs[int(i)].id for i in rng.choice(len(docs), 40, replace=False)])
    with Index(path) as index:  # three segments with deleted rows: from the postings
        assert len(index.segments) == 3 and index.rows_deleted == 40
        assert_like_bm25s(index, queries)


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_a_sharded_index_takes_updates_and_stays_bm25s(cranfield, tmp_path, method, queries):
    """Shards scored with global statistics (bm25+: a query term missing from a shard still
    adds its non-occurrence score there); adds, deletes and a merge back into shards."""
    docs = list(cranfield.corpus())
    path = tmp_path / "sharded"
    settings = IndexSettings(legs=("bm25", "tfidf"), shards=3,
                             bm25=BM25Settings(method=method))
    build_index(docs[:1000], path, settings).close()
    with Index(path) as index:
        assert index.sharded and index.flat and isinstance(index.bm25, list)
        assert_like_bm25s(index, queries)
    upsert(path, docs[1000:] + [replace(docs[3], text=docs[3].text + " shock waves")])
    delete(path, [d.id for d in docs[10:40]])
    with Index(path) as index:
        assert len(index.segments) == 2 and not index.flat
        assert_like_bm25s(index, queries)
    merge(path)
    with Index(path) as index:  # one segment again, in three shards of global statistics
        assert index.flat and len(index.bm25) == 3
        assert [len(r.scores["indptr"]) > 1 for r in index.bm25] == [True] * 3
        assert_like_bm25s(index, queries)


def test_the_nonoccurrence_score_is_bm25s(cranfield):
    """bm25l/bm25+: a document without a query term still scores idf * tfc(0), as bm25s's
    non-occurrence array; the other methods score it 0."""
    texts = [d.full_text(" ") for d in list(cranfield.corpus())[:300]]
    ids, vocab = token_ids(bm25_tokenize(texts, "en", "porter"))
    df = np.zeros(len(vocab), dtype=np.int64)
    for d in ids:
        df[np.unique(d)] += 1
    for method in BM25_METHODS:
        ref = bm25s.BM25(method=method, k1=0.9, b=0.4)
        ref.index(bm25s.tokenization.Tokenized(ids, dict(vocab)), show_progress=False)
        got = BM25Formula(BM25Settings(method=method, k1=0.9, b=0.4)).nonoccurrence(df, 300)
        want = (np.zeros(len(df), dtype=np.float32) if ref.nonoccurrence_array is None
                else ref.nonoccurrence_array)
        assert np.array_equal(got, want), method
        assert (got > 0).all() == (method in ("bm25l", "bm25+"))


@pytest.mark.parametrize("method", ["atire", "bm25l"])
def test_the_cluster_two_phase_bm25_is_bm25s(cranfield, tmp_path, method, queries):
    """index/shard_api.py (what a cluster's shard answers) scores with the same formula: three
    ordinary indexes, their summed statistics, the merged top k is bm25s's of them all."""
    from intentrank.index import shard_api

    docs = list(cranfield.corpus())
    settings = IndexSettings(legs=("bm25",), bm25=BM25Settings(method=method))
    parts = [build_index(docs[i::3], tmp_path / f"s{i}", settings) for i in range(3)]
    order = [d.id for i in range(3) for d in docs[i::3]]
    want = bm25s_top([d.full_text(" ") for i in range(3) for d in docs[i::3]],
                     settings.bm25, queries, 10)
    starts = np.cumsum([0] + [len(p) for p in parts])
    for q, w in zip(queries, want, strict=True):
        toks = shard_api.tokenize(parts[0], [q])
        stats = [shard_api.bm25_term_stats(p, toks[0]) for p in parts]
        n, avg, df = shard_api.combine_stats(stats)
        per = [shard_api.bm25_search_global(p, toks, 10, n, avg, df)[0] for p in parts]
        rows = np.concatenate([h.rows + starts[s] for s, h in enumerate(per)])
        scores = np.concatenate([h.scores for h in per])
        best = np.lexsort((rows, -scores))[:10]
        assert [order[r] for r in rows[best]] == [order[r] for r in w.rows]
        np.testing.assert_allclose(scores[best], w.scores, rtol=REL, atol=ABS)
    for p in parts:
        p.close()
