"""LlamaIndex adapters (``pip install 'intentrank[llamaindex]'``):

- :class:`IntentrankRetriever`, a ``BaseRetriever``: any intentrank search pipeline over an
  index; each result is a ``NodeWithScore`` (the pipeline's score) over a ``TextNode`` whose
  id is the doc id, whose text is the passage and whose ``metadata`` has ``doc_id``,
  ``title``, ``score``, ``rank`` and ``stage_scores`` (every stage's score by path id); only
  ``title`` is shown to LLMs and embedders. ``filters=MetadataFilters(...)`` (or filter
  text) keeps the search among the documents it lets through (docs/filters.md).
- :class:`IntentrankReranker`, a ``BaseNodePostprocessor``: any intentrank reranking
  pipeline (default: the bundled cross-encoder) over the nodes a query engine hands it.

::

    retriever = IntentrankRetriever("bm25", index="indexes/cranfield", k=30)
    reranker = IntentrankReranker(pipeline={"cross_encoder": {"top_k": 30}}, top_n=5)
    nodes = reranker.postprocess_nodes(retriever.retrieve(question), query_str=question)
"""

from __future__ import annotations

import asyncio
from typing import Any

from intentrank.extras import require

require("llama_index.core", "llamaindex", "intentrank.integrations.llamaindex")

from llama_index.core.callbacks import CallbackManager  # noqa: E402
from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.retrievers import BaseRetriever  # noqa: E402
from llama_index.core.schema import (  # noqa: E402
    MetadataMode,
    NodeWithScore,
    QueryBundle,
    TextNode,
)

from intentrank.errors import ConfigError  # noqa: E402
from intentrank.integrations.common import PipelineSearch, PipelineSpec  # noqa: E402
from intentrank.integrations.fields import RerankerFields  # noqa: E402
from intentrank.integrations.filter_maps import from_llamaindex  # noqa: E402

HIDDEN = ["doc_id", "score", "rank", "stage_scores"]  # metadata kept from LLMs and embedders


def _hide(keys: list[str]) -> list[str]:
    return [*keys, *(k for k in HIDDEN if k not in keys)]


class IntentrankRetriever(BaseRetriever):
    """An intentrank search pipeline as a LlamaIndex retriever.

    ``pipeline``: a built Stage, a shipped config name (``bm25``, ``rrf``, ``cascade``), a
    YAML config file or a config node; ``index``: an open index or its directory (a config
    file's own ``index:`` when omitted); ``k``: results returned; ``filters``: a LlamaIndex
    ``MetadataFilters``, filter text or a Filter; ``resources``: passed to the pipeline's
    build context (``llm=...`` for LLM stages)."""

    def __init__(self, pipeline: PipelineSpec, index: Any = None, k: int = 10,
                 callback_manager: CallbackManager | None = None, filters: Any = None,
                 **resources: Any) -> None:
        super().__init__(callback_manager=callback_manager)
        self.k = k
        self.filter = from_llamaindex(filters)
        self._search = PipelineSearch(pipeline, index, **resources)

    @property
    def stage(self) -> Any:
        """The intentrank pipeline (a Stage) this retriever runs."""
        return self._search.stage

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        out = []
        for h in self._search.search(query_bundle.query_str, self.k, self.filter):
            node = TextNode(id_=h.doc_id, text=h.document.text, metadata=h.metadata,
                            excluded_llm_metadata_keys=list(HIDDEN),
                            excluded_embed_metadata_keys=list(HIDDEN))
            out.append(NodeWithScore(node=node, score=h.score))
        return out

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # LlamaIndex's default runs _retrieve on the event loop; a pipeline would block it
        return await asyncio.to_thread(self._retrieve, query_bundle)


class IntentrankReranker(RerankerFields, BaseNodePostprocessor):
    """An intentrank reranking pipeline as a LlamaIndex node postprocessor (its fields:
    :class:`~intentrank.integrations.fields.RerankerFields`); returned nodes are copies with
    ``score``, ``rank`` and ``stage_scores`` in their metadata."""

    @classmethod
    def class_name(cls) -> str:
        return "IntentrankReranker"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ConfigError("IntentrankReranker needs the query: pass query_bundle or "
                              "query_str")
        docs = [self._passage(n.node.metadata, n.node.node_id,
                              n.node.get_content(metadata_mode=MetadataMode.NONE))
                for n in nodes]
        out = []
        for i, added in self._rerank(query_bundle.query_str, docs):
            node = nodes[i].node.model_copy()
            node.metadata = {**node.metadata, **added}
            node.excluded_llm_metadata_keys = _hide(node.excluded_llm_metadata_keys)
            node.excluded_embed_metadata_keys = _hide(node.excluded_embed_metadata_keys)
            out.append(NodeWithScore(node=node, score=added["score"]))
        return out

    async def _apostprocess_nodes(self, nodes: list[NodeWithScore],
                                  query_bundle: QueryBundle | None = None
                                  ) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._postprocess_nodes, nodes, query_bundle)


__all__ = ["IntentrankReranker", "IntentrankRetriever"]
