"""The service over a cluster index (shards on Ray actors, service/cluster.py) on a real
local Ray cluster (a head and two worker nodes on 127.0.0.1) with real Cranfield abstracts:
/health shows its shards, replicas, hosts and full replication; POST /documents and the
deletes reach every owning shard and later requests read the new commit while a request
holding the old snapshot finishes on it; a commit made outside the service (another writer
of the same shard directories) is followed within the watch interval.

Marked ``ray`` and ``slow``: one Ray cluster for the module."""

from __future__ import annotations

import itertools
import time

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SHARDS, DOCS, WATCH_S = 2, 200, 0.5


@pytest.fixture(scope="module")
def served(cranfield, tmp_path_factory):
    from fastapi.testclient import TestClient

    from intentrank.index import IndexSettings, build_index
    from intentrank.scale.cluster import LocalCluster
    from intentrank.scale.coordinator import ClusterIndex
    from intentrank.scale.shardset import build_cluster
    from intentrank.service import create_app
    from intentrank.service.settings import ServiceSettings

    root = tmp_path_factory.mktemp("clsvc")
    docs = list(itertools.islice(cranfield.corpus(), DOCS))
    build_cluster(docs, root / "cl", SHARDS, IndexSettings(legs=("bm25",)))
    build_index(docs, root / "single", IndexSettings(legs=("bm25",))).close()
    with LocalCluster(workers=2, cpus_per_node=1):
        cluster = ClusterIndex.open(root / "cl", hedge_s=1.0, timeout_s=30.0)
        app = create_app(ServiceSettings(
            indexes={"c": cluster}, pipelines={"bm25": "bm25"}, rerankers={},
            require_keys=False, workers=2, access_log=False, watch_s=WATCH_S))
        with TestClient(app) as client:
            yield client, app.state.engine, root / "single"
        cluster.close()


QUERIES = ("boundary layer transition", "supersonic flow past a cone", "heat transfer",
           "ornithopter flapping membrane wing")


def _same_as_one_index(client, single) -> None:
    """/search over the cluster gives the ids and scores of one index with the same writes."""
    from intentrank.index import Index

    with Index(single) as one:
        for q in QUERIES:
            hits = one.search_bm25([q], 10)[0]
            want = [(one.ids[r], s) for r, s in zip(hits.rows.tolist(), hits.scores.tolist(),
                                                    strict=True)]
            r = client.post("/search", json={"query": q, "pipeline": "bm25", "top_k": 10})
            got = [(x["doc_id"], x["score"]) for x in r.json()["results"]]
            assert [g[0] for g in got] == [w[0] for w in want], q
            assert [g[1] for g in got] == pytest.approx([w[1] for w in want], rel=1e-6), q


def _top(client, text: str, k: int = 3) -> tuple[list[str], str]:
    r = client.post("/search", json={"query": text, "pipeline": "bm25", "top_k": k})
    assert r.status_code == 200, r.text
    return [x["doc_id"] for x in r.json()["results"]], r.json()["generation"]


def test_health_shows_shards_replicas_hosts_and_full_replication(served):
    client, engine, _ = served
    state = client.get("/health").json()["clusters"]["c"]
    assert state["shards"] == SHARDS and state["replication"] == "full"
    assert state["generation"] == engine.indexes["c"].generation
    reps = state["replicas"]
    assert sorted((r["shard"], r["replica"]) for r in reps) == \
        [(s, r) for s in range(SHARDS) for r in range(2)]
    assert all(r["state"] == "up" for r in reps)
    assert sum(r["documents"] for r in reps) == 2 * DOCS  # each document on two replicas
    alive = {h["host"] for h in state["hosts"] if h["alive"]}
    assert len(state["hosts"]) == 3 and all(r["host"] in alive for r in reps)


def test_writes_reach_the_cluster_and_later_requests_read_them(served):
    from intentrank.index.update import delete, upsert
    from intentrank.types import Document

    client, engine, single = served
    text = "ornithopter flapping membrane wing aeroelastic hummingbird"
    before, gen0 = _top(client, text)
    assert "x-new" not in before
    with engine.generations.use() as old:  # a request running across the write
        r = client.post("/documents", json={"index": "c", "documents": [
            {"id": "x-new", "text": text, "title": "a new one"}]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["added"] == 1 and body["generation"] != gen0
        hits = old.indexes["c"].search_bm25([text], 3)[0]
        assert "x-new" not in [old.indexes["c"].ids[i] for i in hits.rows.tolist()]
    after, gen1 = _top(client, text)
    assert after[0] == "x-new" and gen1 == body["generation"]
    upsert(single, [Document("x-new", text, "a new one")])
    _same_as_one_index(client, single)
    assert client.get("/health").json()["generations"]["c"] == gen1

    r = client.delete("/documents/x-new", params={"index": "c"})
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] == 1
    gone, gen2 = _top(client, text)
    assert "x-new" not in gone and gen2 not in (gen0, gen1)
    delete(single, ["x-new"])
    _same_as_one_index(client, single)
    assert client.delete("/documents/x-new").status_code == 404


def test_a_commit_from_another_writer_is_followed(served):
    from intentrank.types import Document

    client, engine, _ = served
    text = "zeppelin mooring mast gust loads on a rigid airship envelope"
    assert "x-other" not in _top(client, text)[0]
    served_view = engine.indexes["c"]
    other = served_view.upsert([Document("x-other", text)])  # not through the service
    deadline = time.monotonic() + 20 * WATCH_S + 30
    while engine.indexes["c"].generation != other.generation:
        assert time.monotonic() < deadline, "the service did not follow the commit"
        time.sleep(WATCH_S / 2)
    hits, gen = _top(client, text)
    assert hits[0] == "x-other" and gen == other.generation
