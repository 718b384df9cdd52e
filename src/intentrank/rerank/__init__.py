"""Rerankers: stages that reorder the candidates of each ranking."""
