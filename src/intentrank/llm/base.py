"""The one LLM interface: chat messages in, a reply with text and counts out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from intentrank.core.params import ParameterError, check_number
from intentrank.errors import ModelError

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
    """Anything that answers chat messages; ``name`` identifies backend and model in caches.

    ``json_schema``: constrain the reply to JSON matching this schema (structured output);
    the schema's ``title``, if any, names it where the API wants a name. Callers pass it only
    when set, so backends without structured output keep working for everything else.
    """

    name: str

    def chat(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        logprobs: int = 0,
        json_schema: dict[str, Any] | None = None,
    ) -> LLMReply: ...


def user(content: str, system: str | None = None) -> list[Message]:
    """Messages for a single-turn prompt."""
    msgs = [{"role": "system", "content": system}] if system else []
    return [*msgs, {"role": "user", "content": content}]


class TransientError(ModelError):
    """A failure worth retrying: a timeout, an overloaded (429) or failing (5xx) server.

    ``retry_after``: seconds the server asked to wait (``Retry-After``), if it said."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMParameterError(ParameterError, ModelError):
    """A client or backend setting out of range (a ConfigError, ModelError and ValueError)."""


def check_timeout(timeout: Any) -> float:
    """Seconds per LLM call: a finite number > 0."""
    try:
        return check_number("LLM timeout (seconds)", timeout, above=0)
    except ParameterError as exc:
        raise LLMParameterError(str(exc)) from None
