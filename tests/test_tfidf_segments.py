"""TF-IDF over segments (index/tfidf_segments.py): the leg combined from each segment's kept
counts equals scikit-learn's TfidfVectorizer fitted on the live (allowed) documents, bit for
bit, also where max_features cuts the vocabulary inside a run of tied term totals; a reader
of the next commit reuses the segments a reader of this process already loaded."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from test_index_update import QUERIES, abstracts_with_years, assert_same_as_fresh

from intentrank.index import IndexSettings, build_index
from intentrank.index.settings import TfidfSettings
from intentrank.index.store import Index
from intentrank.index.terms import tfidf_rows
from intentrank.index.tfidf_segments import combine, fitted_idf, segment_terms
from intentrank.index.update import delete, upsert

# 300 terms kept of several thousand: the cut falls inside a run of equal totals
SMALL = IndexSettings(legs=("tfidf",), tfidf=TfidfSettings(max_features=300))


@pytest.fixture(scope="module")
def scifact():
    return abstracts_with_years()


def test_fitted_idf_is_scikit_learn_s(scifact):
    from sklearn.feature_extraction.text import TfidfTransformer

    counts = tfidf_rows([d.text for d in scifact[:80]], TfidfSettings()).counts
    for smooth in (True, False):
        want = TfidfTransformer(smooth_idf=smooth).fit(counts).idf_
        df = np.bincount(counts.tocsr().indices, minlength=counts.shape[1])
        got = fitted_idf(df, counts.shape[0], smooth)
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("tfidf", [TfidfSettings(max_features=300),
                                   TfidfSettings(ngram_max=1, max_features=None,
                                                 sublinear_tf=True)])
def test_segments_deletes_and_filters_equal_a_fresh_build(scifact, tmp_path, tfidf):
    settings = IndexSettings(legs=("tfidf",), tfidf=tfidf)
    path = tmp_path / "idx"
    build_index(scifact[:60], path, settings).close()
    upsert(path, scifact[60:90], merge_policy=False)
    upsert(path, [replace(scifact[5], text="insulin resistance in obese mice"),
                  *scifact[90:95]], merge_policy=False)
    delete(path, [scifact[8].id, scifact[70].id])
    with Index(path) as index:
        assert len(index.segments) == 3 and index.rows_deleted == 3
        vectorizer, matrix = index.tfidf  # the combined leg as one matrix, as a build's
        docs = list(index.documents())
    with build_index(docs, tmp_path / "fresh", settings) as fresh:
        fv, fm = fresh.tfidf
        assert vectorizer.vocabulary_ == fv.vocabulary_
        assert np.array_equal(vectorizer.idf_, fv.idf_)
        assert (matrix != fm).nnz == 0 and matrix.dtype == fm.dtype
    assert_same_as_fresh(path, tmp_path, settings)
    with Index(path) as index:  # a filter: the statistics of the matching documents only
        allow = index.allowed_rows("year >= 2010")
        got = [(index.id_array[h.rows].tolist(), h.scores.tolist())
               for h in index.search_tfidf(QUERIES, 15, allow=allow)]
        matching = [d for d, keep in zip(index.documents(), allow, strict=True) if keep]
    with build_index(matching, tmp_path / "only", settings) as only:
        assert [(only.id_array[h.rows].tolist(), h.scores.tolist())
                for h in only.search_tfidf(QUERIES, 15)] == got


def test_the_cut_of_max_features_falls_among_ties(scifact):
    """The case the combined order must reproduce: terms of equal totals on both sides of
    the cut (scikit-learn keeps those its unstable argsort puts first)."""
    counts = tfidf_rows([d.text for d in scifact[:95]], TfidfSettings()).counts
    totals = np.sort(np.asarray(counts.sum(axis=0)).ravel())[::-1]
    assert totals[299] == totals[300]


def test_a_reader_of_the_next_commit_reuses_the_loaded_segments(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:40], path, SMALL).close()
    upsert(path, scifact[40:50], merge_policy=False)
    with Index(path) as first:
        first.search_tfidf(QUERIES, 5)
        held = first.__dict__["_tfidf_segments"]
        upsert(path, scifact[50:55], merge_policy=False)
        with Index(path) as second:
            second.search_tfidf(QUERIES, 5)
            now = second.__dict__["_tfidf_segments"]
            assert now[0] is held[0] and now[1] is held[1] and now[2] not in held
            assert segment_terms(second.gen_dir / second.segments[2].dir) is now[2]


def test_no_term_among_the_included_rows(scifact):
    from intentrank.index.terms import TermRows
    from intentrank.index.tfidf_segments import SegmentTerms

    seg = SegmentTerms(TermRows(sp.csr_matrix((2, 0), dtype=np.float32), []))
    assert combine([(seg, np.arange(2))], TfidfSettings()) is None
    assert combine([], TfidfSettings()) is None
