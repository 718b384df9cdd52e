"""intentrank's BM25 tokenizer gives bm25s.tokenize's tokens, on real SciFact abstracts and
queries, for each stemmer and stopword setting (an index built before keeps its meaning); the
one-pass tokenizer to ids (index builds) gives the same terms, and a BM25 leg built from it
is bm25s's index of those tokens, array for array."""

from __future__ import annotations

import bm25s
import pytest

from intentrank.index.hits import bm25_token_ids, bm25_tokenize, pystemmer


@pytest.mark.parametrize(("stopwords", "stemmer"), [("en", "english"), ("en", "porter"),
                                                    (None, None), ("en_plus", "english")])
def test_tokens_equal_bm25s(scifact, stopwords, stemmer):
    import threading

    texts = [d.full_text() for _, d in zip(range(300), scifact.corpus(), strict=False)]
    texts += [q.text for q in scifact.split("test")[0]] + ["", "A b c", "Ünïcode déjà-vu 3.5x"]
    ours = bm25_tokenize(texts, stopwords, stemmer)
    theirs = bm25s.tokenize(texts, stopwords=stopwords or [], return_ids=False,
                            stemmer=pystemmer(stemmer, threading.get_ident()),
                            show_progress=False)
    assert ours == theirs
    assert sum(map(len, ours)) > 10_000


def test_lucene_tokens_keep_one_letter_words_and_reach_anserini(scifact, tmp_path):
    """bm25.tokens 'lucene' with Porter, k1 0.9, b 0.4 (Anserini's analyser and BM25):
    SciFact nDCG@10 within 0.5 points of Anserini's published 0.6789."""
    from dataclasses import replace

    from intentrank.index import IndexSettings, build_index
    from intentrank.measures.metrics import evaluate
    from intentrank.retrieve.retrievers import BM25Retriever

    assert bm25_tokenize(["A b-52 x"], None, None, tokens="lucene") == [["a", "b", "52", "x"]]
    base = IndexSettings(legs=("bm25",))
    idx = build_index(scifact.corpus(), tmp_path / "idx", replace(base, bm25=replace(
        base.bm25, tokens="lucene", stemmer="porter", k1=0.9, b=0.4)))
    queries, qrels = scifact.split("test")
    ndcg = evaluate(BM25Retriever(idx, 100).run(queries).to_run(), qrels,
                    ["nDCG@10"]).aggregate["nDCG@10"]
    assert abs(ndcg - 0.6789) < 0.005


SETTINGS = [("en", "english", "bm25s"), ("en", "porter", "lucene"), (None, None, "bm25s"),
            ("en_plus", "english", "lucene")]


def _texts(dataset, n: int) -> list[str]:
    texts = [d.full_text() for _, d in zip(range(n), dataset.corpus(), strict=False)]
    return texts + ["", "A b c", "Ünïcode déjà-vu 3.5x", "the of and", "s"]


@pytest.mark.parametrize(("stopwords", "stemmer", "tokens"), SETTINGS)
def test_token_ids_are_the_tokens_numbered(scifact, stopwords, stemmer, tokens):
    """bm25_token_ids (one pass, each word stemmed once) is bm25_tokenize's output with its
    terms numbered in order of first appearance."""
    from intentrank.index.shards import token_ids

    texts = _texts(scifact, 1000)
    ids, vocab = token_ids(bm25_tokenize(texts, stopwords, stemmer, tokens=tokens))
    got = bm25_token_ids(texts, stopwords, stemmer, tokens=tokens)
    assert got.vocab == vocab
    assert got.docs() == ids
    assert got.lengths.tolist() == [len(d) for d in ids] and len(got.ids) > 100_000


@pytest.mark.parametrize(("stopwords", "stemmer", "tokens", "method"),
                         [(*s, m) for s, m in zip(SETTINGS, ["lucene", "lucene", "robertson",
                                                             "bm25+"], strict=True)])
def test_bm25_leg_is_bm25s_index_of_the_tokens(cranfield, tmp_path, stopwords, stemmer, tokens,
                                               method):
    """A BM25 leg written by build_bm25 (ids in one pass, scores vectorised from the term
    rows) is what bm25s.BM25.index makes of bm25_tokenize's tokens, on the whole Cranfield
    collection: the same score arrays, bit for bit, the same vocabulary, the same term rows
    as TermRows.from_tokens; so the same scores and ranks as before."""
    from dataclasses import replace

    import numpy as np

    from intentrank.index.bm25 import build_bm25
    from intentrank.index.settings import BM25Settings
    from intentrank.index.shards import token_ids
    from intentrank.index.terms import TermRows

    s = replace(BM25Settings(), stopwords=stopwords, stemmer=stemmer, tokens=tokens,
                method=method, k1=0.9, b=0.4)
    texts = _texts(cranfield, 10_000)
    build_bm25(texts, s, tmp_path / "bm25")
    tokenised = bm25_tokenize(texts, stopwords, stemmer, tokens=tokens)
    want = bm25s.BM25(method=method, k1=0.9, b=0.4)
    want.index(bm25s.tokenization.Tokenized(*token_ids(tokenised)), show_progress=False)
    got = bm25s.BM25.load(str(tmp_path / "bm25"))
    assert got.vocab_dict == want.vocab_dict
    for key in ("data", "indices", "indptr"):
        assert got.scores[key].dtype == want.scores[key].dtype
        assert np.array_equal(got.scores[key], want.scores[key])
    if method in ("bm25l", "bm25+"):  # and the score of a document without a query term
        assert np.array_equal(got.nonoccurrence_array, want.nonoccurrence_array)
    assert got.scores["num_docs"] == want.scores["num_docs"] == len(texts)
    rows, fresh = TermRows.load(tmp_path, "bm25"), TermRows.from_tokens(tokenised)
    assert rows.vocab == fresh.vocab
    assert (rows.counts != fresh.counts).nnz == 0
    assert rows.counts.indices.dtype == fresh.counts.indices.dtype
