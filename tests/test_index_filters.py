"""Pre-filtered search in every leg (Index.allowed_rows + allow=) on real SciFact abstracts:
a filtered search returns exactly the top k of the matching documents (never fewer because
candidates were cut first), as an index of the matching documents only would; approximate
search (HNSW, IVF-PQ) keeps recall against exact search at 1%, 10% and 50% selectivity;
deletes by filter."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import DATA

from intentrank.data.corpus import iter_corpus
from intentrank.errors import FilterError
from intentrank.filters import parse_filter
from intentrank.index import Index, IndexSettings, build_index
from intentrank.index.settings import AnnSettings, DenseSettings
from intentrank.index.update import delete

QUERIES = ["vitamin D and bone fractures", "stem cells in breast cancer",
           "gene expression of mice", "HIV infection trial", "insulin resistance obesity",
           "protein folding", "cell death in neurons", "tumour growth"]
FILTERS = ['year >= 2015', 'team = "a" AND NOT year IN (2001, 2002, 2003)', 'acl = "y"',
           'id PREFIX "1"', 'year < 2001 OR team = "b" AND year > 2018', 'year = 1850']


def tagged(n: int) -> list:
    docs = []
    for doc in iter_corpus(DATA / "scifact" / "corpus.jsonl.gz"):
        i = len(docs)
        docs.append(replace(doc, metadata={"year": 2000 + i % 20, "team": "ab"[i % 2],
                                           "acl": ["x"] if i % 3 else ["x", "y"]}))
        if len(docs) == n:
            break
    return docs


@pytest.fixture(scope="module")
def lexical(tmp_path_factory):
    index = build_index(tagged(400), tmp_path_factory.mktemp("f") / "idx",
                        IndexSettings(legs=("bm25", "tfidf", "graph")))
    yield index
    index.close()


def check_prefilter(index, leg: str, allow: np.ndarray, k: int = 10, **kwargs) -> None:
    """The filtered top k is the unfiltered ranking's matching documents, top k."""
    search = getattr(index, f"search_{leg}")
    full = search(QUERIES, len(index), **kwargs)
    got = search(QUERIES, k, allow=allow, **kwargs)
    for f, g in zip(full, got, strict=True):
        keep = allow[f.rows]
        assert g.rows.tolist() == f.rows[keep][:k].tolist(), leg
        np.testing.assert_allclose(g.scores, f.scores[keep][:k], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("text", FILTERS)
def test_lexical_legs_equal_an_index_of_the_matching_documents(lexical, text, tmp_path):
    """Every lexical leg's filtered search is the search of an index built from the matching
    documents only: the same ids, ranks and scores (their statistics, not the whole index's)."""
    allow = lexical.allowed_rows(text)
    records = [dict(lexical.doc(i).metadata, id=i) for i in lexical.ids]
    assert allow.tolist() == [parse_filter(text).matches(r) for r in records]
    matching = [lexical.doc(i) for i in lexical.id_array[allow].tolist()]
    fresh = build_index(matching, tmp_path / "only", lexical.settings) if matching else None
    for leg in ("bm25", "tfidf", "graph"):
        got = getattr(lexical, f"search_{leg}")(QUERIES, 10, allow=allow)
        want = getattr(fresh, f"search_{leg}")(QUERIES, 10) if fresh else [None] * len(got)
        for g, w in zip(got, want, strict=True):
            assert allow[g.rows].all(), leg
            if w is None:
                assert g.rows.size == 0
                continue
            assert lexical.id_array[g.rows].tolist() == fresh.id_array[w.rows].tolist(), leg
            assert g.scores.tolist() == w.scores.tolist(), leg
    if fresh is not None:
        fresh.close()


def test_a_filter_s_statistics_are_its_own(lexical):
    """Documents outside a filter change no filtered score: the allowed rows of a filter score
    the same in an index that holds other documents too (a scope learns nothing of them)."""
    allow = lexical.allowed_rows('team = "a"')
    for leg in ("bm25", "tfidf", "graph"):
        inside = getattr(lexical, f"search_{leg}")(QUERIES, 400, allow=allow)
        whole = getattr(lexical, f"search_{leg}")(QUERIES, 400)
        assert any(set(w.rows.tolist()) - set(np.flatnonzero(allow).tolist()) for w in whole)
        differ = []
        for i, w in zip(inside, whole, strict=True):  # the whole index's scores differ
            both = np.intersect1d(i.rows, w.rows)
            if len(both):
                differ.append(not np.array_equal(i.scores[np.isin(i.rows, both)],
                                                 w.scores[np.isin(w.rows, both)]))
        assert differ and all(differ), leg


def test_no_filter_and_bad_filters(lexical):
    assert lexical.allowed_rows(None) is None
    with pytest.raises(FilterError):
        lexical.allowed_rows("year >=")
    with pytest.raises(ValueError, match="bool mask of 400 rows"):
        lexical.search_bm25(["x"], 3, allow=np.ones(3, dtype=bool))
    nothing = lexical.allowed_rows("year = 1850")
    assert not nothing.any()
    assert all(h.rows.size == 0 for h in lexical.search_tfidf(QUERIES, 5, allow=nothing))


def test_delete_by_filter(tmp_path):
    docs = tagged(60)
    path = tmp_path / "idx"
    build_index(docs, path, IndexSettings(legs=("bm25",))).close()
    stats = delete(path, filter='year < 2005 OR acl = "y"')
    with Index(path) as index:
        left = [d.id for d in docs if not (d.metadata["year"] < 2005 or "y" in d.metadata["acl"])]
        assert index.ids == left and stats.deleted == len(docs) - len(left)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["exact", "hnsw", "ivfpq"])
def test_dense_prefilter_exact_and_approximate_recall(tmp_path, method):
    """Exact: the filtered top 10 equals the matching rows of the full ranking. ANN: recall@10
    against exact filtered search at 1%, 10% and 50% selectivity of 2,000 real abstracts."""
    ann = AnnSettings(method, nlist=16) if method != "exact" else AnnSettings()
    settings = IndexSettings(legs=("dense",), dense=DenseSettings(ann=ann))
    index = build_index(tagged(2000), tmp_path / method, settings)
    rng = np.random.default_rng(0)
    q = index.encode_queries(QUERIES)
    for share in (0.01, 0.1, 0.5):
        allow = rng.random(len(index)) < share
        if method == "exact":
            check_prefilter(index, "dense", allow, query_vectors=q)
            continue
        rows = np.flatnonzero(allow)
        exact = (np.asarray(index.embeddings[rows]) @ q.T).T
        truth = [set(rows[np.argsort(-s)[:10]].tolist()) for s in exact]
        got = index.search_dense(QUERIES, 10, query_vectors=q, allow=allow)
        assert all(allow[h.rows].all() and len(h.rows) == 10 for h in got)
        recall = np.mean([len(t & set(h.rows.tolist())) / 10 for t, h in
                          zip(truth, got, strict=True)])
        assert recall >= 0.95, (method, share, recall)
    index.close()
