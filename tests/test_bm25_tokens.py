"""intentrank's BM25 tokenizer gives bm25s.tokenize's tokens, on real SciFact abstracts and
queries, for each stemmer and stopword setting (an index built before keeps its meaning)."""

from __future__ import annotations

import bm25s
import pytest

from intentrank.index.hits import bm25_tokenize, pystemmer


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
