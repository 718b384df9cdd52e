"""Wraps any LLM backend with a reply cache, retries with backoff, a concurrency limit and
Trace counts.

Counters (under the caller's ``stage``): ``llm_calls`` backend calls made (retries included),
``llm_cache_hits`` (and ``llm_cached_seconds``, what those replies took when generated),
``prompt_tokens``, ``completion_tokens``, ``llm_seconds`` (backend wall time, not counting
time queued for a concurrency slot or for a serial backend), ``llm_errors`` failed backend
calls, ``llm_retries`` calls after the first of a request and ``llm_failed`` requests that
failed for good.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from intentrank.core.params import ParameterError, check_int, check_number
from intentrank.errors import ModelError
from intentrank.llm.base import (
    LLM,
    ChatParams,
    LLMParameterError,
    LLMReply,
    Message,
    TransientError,
    check_timeout,
)
from intentrank.llm.cache import ReplyCache, cache_key
from intentrank.types import Trace

DEFAULT_SPEC = "embedded"
MAX_RETRY_AFTER = 30.0


_RETRYABLE = (TransientError, TimeoutError, ConnectionResetError)


class LLMClient:
    """A cached, retrying, concurrency-limited front to one :class:`LLM` backend.

    ``cache``: a :class:`ReplyCache`, a path to its SQLite file, True for the default one in
    ``cache_dir()/llm_cache.sqlite``, or None/False for none. ``timeout`` (seconds per call) is
    handed to backends that have a ``timeout`` attribute (the HTTP backend); the in-process
    backend cannot be interrupted. Retries wait ``backoff * 2**i`` seconds, or at least the
    ``retry_after`` a retryable error carries (an HTTP ``Retry-After``); a server that asks
    for more than ``max_retry_after`` seconds is not retried (the request fails at once).
    """

    def __init__(
        self,
        llm: LLM,
        cache: ReplyCache | str | Path | bool | None = True,
        retries: int = 2,
        backoff: float = 0.5,
        timeout: float | None = None,
        max_concurrency: int = 4,
        sleep: Callable[[float], None] = time.sleep,
        max_retry_after: float = MAX_RETRY_AFTER,
    ) -> None:
        try:
            retries = check_int("LLM retries", retries, minimum=0)
            max_concurrency = check_int("LLM max_concurrency", max_concurrency)
            backoff = check_number("LLM backoff (seconds)", backoff, minimum=0)
            max_retry_after = check_number("LLM max_retry_after (seconds)", max_retry_after,
                                           minimum=0)
        except ParameterError as exc:
            raise LLMParameterError(str(exc)) from None
        if timeout is not None:
            timeout = check_timeout(timeout)
        self.llm = llm
        if cache is True:
            cache = ReplyCache()
        elif isinstance(cache, str | Path):
            cache = ReplyCache(cache)
        self.cache: ReplyCache | None = cache if isinstance(cache, ReplyCache) else None
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.max_concurrency = max_concurrency
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._trace_lock = threading.Lock()
        if timeout is not None and hasattr(llm, "timeout"):
            llm.timeout = timeout  # type: ignore[attr-defined]

    @property
    def name(self) -> str:
        return self.llm.name

    @property
    def model(self) -> str:
        return str(getattr(self.llm, "model", self.llm.name))

    def _count(self, trace: Trace | None, stage: str, **counts: float) -> None:
        if trace is None:
            return
        with self._trace_lock:
            for counter, amount in counts.items():
                trace.count(stage, counter, amount)

    def _log(self, trace: Trace | None, stage: str, event: str, **details: Any) -> None:
        if trace is not None:
            with self._trace_lock:
                trace.log(stage, event, **details)

    def chat(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        logprobs: int = 0,
        json_schema: dict[str, Any] | None = None,
        trace: Trace | None = None,
        stage: str = "llm",
    ) -> LLMReply:
        """A reply from the cache or the backend; raises ModelError when every attempt fails
        (LLMParameterError, at once, for a bad decoding parameter).

        ``json_schema`` asks for structured output (constrained decoding); it is handed to
        the backend, and enters the cache key, only when set."""
        params = ChatParams(max_tokens=max_tokens, temperature=temperature, stop=stop,
                            logprobs=logprobs, json_schema=json_schema)
        return self._chat(messages, params, trace, stage)

    def _chat(self, messages: list[Message], params: ChatParams, trace: Trace | None,
              stage: str) -> LLMReply:
        key = cache_key(self.name, self.model, messages, **params.as_dict())
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            # what the reply cost when it was generated: cold-run latency stays reportable
            self._count(trace, stage, llm_cache_hits=1,
                        llm_cached_seconds=float(hit.raw.get("original_seconds") or 0.0))
            return hit
        last: Exception | None = None
        wait_at_least = 0.0
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(max(self.backoff * 2 ** (attempt - 1), wait_at_least))
                self._count(trace, stage, llm_retries=1)
            start = time.perf_counter()
            try:
                with self._slots:
                    start = time.perf_counter()  # waiting for a slot is not backend time
                    reply = self.llm.chat(messages, params)
            except Exception as exc:
                self._count(trace, stage, llm_calls=1, llm_errors=1,
                            llm_seconds=time.perf_counter() - start)
                if isinstance(exc, ModelError) and not isinstance(exc, _RETRYABLE):
                    raise
                if not isinstance(exc, _RETRYABLE):  # an unexpected backend bug: do not retry
                    raise ModelError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
                last = exc
                self._log(trace, stage, "llm_retryable_error", attempt=attempt, reason=str(exc))
                wait_at_least = getattr(exc, "retry_after", None) or 0.0  # Retry-After
                if wait_at_least > self.max_retry_after and attempt < self.retries:
                    raise ModelError(
                        f"{self.name}: the server asked to retry after {wait_at_least:g} s, "
                        f"more than max_retry_after={self.max_retry_after:g} s; giving up: "
                        f"{str(exc).removeprefix(f'{self.name}: ')}") from exc
                continue
            # the backend's own measure when it has one: a serial backend (the embedded one)
            # leaves out the time a call of a concurrent batch queued for it
            seconds = reply.seconds = reply.seconds or time.perf_counter() - start
            self._count(trace, stage, llm_calls=1, llm_seconds=seconds,
                        prompt_tokens=reply.prompt_tokens,
                        completion_tokens=reply.completion_tokens)
            if self.cache is not None:
                self.cache.put(key, reply, self.name, self.model)
            return reply
        reason = str(last).removeprefix(f"{self.name}: ")  # the backend names itself too
        raise ModelError(
            f"{self.name}: failed after {self.retries + 1} attempt(s): {reason}"
        ) from last

    def complete_or_none(
        self, messages: list[Message], *, trace: Trace | None = None, stage: str = "llm",
        **params: Any,
    ) -> LLMReply | None:
        """Like :meth:`chat`, but a failure returns None, counted and logged as ``llm_failed``."""
        return self._complete_or_none(messages, ChatParams(**params), trace, stage)

    def _complete_or_none(self, messages: list[Message], params: ChatParams,
                          trace: Trace | None, stage: str) -> LLMReply | None:
        try:
            return self._chat(messages, params, trace, stage)
        except ModelError as exc:
            self._count(trace, stage, llm_failed=1)
            self._log(trace, stage, "llm_failed", reason=str(exc))
            return None

    def chat_many(
        self,
        batch: Sequence[list[Message]],
        *,
        on_error: str = "raise",
        trace: Trace | None = None,
        stage: str = "llm",
        **params: Any,
    ) -> list[LLMReply | None]:
        """Replies in input order, at most ``max_concurrency`` at once.

        ``on_error="raise"`` re-raises the first failure (after all finish); ``"none"`` puts
        None in its place (counted and logged like :meth:`complete_or_none`).
        """
        if on_error not in ("raise", "none"):
            raise ModelError(f"on_error must be 'raise' or 'none', got {on_error!r}")
        checked = ChatParams(**params)  # a bad value fails once, before any call
        call = self._complete_or_none if on_error == "none" else self._chat
        if len(batch) <= 1 or self.max_concurrency == 1:
            return [call(m, checked, trace, stage) for m in batch]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batch))) as pool:
            futures = [pool.submit(call, m, checked, trace, stage) for m in batch]
            return [f.result() for f in futures]


_OPENAI = re.compile(r"^openai:(?P<model>[^@]+?)(?:@(?P<url>https?://\S+))?$")


def check_spec(spec: Any) -> str:
    """The spec, stripped, if its syntax is right (nothing is loaded or contacted)."""
    if not isinstance(spec, str):
        raise LLMParameterError(f"an LLM spec must be a string, got {spec!r}")
    spec = spec.strip()
    if spec.startswith("openai:") and not _OPENAI.match(spec):
        raise LLMParameterError(f"bad LLM spec {spec!r}: expected openai:<model>@<base_url> "
                                f"with an http(s) URL, e.g. "
                                f"openai:qwen2.5@http://127.0.0.1:8000/v1")
    if spec.startswith("llamacpp:") and not spec.removeprefix("llamacpp:").strip():
        raise LLMParameterError(f"bad LLM spec {spec!r}: expected llamacpp:<name or .gguf>")
    return spec


def make_backend(spec: str = DEFAULT_SPEC, **backend_kwargs: Any) -> LLM:
    """The raw backend named by ``spec`` (see :func:`load_llm`)."""
    spec = check_spec(spec)
    if spec.startswith("openai:"):
        from intentrank.llm.openai_http import DEFAULT_BASE_URL, OpenAICompatibleLLM

        m = _OPENAI.match(spec)
        assert m is not None  # checked above
        return OpenAICompatibleLLM(m["url"] or DEFAULT_BASE_URL, m["model"], **backend_kwargs)
    from intentrank.llm.embedded import LlamaCppLLM
    from intentrank.llm.model_files import DEFAULT_MODEL
    from intentrank.llm.roles import EMBEDDED

    # the default model, else a registry name or a .gguf path (with or without the prefix)
    model = DEFAULT_MODEL if spec in EMBEDDED else spec.removeprefix("llamacpp:")
    return LlamaCppLLM(model, **backend_kwargs)


def load_llm(spec: str = DEFAULT_SPEC, **client_kwargs: Any) -> LLMClient:
    """An :class:`LLMClient` for a backend spec.

    Grammar::

        embedded | llamacpp            the default embedded model (qwen2.5-coder-0.5b)
        llamacpp:<name>                a registry model (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b)
        llamacpp:<path.gguf> | <path.gguf> | <name>   the same, without the prefix
        openai:<model>@<base_url>      an OpenAI-compatible server (vLLM, Ollama, llama.cpp
                                       server, OpenAI), e.g. openai:qwen2.5@http://127.0.0.1:8000/v1;
                                       the key comes from $OPENAI_API_KEY (optional on localhost)
        openai:<model>                 the same at $OPENAI_BASE_URL or api.openai.com

    ``client_kwargs`` go to :class:`LLMClient` (cache, retries, backoff, timeout, ...).
    """
    return LLMClient(make_backend(spec), **client_kwargs)
