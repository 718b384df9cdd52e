"""A cluster index (scale/coordinator.py) on a real local Ray cluster (a head and two worker
nodes on 127.0.0.1): real Cranfield, shards by id hash on Ray actors, two replicas each on
different nodes. Its results equal one index of the same corpus: the same ids, ranks and
scores (BM25 bit for bit, dense within float32), through the retrievers, fusion and the
service; filters; a replica killed mid-stream (answered by the other, counted in /metrics,
parsed by prometheus_client's own parser); a stopped replica (SIGSTOP) bypassed within
the hedge delay; an update reaching every replica while a pinned view keeps its commit.

Marked ``ray`` and ``slow``: one Ray cluster for the module (~15 s to start here)."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
from tolerances import F32_REL

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SHARDS = 3
DENSE_DOCS = 300  # the dense part encodes this many Cranfield documents (2 cores)


@pytest.fixture(scope="module")
def ray_cluster():
    from intentrank.scale.cluster import LocalCluster

    with LocalCluster(workers=2, cpus_per_node=1) as c:
        yield c


@pytest.fixture(scope="module")
def queries(data_dir) -> list[str]:
    lines = (data_dir / "cranfield" / "queries.jsonl").read_text().splitlines()
    return [json.loads(x)["text"] for x in lines]


@pytest.fixture(scope="module")
def bm25_pair(cranfield, tmp_path_factory, ray_cluster):
    """One BM25 index of Cranfield and the same corpus as a 3-shard cluster on Ray."""
    from intentrank.index import Index, IndexSettings, build_index
    from intentrank.scale.coordinator import ClusterIndex
    from intentrank.scale.shardset import build_cluster

    root = tmp_path_factory.mktemp("cluster")
    s = IndexSettings(legs=("bm25",))
    build_index(cranfield.corpus(), root / "single", s).close()
    build_cluster(cranfield.corpus(), root / "cl", SHARDS, s)
    single = Index(root / "single")
    cluster = ClusterIndex.open(root / "cl", hedge_s=1.0, timeout_s=30.0)
    yield single, cluster
    cluster.close()
    single.close()


def _same(a, b, exact: bool = True) -> None:
    assert a.rows.tolist() == b.rows.tolist()
    if exact:
        assert a.scores.tolist() == b.scores.tolist()
    else:
        np.testing.assert_allclose(a.scores, b.scores, rtol=F32_REL, atol=1e-6)


def test_replicas_of_a_shard_are_on_different_nodes(bm25_pair):
    _, cluster = bm25_pair
    status = cluster.status()
    assert status["replication"] == "full"
    assert len(status["replicas"]) == 2 * SHARDS
    for s in range(SHARDS):
        nodes = [r["node_id"] for r in status["replicas"] if r["shard"] == s]
        assert len(set(nodes)) == 2, status
    assert sum(r["documents"] for r in status["replicas"]) == 2 * len(cluster)


def test_cluster_status_finds_the_served_index(bm25_pair):
    from intentrank.scale.status import describe, find_served

    _, cluster = bm25_pair
    found = [st for st in find_served("auto") if st["index"] == cluster.pool.name]
    assert len(found) == 1 and found[0]["replication"] == "full"
    assert {(r["shard"], r["replica"]) for r in found[0]["replicas"]} == \
        {(s, r) for s in range(SHARDS) for r in range(2)}
    text = describe(found[0])()
    assert "replication full" in text and text.count(" up ") == 2 * SHARDS


def test_bm25_equals_one_index_bit_for_bit(bm25_pair, queries):
    single, cluster = bm25_pair
    for q in queries:  # all 225, one at a time, then a batch
        _same(cluster.search_bm25([q], 100)[0], single.search_bm25([q], 100)[0])
    for a, b in zip(cluster.search_bm25(queries[:20], 10), single.search_bm25(queries[:20], 10),
                    strict=True):
        _same(a, b)


def test_filters_equal_one_index(bm25_pair, queries):
    single, cluster = bm25_pair
    keep = [str(i) for i in range(1, 1400, 3)]
    text = "id IN (" + ", ".join(f'"{i}"' for i in keep) + ")"
    allow = cluster.allowed_rows(text)
    assert allow.tolist() == single.allowed_rows(text).tolist()
    for q in queries[:40]:  # the filter's own statistics, summed over the shards
        _same(cluster.search_bm25([q], 50, allow=allow)[0],
              single.search_bm25([q], 50, allow=allow)[0])


def test_documents_come_from_the_owning_shard(bm25_pair):
    single, cluster = bm25_pair
    for doc_id in single.ids[::97]:
        assert cluster.doc(doc_id) == single.doc(doc_id)
    with pytest.raises(KeyError):
        cluster.doc("no-such-id")


def _replica_pid(cluster, shard: int, replica: int) -> int:
    import ray

    return ray.get(cluster.pool.shards[shard][replica].actor.info.remote(), timeout=60)["pid"]


def _scrape() -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    from intentrank.scale.metrics import render

    out: dict = {}
    for family in text_string_to_metric_families(render().decode()):
        for sample in family.samples:
            key = (sample.name, sample.labels.get("shard"), sample.labels.get("replica"))
            out[key] = out.get(key, 0.0) + sample.value
    return out


def _wait_dead(actor, timeout_s: float = 60.0) -> None:
    import ray
    from ray.exceptions import ActorDiedError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ping.remote(), timeout=5)
        except ActorDiedError:
            return
        except Exception:  # noqa: BLE001, S110 (still dying)
            pass
        time.sleep(0.05)
    raise AssertionError(f"the killed replica still answers after {timeout_s:g} s")


def test_a_killed_replica_is_answered_for_and_restarts(bm25_pair, queries):
    import ray

    single, cluster = bm25_pair
    before = _scrape()
    expected = {q: single.search_bm25([q], 20)[0] for q in queries[:60]}
    victim = cluster.pool.shards[0][0].actor
    # The failover first: the repair loop waits until the calls have met the dead replica
    # (ray.kill is asynchronous, and on a loaded machine the repair could otherwise replace
    # the victim before any call reached it).
    cluster.pool.repair = lambda *args, **kwargs: []
    try:
        for i, q in enumerate(queries[:60]):
            if i == 10:
                ray.kill(victim, no_restart=True)  # dead for good: replaced by the repair
                _wait_dead(victim)
            _same(cluster.search_bm25([q], 20)[0], expected[q])
    finally:
        del cluster.pool.repair  # the pool's own repair again
    after = _scrape()
    def delta(name: str, replica: str) -> float:
        key = (f"intentrank_shard_replica_{name}_total", "0", replica)
        return after.get(key, 0) - before.get(key, 0)

    # the dead replica's calls went to the other one: retried after its error, or hedged
    # first when the error came later than the hedge delay (a loaded machine)
    assert delta("retries", "1") + delta("hedges", "1") >= 1, after
    assert cluster.wait_full_replication(120) < 120  # the replica replaced in its bundle
    assert cluster.pool.shards[0][0].actor is not victim
    assert after[("intentrank_shard_replica_latency_seconds_count", "1", "0")] > 0


def test_a_stopped_replica_is_bypassed_within_the_hedge_delay(bm25_pair, queries):
    single, cluster = bm25_pair
    pid = _replica_pid(cluster, 1, 0)
    hedges = _scrape().get(("intentrank_shard_replica_hedges_total", "1", "1"), 0)
    os.kill(pid, signal.SIGSTOP)
    try:
        took = []
        for q in queries[:8]:
            t = time.monotonic()
            _same(cluster.search_bm25([q], 20)[0], single.search_bm25([q], 20)[0])
            took.append(time.monotonic() - t)
    finally:
        os.kill(pid, signal.SIGCONT)
    # each of the two phases waits at most hedge_s (1 s) for the stopped replica
    assert max(took) < 2 * cluster.pool.hedge_s + 3.0, took
    assert _scrape()[("intentrank_shard_replica_hedges_total", "1", "1")] > hedges


def test_the_service_over_a_cluster_answers_as_over_one_index(bm25_pair, queries):
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from intentrank.service import create_app
    from intentrank.service.settings import ServiceSettings

    single, cluster = bm25_pair

    def app(index):
        return TestClient(create_app(ServiceSettings(
            indexes={"c": index}, pipelines={"bm25": "bm25"}, rerankers={},
            require_keys=False, workers=1, access_log=False)))

    one, many = app(single), app(cluster)
    for q in queries[:10]:
        a = one.post("/search", json={"query": q, "pipeline": "bm25", "top_k": 10}).json()
        b = many.post("/search", json={"query": q, "pipeline": "bm25", "top_k": 10}).json()
        assert [(r["doc_id"], r["score"], r["title"]) for r in a["results"]] == \
            [(r["doc_id"], r["score"], r["title"]) for r in b["results"]]
        assert b["generation"] == cluster.generation  # every shard's generation
    scraped = many.get("/metrics")
    assert scraped.status_code == 200
    names = {f.name for f in text_string_to_metric_families(scraped.text)}
    assert {"intentrank_shard_replica_latency_seconds", "intentrank_shard_replica_errors",
            "intentrank_shard_replica_retries"} <= names


def test_an_update_reaches_every_replica_and_a_pinned_view_keeps_its_commit(
        bm25_pair, queries, tmp_path):
    import shutil

    from intentrank.index import Index
    from intentrank.index.update import upsert
    from intentrank.types import Document

    single, cluster = bm25_pair
    changed = [Document("9001", "boundary layer transition on a heated flat plate"),
               Document(single.ids[3], "a replaced abstract about supersonic boundary layer")]
    q = "boundary layer transition heated plate"
    old_hits = cluster.search_bm25([q], 10)[0]
    newer = cluster.upsert(changed)
    shutil.copytree(single.path, tmp_path / "single")  # the same update on one index
    upsert(tmp_path / "single", changed)
    with Index(tmp_path / "single") as ref:
        _same(newer.search_bm25([q], 10)[0], ref.search_bm25([q], 10)[0])
        assert newer.ids == ref.ids  # the new and replaced ones last, in the update's order
    assert newer.generation != cluster.generation
    _same(cluster.search_bm25([q], 10)[0], old_hits)  # the old commit, still readable
    status = newer.status()
    owner = [s for s, (a, b) in enumerate(zip(cluster.pins, newer.pins, strict=True)) if a != b]
    for r in status["replicas"]:
        if r["shard"] in owner and r["state"] == "up":
            assert newer.pins[r["shard"]] in r["generations"]


@pytest.fixture(scope="module")
def dense_pair(cranfield, tmp_path_factory, ray_cluster):
    """BM25 + dense (MiniLM) of the first DENSE_DOCS Cranfield documents, one index and a
    cluster of 3 shards (the cluster's vectors come from the embedding cache)."""
    from intentrank.index import Index, IndexSettings, build_index
    from intentrank.scale.coordinator import ClusterIndex
    from intentrank.scale.shardset import build_cluster

    docs = [d for _, d in zip(range(DENSE_DOCS), cranfield.corpus(), strict=False)]
    root = tmp_path_factory.mktemp("dense")
    s = IndexSettings(legs=("bm25", "dense"))
    build_index(docs, root / "single", s).close()
    build_cluster(docs, root / "cl", SHARDS, s)
    single = Index(root / "single")
    cluster = ClusterIndex.open(root / "cl", timeout_s=30.0)
    yield single, cluster
    cluster.close()
    single.close()


def test_dense_and_fusion_equal_one_index(dense_pair, queries):
    from intentrank.core.config import load_config, resolve_pipeline
    from intentrank.pipelines import build_context, build_pipeline

    single, cluster = dense_pair
    vecs = single.encode_queries(queries[:30])
    for j in range(30):
        _same(cluster.search_dense([""], 20, query_vectors=vecs[j:j + 1])[0],
              single.search_dense([""], 20, query_vectors=vecs[j:j + 1])[0], exact=False)
    node = load_config(resolve_pipeline("rrf"))["pipeline"]
    for q in queries[:10]:  # bm25 + dense + RRF through the pipeline, as the CLI builds it
        a = build_pipeline(node, build_context(single)).search(q, k=20)
        b = build_pipeline(node, build_context(cluster)).search(q, k=20)
        assert [d.doc_id for d in a.docs] == [d.doc_id for d in b.docs]
        np.testing.assert_allclose([d.score for d in a.docs], [d.score for d in b.docs],
                                   rtol=F32_REL)
