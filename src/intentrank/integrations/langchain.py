"""LangChain adapters (``pip install 'intentrank[langchain]'``):

- :class:`IntentrankRetriever`, a ``BaseRetriever``: any intentrank search pipeline over an
  index; each result is a ``Document`` whose ``page_content`` is the passage text and whose
  ``metadata`` has ``doc_id``, ``title``, ``score`` (the pipeline's), ``rank`` and
  ``stage_scores`` (every stage's score by path id). A metadata filter in LangChain's
  vector-store dict form (``search_kwargs={"filter": {"team": "a", "year": {"$gte":
  2020}}}``, or per call ``invoke(question, filter={...})``; filter text works too) keeps
  the search among the documents it lets through (docs/filters.md).
- :class:`IntentrankReranker`, a ``BaseDocumentCompressor``: any intentrank reranking
  pipeline (default: the bundled cross-encoder) over the documents a chain hands it, best
  first, each with ``score``, ``rank`` and ``stage_scores`` added to its metadata.

::

    retriever = IntentrankRetriever(pipeline="bm25", index="indexes/cranfield", k=30)
    reranker = IntentrankReranker(pipeline={"cross_encoder": {"top_k": 30}}, top_n=5)
    docs = reranker.compress_documents(retriever.invoke(question), question)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from intentrank.extras import require

require("langchain_core", "langchain", "intentrank.integrations.langchain")

from langchain_core.callbacks import (  # noqa: E402 (after the check that names the extra)
    CallbackManagerForRetrieverRun,
    Callbacks,
)
from langchain_core.documents import BaseDocumentCompressor  # noqa: E402
from langchain_core.documents import Document as LCDocument  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from pydantic import ConfigDict, PrivateAttr  # noqa: E402

from intentrank.core.params import check_int  # noqa: E402
from intentrank.errors import ConfigError, FilterError  # noqa: E402
from intentrank.filters import Filter, and_filters  # noqa: E402
from intentrank.integrations.common import PipelineSearch  # noqa: E402
from intentrank.integrations.fields import RerankerFields  # noqa: E402
from intentrank.integrations.filter_maps import from_langchain  # noqa: E402


class IntentrankRetriever(BaseRetriever):
    """An intentrank search pipeline as a LangChain retriever.

    ``pipeline``: a built Stage, a shipped config name (``bm25``, ``rrf``, ``cascade``), a
    YAML config file or a config node; ``index``: an open index or its directory (a config
    file's own ``index:`` when omitted); ``k``: results returned; ``resources``: passed to
    the pipeline's build context (``{"llm": "openai:<model>@<url>"}`` for LLM stages);
    ``search_kwargs``: ``filter`` (a LangChain filter dict, filter text or a Filter) and
    ``k`` (overrides ``k``), as a vector store's retriever takes them."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: Any
    index: Any = None
    k: int = 10
    resources: dict[str, Any] = {}
    search_kwargs: dict[str, Any] = {}
    _search: PipelineSearch = PrivateAttr()
    _filter: Filter | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        unknown = sorted(set(self.search_kwargs) - {"filter", "k"})
        if unknown:
            raise ConfigError(f"search_kwargs: unknown key(s) {unknown}; known: filter, k")
        self.k = check_int("search_kwargs k", self.search_kwargs.get("k", self.k))
        try:
            self._filter = from_langchain(self.search_kwargs.get("filter"))
        except FilterError as exc:  # not a ValueError here: pydantic would rewrap it
            raise ConfigError(f"search_kwargs {exc}") from None
        self._search = PipelineSearch(self.pipeline, self.index, **self.resources)

    @property
    def stage(self) -> Any:
        """The intentrank pipeline (a Stage) this retriever runs."""
        return self._search.stage

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun,
                                filter: Any = None) -> list[LCDocument]:  # noqa: A002
        """The top ``k``; a ``filter`` given with the call narrows ``search_kwargs``'s."""
        narrowed = and_filters(self._filter, from_langchain(filter))
        return [LCDocument(page_content=h.document.text, id=h.doc_id, metadata=h.metadata)
                for h in self._search.search(query, self.k, narrowed)]


class IntentrankReranker(RerankerFields, BaseDocumentCompressor):
    """An intentrank reranking pipeline as a LangChain document compressor (its fields:
    :class:`~intentrank.integrations.fields.RerankerFields`)."""

    def compress_documents(self, documents: Sequence[LCDocument], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[LCDocument]:
        docs = [self._passage(d.metadata, d.id, d.page_content) for d in documents]
        return [LCDocument(page_content=documents[i].page_content, id=documents[i].id,
                           metadata={**documents[i].metadata, **added})
                for i, added in self._rerank(query, docs)]


__all__ = ["IntentrankReranker", "IntentrankRetriever"]
