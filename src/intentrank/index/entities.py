"""Regex entities (capitalised phrases and numbers) and the document entity graph."""

from __future__ import annotations

import re
from collections.abc import Sequence

import networkx as nx
import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

_CAPITALISED = re.compile(r"\b[A-Z][\w\-]*(?:\s+[A-Z][\w\-]*)*\b")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?%?")


def extract_entities(text: str) -> set[str]:
    """Capitalised phrases and numbers, lower-cased; leading stopwords ("The ...") are cut."""
    found = {m.group(0) for m in _NUMBER.finditer(text)}
    for m in _CAPITALISED.finditer(text):
        words = m.group(0).lower().split()
        while words and words[0] in ENGLISH_STOP_WORDS:
            words.pop(0)
        if words:
            found.add(" ".join(words))
    return found


def build_entity_graph(
    entities: Sequence[set[str]], window: int = 50, min_shared: int = 2
) -> nx.Graph:
    """Link document i to each of the next ``window`` documents sharing >= ``min_shared``
    entities; the edge weight is the number of shared entities."""
    graph = nx.Graph()
    graph.add_nodes_from(range(len(entities)))
    for i, ents in enumerate(entities):
        if len(ents) < min_shared:
            continue
        for j in range(i + 1, min(i + 1 + window, len(entities))):
            shared = len(ents & entities[j])
            if shared >= min_shared:
                graph.add_edge(i, j, weight=shared)
    return graph


def pagerank(graph: nx.Graph, damping: float = 0.85) -> np.ndarray:
    """PageRank of every node (0..n-1), weighted by shared-entity counts."""
    n = graph.number_of_nodes()
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    pr = nx.pagerank(graph, alpha=damping, weight="weight")
    return np.array([pr[i] for i in range(n)], dtype=np.float64)
