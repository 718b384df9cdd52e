"""The LangChain and LlamaIndex adapters with the real libraries, on Cranfield: a retriever
returns the in-process pipeline's ranking (same ids, same order, same scores), and a
reranker (compressor / node postprocessor) over the retrieved documents gives what the
in-process BM25 >> cross-encoder pipeline gives."""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest

from intentrank.core.config import build_pipeline, resolve_pipeline
from intentrank.extras import MissingExtraError
from intentrank.pipelines import build_context, pipeline_from_config
from intentrank.types import Ranking

QUESTIONS = ["what similarity laws must be obeyed when constructing aeroelastic models of "
             "heated high speed aircraft", "boundary layer growth on a flat plate",
             "shock wave interaction with a turbulent boundary layer"]
DEPTH = 30
CE = {"cross_encoder": {"top_k": DEPTH}}  # the bundled int8 cross-encoder


@pytest.fixture(scope="module")
def bm25_index(cranfield, tmp_path_factory):
    from intentrank.index import IndexSettings, build_index

    return build_index(cranfield.corpus(), tmp_path_factory.mktemp("integ") / "cranfield",
                       IndexSettings(legs=("bm25",)))


@pytest.fixture(scope="module")
def cascade(bm25_index):
    """The in-process pipeline the adapters must agree with: BM25 top 30 -> cross-encoder."""
    return build_pipeline([{"bm25": {"depth": DEPTH}}, CE], build_context(bm25_index))


def _same(ids_scores: list[tuple[str, float]], ranking: Ranking) -> None:
    assert [i for i, _ in ids_scores] == ranking.doc_ids
    for (_, got), want in zip(ids_scores, ranking.docs, strict=True):
        assert got == pytest.approx(want.score, rel=1e-5)


# -- LangChain ---------------------------------------------------------------------------


def test_langchain_retriever_in_an_lcel_chain_matches_the_pipeline(bm25_index) -> None:
    from langchain_core.runnables import RunnableLambda

    from intentrank.integrations.langchain import IntentrankRetriever

    retriever = IntentrankRetriever(pipeline="bm25", index=bm25_index, k=10)
    reference = pipeline_from_config(resolve_pipeline("bm25"), index=bm25_index)
    chain = retriever | RunnableLambda(lambda docs: "\n".join(
        f"[{d.metadata['doc_id']}] {d.metadata['title']}" for d in docs))
    for q in QUESTIONS:
        want = reference.search(q, k=10)
        docs = retriever.invoke(q)
        _same([(d.metadata["doc_id"], d.metadata["score"]) for d in docs], want)
        first = docs[0]
        doc = bm25_index.doc(first.metadata["doc_id"])
        assert first.page_content == doc.text and first.metadata["title"] == doc.title
        assert first.id == doc.id and first.metadata["rank"] == 1
        assert set(first.metadata["stage_scores"]) == {"bm25"}
        assert chain.invoke(q) == "\n".join(
            f"[{d.doc_id}] {bm25_index.doc(d.doc_id).title}" for d in want.docs)
    assert retriever.batch(QUESTIONS[:2])[1] == retriever.invoke(QUESTIONS[1])


def test_langchain_retriever_takes_a_built_stage(bm25_index) -> None:
    from intentrank.integrations.langchain import IntentrankRetriever
    from intentrank.retrieve.retrievers import BM25Retriever

    stage = BM25Retriever(bm25_index, depth=5)
    docs = IntentrankRetriever(pipeline=stage, index=bm25_index, k=3).invoke(QUESTIONS[0])
    _same([(d.metadata["doc_id"], d.metadata["score"]) for d in docs],
          stage.search(QUESTIONS[0], k=3))


def test_langchain_reranker_over_retrieved_documents_matches_the_cascade(
        bm25_index, cascade) -> None:
    from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough

    from intentrank.integrations.langchain import IntentrankReranker, IntentrankRetriever
    from intentrank.rerank.cross_encoder import CrossEncoderReranker

    retriever = IntentrankRetriever(pipeline={"bm25": {"depth": DEPTH}}, index=bm25_index,
                                    k=DEPTH)
    reranker = IntentrankReranker(pipeline=CE)
    chain = RunnableParallel(docs=retriever, query=RunnablePassthrough()) | RunnableLambda(
        lambda x: reranker.compress_documents(x["docs"], x["query"]))
    built = IntentrankReranker(pipeline=CrossEncoderReranker(bm25_index, top_k=DEPTH), top_n=5)
    for q in QUESTIONS:
        want = cascade.search(q)
        docs = chain.invoke(q)
        _same([(d.metadata["doc_id"], d.metadata["score"]) for d in docs], want)
        assert set(docs[0].metadata["stage_scores"]) == {"input", "cross_encoder"}
        assert [d.metadata["rank"] for d in docs[:3]] == [1, 2, 3]
        assert docs[0].page_content == bm25_index.doc(want.doc_ids[0]).text
        top5 = built.compress_documents(retriever.invoke(q), q)  # a Stage reads its own index
        _same([(d.metadata["doc_id"], d.metadata["score"]) for d in top5], want.top(5))
    assert reranker.compress_documents([], "anything") == []


def test_langchain_reranker_without_titles_or_ids(bm25_index) -> None:
    """Plain documents from another retriever: ranked by their own text, ids not needed."""
    from langchain_core.documents import Document

    from intentrank.errors import ConfigError
    from intentrank.integrations.langchain import IntentrankReranker
    from intentrank.rerank.cross_encoder import CrossEncoderReranker

    docs = [Document(page_content=t) for t in (
        "Recipes for apple pie.", "The laminar boundary layer over a flat plate thickens "
        "downstream.", "Shock waves in supersonic flow over a wedge.")]
    out = IntentrankReranker(top_n=2).compress_documents(docs, QUESTIONS[1])
    assert [d.page_content for d in out] == [docs[1].page_content, docs[2].page_content]
    assert 0 <= out[1].metadata["score"] < out[0].metadata["score"] <= 1  # sigmoid scores
    with pytest.raises(ConfigError, match="distinct doc_id"):
        IntentrankReranker(pipeline=CrossEncoderReranker(bm25_index)).compress_documents(
            docs, "q")


# -- LlamaIndex --------------------------------------------------------------------------


def test_llamaindex_retriever_and_reranker_in_a_query_engine(bm25_index, cascade) -> None:
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers.no_text import NoText
    from llama_index.core.schema import MetadataMode

    from intentrank.integrations.llamaindex import IntentrankReranker, IntentrankRetriever

    retriever = IntentrankRetriever([{"bm25": {"depth": DEPTH}}], index=bm25_index, k=DEPTH)
    reranker = IntentrankReranker(pipeline=CE, top_n=5)
    engine = RetrieverQueryEngine(retriever, NoText(llm=MockLLM()),  # sources only, no LLM
                                  node_postprocessors=[reranker])
    bm25 = build_pipeline({"bm25": {"depth": DEPTH}}, build_context(bm25_index))
    for q in QUESTIONS:
        nodes = retriever.retrieve(q)
        _same([(n.node.node_id, n.score) for n in nodes], bm25.search(q))
        assert nodes[0].node.metadata["title"] == bm25_index.doc(nodes[0].node.node_id).title
        shown = nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)
        assert "stage_scores" not in shown and nodes[0].node.text in shown
        want = cascade.search(q, k=5)
        reranked = reranker.postprocess_nodes(nodes, query_str=q)
        _same([(n.node.node_id, n.score) for n in reranked], want)
        response = engine.query(q)
        _same([(n.node.node_id, n.score) for n in response.source_nodes], want)
        later = asyncio.run(engine.aquery(q))  # async: the pipeline runs in a thread
        _same([(n.node.node_id, n.score) for n in later.source_nodes], want)
        top = reranked[0].node
        assert top.metadata["stage_scores"].keys() == {"input", "cross_encoder"}
        assert top.metadata["rank"] == 1 and nodes[0].node.metadata["rank"] == 1  # a copy
        assert "stage_scores" not in top.get_content(metadata_mode=MetadataMode.LLM)


# -- missing extras ----------------------------------------------------------------------


@pytest.mark.parametrize(("module", "framework", "extra"), [
    ("intentrank.integrations.langchain", "langchain_core", "langchain"),
    ("intentrank.integrations.llamaindex", "llama_index.core", "llamaindex"),
])
def test_a_missing_framework_names_its_extra(monkeypatch, module, framework, extra) -> None:
    monkeypatch.setitem(sys.modules, framework, None)  # as if not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingExtraError, match=rf"pip install 'intentrank\[{extra}\]'"):
        importlib.import_module(module)
