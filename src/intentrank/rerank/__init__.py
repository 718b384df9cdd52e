"""Rerankers: stages that reorder the candidates of each ranking (cross-encoder, LLM listwise,
follow-up-aware, LLM judge, contextual compression)."""

from intentrank.rerank import (  # noqa: F401 (registers the stages)
    compression,
    cross_encoder,
    fuq,
    judge,
    listwise,
)
