"""The entity graph over segments (index/graph_segments.py, entities.window_edges): the edges
equal the pairwise loop a build used to run, on real SciFact entities, for several windows and
thresholds and across row blocks; a reader of the next commit reuses the segments' entities
a reader of this process already numbered; scores equal a fresh build's."""

from __future__ import annotations

import numpy as np
import pytest
from test_index_update import QUERIES, abstracts_with_years, assert_same_as_fresh

from intentrank.index import IndexSettings, build_index, entities
from intentrank.index.entities import entity_edges, extract_entities
from intentrank.index.store import Index
from intentrank.index.update import delete, upsert

GRAPH = IndexSettings(legs=("graph",))


@pytest.fixture(scope="module")
def scifact():
    return abstracts_with_years()


def pairwise(ents: list[set[str]], window: int, min_shared: int) -> np.ndarray:
    """The edges as the build computed them before: every pair within the window."""
    out = []
    for i, mine in enumerate(ents):
        if len(mine) < min_shared:
            continue
        for j in range(i + 1, min(i + 1 + window, len(ents))):
            shared = len(mine & ents[j])
            if shared >= min_shared:
                out.append((i, j, shared))
    return np.array(out, dtype=np.int64).reshape(-1, 3)


@pytest.mark.parametrize(("window", "min_shared"), [(50, 2), (1, 1), (7, 3), (300, 1)])
def test_edges_equal_the_pairwise_loop(scifact, window, min_shared, monkeypatch):
    ents = [extract_entities(d.text) for d in scifact]
    want = pairwise(ents, window, min_shared)
    assert len(want) > 0
    assert np.array_equal(entity_edges(ents, window, min_shared), want)
    monkeypatch.setattr(entities, "EDGE_BLOCK_ROWS", 37)  # pairs across row blocks
    assert np.array_equal(entity_edges(ents, window, min_shared), want)
    assert entity_edges([], window, min_shared).shape == (0, 3)


def test_graph_over_segments_and_deletes_equals_a_fresh_build(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:80], path, GRAPH).close()
    upsert(path, scifact[80:120], merge_policy=False)
    with Index(path) as first:
        first.search_graph(QUERIES, 5)
        held = first.__dict__["graph"]
        delete(path, [scifact[3].id, scifact[90].id])
        upsert(path, scifact[120:130], merge_policy=False)
        with Index(path) as second:
            assert len(second.segments) == 3 and second.rows_deleted == 2
            assert second.graph[1].shape == (128,) and held[1].shape == (120,)
            mine, before = (i.__dict__["_graph_segments"] for i in (second, first))
            assert mine[0] is before[0] and mine[1] is before[1] and mine[2] not in before
    assert_same_as_fresh(path, tmp_path, GRAPH)
