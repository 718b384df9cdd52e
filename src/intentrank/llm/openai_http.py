"""An OpenAI-compatible chat-completions backend (vLLM, Ollama, llama.cpp server, OpenAI).

The ``openai`` client runs with ``max_retries=0``: :class:`~intentrank.llm.client.LLMClient`
retries. Timeouts, 408/409/429 and 5xx raise :class:`TransientError` (retried); a refused
connection, a rejected key, an unknown model and a malformed reply raise :class:`ModelError`
at once with one message.
"""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from intentrank.errors import ModelError
from intentrank.extras import require
from intentrank.llm.base import ChatParams, LLMReply, Message, TransientError, check_timeout
from intentrank.llm.embedded import first_top_logprobs

DEFAULT_BASE_URL = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
_RETRY_STATUS = {408, 409, 429}


class OpenAICompatibleLLM:
    """Chat completions over HTTP; the API key is read from ``$api_key_env``.

    A missing key is fine for a localhost server (a dummy is sent). ``timeout`` is per call.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
    ) -> None:
        openai = require("openai", "llm", "the OpenAI-compatible LLM backend")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self._timeout = check_timeout(timeout)
        self.name = f"openai:{model}@{self.base_url}"
        key = os.environ.get(api_key_env)
        if not key:
            if (urlparse(self.base_url).hostname or "") not in _LOCAL_HOSTS:
                raise ModelError(f"no API key for {self.base_url}: set ${api_key_env}")
            key = "sk-no-key-needed"
        self._openai = openai
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0,
                                     timeout=timeout)

    @property
    def timeout(self) -> float:
        """Seconds per call (a finite number > 0; checked when set)."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._timeout = check_timeout(value)

    def _error(self, exc: Exception) -> ModelError:
        """Map an openai exception to a retryable or a final error."""
        o = self._openai
        where = f"{self.name}"
        if isinstance(exc, o.APITimeoutError):
            return TransientError(f"{where}: no reply within {self.timeout:g} s (timeout)")
        if isinstance(exc, o.APIConnectionError):
            if _connect_failed(exc):
                return ModelError(f"cannot connect to {self.base_url} ({exc.__cause__}): "
                                  f"is the server running and the URL right?")
            return TransientError(f"{where}: connection failed: {exc.__cause__ or exc}")
        if isinstance(exc, o.AuthenticationError | o.PermissionDeniedError):
            return ModelError(f"{self.base_url} rejected the API key (HTTP {exc.status_code}): "
                              f"set ${self.api_key_env} to a valid key")
        if isinstance(exc, o.APIStatusError):
            detail = str(getattr(exc, "message", exc))[:300]
            if exc.status_code in _RETRY_STATUS or exc.status_code >= 500:
                wait = _retry_after_seconds(getattr(exc, "response", None))
                said = f" (Retry-After: {wait:g} s)" if wait is not None else ""
                return TransientError(f"{where}: HTTP {exc.status_code}{said}: {detail}", wait)
            hint = " (unknown model or wrong base_url?)" if exc.status_code == 404 else ""
            return ModelError(f"{where}: HTTP {exc.status_code}{hint}: {detail}")
        if isinstance(exc, o.APIResponseValidationError):
            return ModelError(f"{where}: malformed reply: {exc}")
        return ModelError(f"{where}: {type(exc).__name__}: {exc}")

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        kwargs = {**params.request(messages), "model": self.model, "timeout": self.timeout}
        if params.json_schema is not None:
            kwargs["response_format"] = response_format(params.json_schema)
        start = time.perf_counter()
        try:
            resp = self._client.chat.completions.create(**kwargs)
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from exc
        except ValueError as exc:  # json.JSONDecodeError: a body that is not JSON
            raise ModelError(f"{self.name}: malformed JSON in the reply ({exc}); is base_url "
                             f"an OpenAI-compatible endpoint?") from exc
        seconds = time.perf_counter() - start
        data = _as_dict(resp)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            body = str(resp)[:200]
            raise ModelError(f"{self.name}: malformed reply (no choices; is base_url right? "
                             f"it usually ends in /v1): {body!r}")
        choice = choices[0]
        message = choice.get("message") or {}
        text = message.get("content") if isinstance(message, dict) else None
        if text is not None and not isinstance(text, str):
            raise ModelError(f"{self.name}: malformed reply (the message content is "
                             f"{type(text).__name__}, not text): {str(text)[:200]!r}")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return LLMReply(
            text=text or "",
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            seconds=seconds,
            top_logprobs=first_top_logprobs(choice) if params.logprobs > 0 else {},
            raw={"usage": usage, "finish_reason": choice.get("finish_reason"),
                 "model": data.get("model"), "timings": data.get("timings") or {}},
        )


def response_format(json_schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` of a structured-output request: the schema under a name (its
    ``title``, reduced to the characters the API allows, else ``reply``)."""
    title = re.sub(r"[^A-Za-z0-9_-]+", "_", str(json_schema.get("title") or ""))[:64]
    return {"type": "json_schema",
            "json_schema": {"name": title.strip("_") or "reply", "schema": dict(json_schema)}}


def _connect_failed(exc: Exception) -> bool:
    """True when the TCP connection itself failed (refused, unknown host): not worth retrying.

    Checked by class name: the HTTP library behind ``openai`` varies (httpx, httpx2).
    """
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) or any(
            cls.__name__ == "ConnectError" for cls in type(cause).__mro__
        ):
            return True
        cause = cause.__cause__
    return False


def _count(value: Any) -> int:
    """A token count from a reply's usage block; anything that is not a count is 0."""
    try:
        n = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(n, 0)


def _retry_after_seconds(response: Any) -> float | None:
    """Seconds from a ``Retry-After`` header (a number or an HTTP date), if there is one."""
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return max(seconds, 0.0)


def _as_dict(resp: Any) -> Any:
    """The response as plain data (a string for non-JSON bodies); a malformed field is
    reported by chat(), not as a pydantic warning."""
    return resp.model_dump(warnings=False) if hasattr(resp, "model_dump") else resp
