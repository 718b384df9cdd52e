"""The adapters' rerankers' shared pydantic fields and :class:`PassageReranker` calls (an
adapter's import only: pydantic comes with each framework)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from intentrank.integrations.common import PassageReranker
from intentrank.types import Document


class RerankerFields(BaseModel):
    """The adapters' reranker fields, and the :class:`PassageReranker` they build.

    ``pipeline``: a config node (default ``cross_encoder``, the bundled int8 cross-encoder),
    a YAML file or shipped config whose pipeline reranks, a function from a candidate index
    to a Stage, or a built Stage (which reads its own index: each document or node must
    carry its ``doc_id`` in its metadata). ``top_n``: how many to keep (all that the
    pipeline returns when None). ``title_key``: the metadata field read as the title (the
    reranker sees title and text, as for an indexed document). ``index``: encodes queries
    for rerankers that need embeddings."""

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
        """A passage: id from the metadata's ``doc_id`` or ``own_id``, title ``title_key``."""
        title = str(meta.get(self.title_key) or "") if self.title_key else ""
        return Document(str(meta.get("doc_id") or own_id or ""), text, title)

    def _rerank(self, query: str, docs: list[Document]) -> list[tuple[int, dict[str, Any]]]:
        """(position in ``docs``, ``score``/``rank``/``stage_scores`` to add), best first."""
        return [(i, {"score": float(scored.score), "rank": rank,
                     "stage_scores": dict(scored.stage_scores)})
                for rank, (i, scored) in enumerate(self._reranker.rerank(query, docs,
                                                                         self.top_n), 1)]
