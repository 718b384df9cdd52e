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
