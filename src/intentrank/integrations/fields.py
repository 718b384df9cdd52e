"""What both adapters' rerankers are made of: the pydantic fields the frameworks' reranker
bases (themselves pydantic models) take, and the passages and metadata around the shared
:class:`~intentrank.integrations.common.PassageReranker`. Imported by an adapter only: it
needs pydantic, which each framework brings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from intentrank.integrations.common import PassageReranker
from intentrank.types import Document


class RerankerFields(BaseModel):
    """``pipeline``, ``index``, ``top_n``, ``title_key`` and ``resources`` (the adapters'
    docstrings say what each is), and the :class:`PassageReranker` built from them."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: Any = "cross_encoder"
    index: Any = None
    top_n: int | None = None
    title_key: str | None = "title"
    resources: dict[str, Any] = {}
    _reranker: PassageReranker = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._reranker = PassageReranker(self.pipeline, self.index, **self.resources)

    def _passage(self, meta: Mapping[str, Any], own_id: str | None, text: str) -> Document:
        """A passage to rerank: its doc id from the metadata's ``doc_id`` (else the
        framework's own id), its title from ``title_key``."""
        title = str(meta.get(self.title_key) or "") if self.title_key else ""
        return Document(str(meta.get("doc_id") or own_id or ""), text, title)

    def _rerank(self, query: str, docs: list[Document]) -> list[tuple[int, dict[str, Any]]]:
        """(position in ``docs``, the metadata to add: ``score``, ``rank``, ``stage_scores``)
        for each passage kept, best first."""
        return [(i, {"score": float(scored.score), "rank": rank,
                     "stage_scores": dict(scored.stage_scores)})
                for rank, (i, scored) in enumerate(self._reranker.rerank(query, docs,
                                                                         self.top_n), 1)]
