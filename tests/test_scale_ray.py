"""Ray: a real local cluster (head + one worker node, each a raylet on 127.0.0.1 with one
CPU) encodes a corpus with Ray Data and evaluates a pipeline as Ray tasks; both must equal
the single-process run. And without --ray nothing imports Ray (or faiss)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tolerances import F32_ABS, F32_REL

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_search_without_ray_never_imports_ray(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        import intentrank
        from intentrank.index import build_index
        from intentrank.pipelines import pipeline_from_config
        from intentrank.core.config import resolve_pipeline
        from intentrank.types import Document
        docs = [Document(str(i), f"wing {{i}} lift and drag at Mach {{i}}") for i in range(30)]
        idx = build_index(docs, {str(tmp_path / 'idx')!r}, embedding_cache=False)
        ranking = pipeline_from_config(resolve_pipeline("rrf"), index=idx).search("lift", 5)
        assert ranking.docs, ranking
        print(sorted(m for m in ("ray", "faiss") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture(scope="module")
def cluster():
    from intentrank.scale.cluster import LocalCluster

    with LocalCluster(workers=1, cpus_per_node=1) as c:
        yield c


def test_cluster_is_a_head_and_a_worker_on_loopback(cluster):
    nodes = cluster.nodes()
    assert len(nodes) == 2
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    assert cluster.address.startswith("127.0.0.1:")


def test_ray_data_encoding_builds_the_same_index(cluster, cranfield, tmp_path):
    from intentrank.index import IndexSettings, build_index
    from intentrank.models.embedder import load_embedder
    from intentrank.scale.encode import ray_encoder

    docs = list(cranfield.corpus())[:48]
    settings = IndexSettings(legs=("dense",))
    idx = build_index(docs, tmp_path / "ray", settings, embedding_cache=False,
                      encoder=ray_encoder(settings.dense, workers=2, batch_size=12))
    local = load_embedder().encode_passages([d.full_text(" ") for d in docs])
    np.testing.assert_allclose(np.asarray(idx.embeddings), local, rtol=F32_REL, atol=1e-5)
    assert idx.settings == settings


def test_ray_evaluation_equals_single_process(cluster, cranfield, cranfield_index):
    from intentrank.measures.metrics import evaluate
    from intentrank.scale.evaluate import build_pipeline_for, ray_evaluate

    queries, qrels = cranfield.split("test")
    queries = queries[:60]
    qrels = {q.id: qrels[q.id] for q in queries if q.id in qrels}
    metrics = ["nDCG@10", "Recall@100"]
    local = build_pipeline_for("rrf", cranfield_index).run(queries)
    remote, scores = ray_evaluate("rrf", cranfield_index.path, queries, qrels, metrics,
                                  tasks=2)
    assert [r.query.id for r in remote.rankings] == [q.id for q in queries]
    for a, b in zip(local.rankings, remote.rankings, strict=True):
        assert b.doc_ids[:10] == a.doc_ids[:10]
        np.testing.assert_allclose([d.score for d in b.docs], [d.score for d in a.docs],
                                   rtol=F32_REL, atol=F32_ABS)
    expected = evaluate(local.to_run(), qrels, metrics)
    for m in metrics:
        assert scores.aggregate[m] == pytest.approx(expected.aggregate[m], rel=F32_REL)
    assert remote.trace.stages and remote.trace.stages.keys() == local.trace.stages.keys()


def test_service_on_ray_serve_answers_like_the_index(cluster, cranfield_index):
    import socket
    import urllib.request

    from ray import serve

    from intentrank.scale.serve import run
    from intentrank.service.settings import ServiceSettings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = ServiceSettings(indexes={"cranfield": str(cranfield_index.path)},
                               pipelines={"bm25": "bm25"}, rerankers={}, require_keys=False,
                               workers=1)
    run(settings, replicas=1, cpus_per_replica=0.5, port=port)
    try:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/search", method="POST",
            data=json.dumps({"query": "boundary layer flow", "pipeline": "bm25"}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = json.loads(resp.read())
    finally:
        serve.shutdown()
    from intentrank.retrieve.retrievers import BM25Retriever

    expected = BM25Retriever(cranfield_index, depth=10).search("boundary layer flow")
    assert [r["doc_id"] for r in body["results"]][:10] == expected.doc_ids[:10]
