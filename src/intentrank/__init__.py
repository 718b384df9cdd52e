"""intentrank: intent-aware retrieval and reranking for RAG."""

__version__ = "0.1.0"
