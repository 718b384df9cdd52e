"""The one LLM interface: chat messages in, a reply with text and counts out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from intentrank.core.params import ParameterError, check_int, check_number
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


@dataclass(frozen=True)
class ChatParams:
    """How to decode one reply, checked when built (a bad value raises LLMParameterError).

    ``stop``: strings that end the reply (kept as a tuple; empty means none). ``logprobs``:
    how many alternatives of the first generated token to report (0: none). ``json_schema``:
    constrain the reply to JSON matching this schema (structured output); the schema's
    ``title``, if any, names it where the API wants a name.
    """

    max_tokens: int = 256
    temperature: float = 0.0
    stop: Sequence[str] | None = None  # a tuple once built
    logprobs: int = 0
    json_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        try:
            tokens = check_int("LLM max_tokens", self.max_tokens)
            temperature = check_number("LLM temperature", self.temperature, minimum=0)
            logprobs = check_int("LLM logprobs", self.logprobs, minimum=0)
        except ParameterError as exc:
            raise LLMParameterError(str(exc)) from None
        stop = self.stop
        if isinstance(stop, str) or not (stop is None or isinstance(stop, list | tuple)) or \
                not all(isinstance(s, str) for s in stop or ()):
            raise LLMParameterError(f"LLM stop must be a list of strings, got {stop!r}")
        if self.json_schema is not None and not isinstance(self.json_schema, dict):
            raise LLMParameterError(f"LLM json_schema must be a dict, got {self.json_schema!r}")
        for name, value in (("max_tokens", tokens), ("temperature", temperature),
                            ("stop", tuple(stop) if stop else None), ("logprobs", logprobs)):
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        """The parameters as keywords of :func:`~intentrank.llm.cache.cache_key`
        (``json_schema`` only when set)."""
        out: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": self.temperature,
                               "stop": self.stop, "logprobs": self.logprobs}
        if self.json_schema is not None:
            out["json_schema"] = self.json_schema
        return out

    def request(self, messages: list[Message]) -> dict[str, Any]:
        """The chat-completions fields both backends send (``stop`` and ``logprobs`` only when
        set; each backend adds its own form of ``json_schema``)."""
        out: dict[str, Any] = {"messages": messages, "max_tokens": self.max_tokens,
                               "temperature": self.temperature}
        if self.stop:
            out["stop"] = list(self.stop)
        if self.logprobs > 0:
            out.update(logprobs=True, top_logprobs=self.logprobs)
        return out


@runtime_checkable
class LLM(Protocol):
    """Anything that answers chat messages; ``name`` identifies backend and model in caches.

    Backends without structured output keep working for everything else: ``json_schema`` is
    set only by the callers that ask for it.
    """

    name: str

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply: ...


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
