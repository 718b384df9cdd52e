"""The LLM runtime: one chat interface, an embedded llama.cpp backend and an OpenAI-compatible
HTTP backend, a cached and retrying client and output parsers (the stages that use an LLM
live in ``query/``, ``rerank/`` and ``fuse/``).

Backends load lazily: importing this package imports neither xllamacpp nor openai.
"""
