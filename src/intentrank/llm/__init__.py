"""The LLM runtime: one chat interface, an embedded llama.cpp backend and an OpenAI-compatible
HTTP backend, a cached and retrying client and output parsers (the stages that use an LLM
live in ``query/``, ``rerank/`` and ``fuse/``).

Backends load lazily: importing this package imports neither xllamacpp nor openai.
"""

from intentrank.llm.base import LLM, ChatParams, LLMReply, Message, TransientError, user
from intentrank.llm.cache import ReplyCache, cache_key
from intentrank.llm.client import DEFAULT_SPEC, LLMClient, load_llm, make_backend
from intentrank.llm.model_files import DEFAULT_MODEL, REGISTRY, GGUFModel, gguf_path
from intentrank.llm.parsing import (
    Parsed,
    parse_json_array,
    parse_json_object,
    parse_numbered_list,
    parse_yes_no,
)

__all__ = [
    "ChatParams", "DEFAULT_MODEL", "DEFAULT_SPEC", "LLM", "REGISTRY", "GGUFModel", "LLMClient",
    "LLMReply", "LlamaCppLLM", "Message", "OpenAICompatibleLLM", "Parsed", "ReplyCache",
    "TransientError", "cache_key", "gguf_path", "load_llm", "make_backend", "parse_json_array",
    "parse_json_object", "parse_numbered_list", "parse_yes_no", "user",
]


def __getattr__(name: str) -> object:
    """Backends are imported on first access."""
    if name == "LlamaCppLLM":
        from intentrank.llm.embedded import LlamaCppLLM

        return LlamaCppLLM
    if name == "OpenAICompatibleLLM":
        from intentrank.llm.openai_http import OpenAICompatibleLLM

        return OpenAICompatibleLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
