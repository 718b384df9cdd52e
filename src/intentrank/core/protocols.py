"""What stages need from an index and from an LLM client, and what the registry builds, as
protocols (no imports upward, and no circle through the stage module)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from intentrank.types import Document, Ranking, Trace


@runtime_checkable
class IndexLike(Protocol):
    """The parts of :class:`intentrank.index.Index` that stages use."""

    ids: list[str]
    row_of: dict[str, int]

    def __len__(self) -> int: ...

    def doc(self, doc_id: str) -> Document: ...

    def doc_text(self, doc_id: str) -> str: ...

    def encode_queries(self, texts: list[str]) -> Any: ...


@runtime_checkable
class LLMLike(Protocol):
    """The parts of :class:`intentrank.llm.client.LLMClient` that stages use."""

    name: str

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int = 256,
             temperature: float = 0.0, stop: list[str] | None = None, logprobs: int = 0,
             json_schema: dict[str, Any] | None = None, trace: Trace | None = None,
             stage: str = "llm") -> Any: ...

    def chat_many(self, batch: Any, *, on_error: str = "raise", trace: Trace | None = None,
                  stage: str = "llm", **params: Any) -> list[Any]: ...


class StageLike(Protocol):
    """What a registered factory builds: a :class:`~intentrank.core.stage.Stage` (the
    registry names it by this protocol, so the stage module can import the registry)."""

    name: str

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]: ...
