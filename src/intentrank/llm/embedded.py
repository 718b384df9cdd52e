"""The embedded backend: llama.cpp in-process through ``xllamacpp``.

Loading costs seconds, so one server per (model file, settings) is kept for the life of the
process. llama.cpp keeps the KV cache of the previous prompt (``cache_prompt``, on by default)
and reuses its longest common prefix, so prompts that share a leading system text and query
only pay for their differing tail. Note: ``xllamacpp.Server`` also listens on a random
127.0.0.1 port (``listening_address``); the calls here stay in-process.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

from intentrank.errors import ModelError
from intentrank.extras import require
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.model_files import DEFAULT_MODEL, REGISTRY, gguf_path

_SERVERS: dict[tuple[Any, ...], Any] = {}
_LOAD_LOCK = threading.Lock()


def _server(path: Path, n_ctx: int, n_threads: int, seed: int, poll: int) -> Any:
    key = (str(path), n_ctx, n_threads, seed, poll)
    with _LOAD_LOCK:
        if key not in _SERVERS:
            xlc = require("xllamacpp", "llm", "the embedded LLM")
            p = xlc.CommonParams()
            p.model.path = str(path)
            p.n_ctx = n_ctx
            p.n_parallel = 1
            for cpu in (p.cpuparams, p.cpuparams_batch):
                cpu.n_threads = n_threads
                cpu.poll = poll  # 0: idle threads sleep instead of spinning (shared CPUs)
            p.sampling.temp = 0
            p.sampling.top_k = 1
            p.sampling.seed = seed
            p.warmup = False
            p.verbosity = -1
            try:
                _SERVERS[key] = xlc.Server(p)
            except Exception as exc:
                raise ModelError(f"llama.cpp cannot load {path}: {exc}") from exc
        return _SERVERS[key]


def first_top_logprobs(choice: dict[str, Any]) -> dict[str, float]:
    """``{token: logprob}`` at the first generated position of an OpenAI-style choice.

    Tokens with the same text (different ids) are merged with log-sum-exp.
    """
    content = (choice.get("logprobs") or {}).get("content") or []
    if not content:
        return {}
    out: dict[str, float] = {}
    for alt in content[0].get("top_logprobs") or []:
        token, lp = alt.get("token"), alt.get("logprob")
        if token is None or lp is None:
            continue
        out[token] = float(lp) if token not in out else float(
            max(out[token], lp) + math.log1p(math.exp(-abs(out[token] - lp)))
        )
    return out


class LlamaCppLLM:
    """A GGUF model run by llama.cpp in this process (greedy by default).

    ``model`` is a registry name (see :data:`model_files.REGISTRY`) or a .gguf path. The model
    loads on the first call. Calls are serialised: one llama.cpp slot.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        n_ctx: int = 4096,
        n_threads: int = 2,
        seed: int = 0,
        poll: int = 0,
    ) -> None:
        require("xllamacpp", "llm", "the embedded LLM")  # fail when the pipeline is built
        self.n_ctx, self.n_threads, self.seed, self.poll = n_ctx, n_threads, seed, poll
        if model in REGISTRY:
            self.model, self._path = model, None
            self.name = f"llamacpp:{model}"
        else:
            self._path = path = gguf_path(model)
            self.model = f"{path.resolve()}#{path.stat().st_size}"
            self.name = f"llamacpp:{path.name}"
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = gguf_path(self.model)
        return self._path

    def load(self) -> float:
        """Load the model now (once per process); returns the seconds it took."""
        start = time.perf_counter()
        _server(self.path, self.n_ctx, self.n_threads, self.seed, self.poll)
        return time.perf_counter() - start

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible endpoint the loaded server also answers on (127.0.0.1)."""
        server = _server(self.path, self.n_ctx, self.n_threads, self.seed, self.poll)
        return f"{server.listening_address}/v1"

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        server = _server(self.path, self.n_ctx, self.n_threads, self.seed, self.poll)
        request = {**params.request(messages), "seed": self.seed, "cache_prompt": True}
        if params.json_schema is not None:  # llama.cpp: a grammar, constrained decoding
            request["json_schema"] = dict(params.json_schema)
        try:
            with self._lock:  # time spent waiting for the one slot is not this call's
                start = time.perf_counter()
                out = server.handle_chat_completions(request)
                seconds = time.perf_counter() - start
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"{self.name}: bad request: {exc}") from exc
        if not isinstance(out, dict) or "error" in out or not out.get("choices"):
            err = out.get("error", out) if isinstance(out, dict) else out
            message = err.get("message", err) if isinstance(err, dict) else err
            raise ModelError(f"{self.name}: {message}")
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return LLMReply(
            text=(choice.get("message") or {}).get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            seconds=seconds,
            top_logprobs=first_top_logprobs(choice) if params.logprobs > 0 else {},
            raw={"usage": usage, "timings": out.get("timings", {}),
                 "finish_reason": choice.get("finish_reason")},
        )
