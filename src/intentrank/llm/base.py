"""The one LLM interface: chat messages in, a reply with text and counts out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


@dataclass
class LLMReply:
    """Text of one completion plus what it cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cached: bool = False
    # {token: logprob} of the first generated position, when the backend exposes it
    top_logprobs: dict[str, float] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class LLM(Protocol):
    """Anything that answers chat messages; ``name`` identifies backend and model in caches."""

    name: str

    def chat(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        logprobs: int = 0,
    ) -> LLMReply: ...


def user(content: str, system: str | None = None) -> list[Message]:
    """Messages for a single-turn prompt."""
    msgs = [{"role": "system", "content": system}] if system else []
    return [*msgs, {"role": "user", "content": content}]
