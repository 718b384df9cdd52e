"""Retrieval stages over an index (BM25, dense, TF-IDF, sparse, entity graph, parents)."""

from intentrank.retrieve import parents, retrievers  # noqa: F401 (registers the stages)
