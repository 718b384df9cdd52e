"""Ray Serve batching of cross-encoder calls across requests: an fp32 (torch) cross-encoder
built from the shipped MiniLM weights, served by its own deployment whose ``score`` is a
``@serve.batch`` handler; the service replica's cross-encoder steps call it through a
handle. On a real local cluster (head + worker on 127.0.0.1) concurrent requests are scored
in shared batches and answer exactly as the plain service does."""

from __future__ import annotations

import json
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from tolerances import F32_REL

from intentrank.errors import ConfigError
from intentrank.scale.serve import (
    BatchedScorer,
    ScorerSpec,
    route_cross_encoder,
    routed_settings,
)
from intentrank.service.scope import Scope
from intentrank.service.settings import ServiceSettings


@pytest.fixture(scope="module")
def fp32_cross_encoder(tmp_path_factory) -> str:
    """A sentence-transformers CrossEncoder: MiniLM-L6 (the shipped embedding model's
    weights) with a new 1-logit head (seed 0), saved as a torch model directory."""
    import transformers
    from sentence_transformers import CrossEncoder

    from intentrank.models.inputs import minilm_path

    transformers.set_seed(0)
    out = tmp_path_factory.mktemp("ce") / "minilm-ce"
    CrossEncoder(minilm_path(), num_labels=1, max_length=128, device="cpu").save(str(out))
    return str(out)


def _step(model: str, **kw) -> dict:
    return {"cross_encoder": {"model": model, "backend": "torch", "max_length": 128, **kw}}


def test_matching_cross_encoder_steps_are_routed_others_kept():
    spec = ScorerSpec("/m/ce", "torch", 128)
    proxy = BatchedScorer(handle=None, spec=spec)
    node = [{"fuse": {"method": "rrf", "inputs": [{"bm25": {"depth": 50}},
                                                  [{"dense": {}}, _step("/m/ce", top_k=5)]]}},
            _step("/m/ce", top_k=20), _step("/m/other"),
            {"cross_encoder": {"model": "/m/ce", "backend": "onnx", "max_length": 128}},
            {"cutoff": 10}]
    routed, n = route_cross_encoder(node, proxy, spec)
    assert n == 2
    assert routed[1] == {"cross_encoder": {"model": proxy, "top_k": 20}}
    assert routed[0]["fuse"]["inputs"][1][1] == {"cross_encoder": {"model": proxy, "top_k": 5}}
    assert routed[2:] == node[2:]  # another model, another backend: scored in the replica
    assert node[1]["cross_encoder"]["model"] == "/m/ce"  # the input is not changed


def test_a_batched_cross_encoder_no_served_step_names_is_refused_before_ray(monkeypatch):
    """The shipped pipelines and the default reranker name the bundled ONNX cross-encoder:
    a torch spec would batch nothing, so it is refused, naming the spec and the steps seen,
    before the cluster is touched."""
    import intentrank.scale.cluster as cluster
    from intentrank.scale.serve import run

    settings = ServiceSettings(indexes={"x": "indexes/x"})
    spec = ScorerSpec("/m/ce", "torch", 128)
    with pytest.raises(ConfigError) as err:
        routed_settings(settings, None, spec)
    message = str(err.value)
    assert "model /m/ce, backend torch, max_length 128" in message
    assert "cross_encoder steps served: model (not given), backend onnx, max_length 128" \
        in message
    monkeypatch.setattr(cluster, "connect", lambda *a, **k: pytest.fail("Ray was started"))
    with pytest.raises(ConfigError, match="would batch nothing"):
        run(settings, cross_encoder=spec)
    empty = ServiceSettings(indexes={"x": "indexes/x"}, pipelines={"b": "bm25"}, rerankers={})
    with pytest.raises(ConfigError, match="cross_encoder steps served: none"):
        routed_settings(empty, None, spec)
    # a step with default parameters, written `cross_encoder` or `cross_encoder:` (null),
    # is a step served, not "none"
    for default in ("cross_encoder", {"cross_encoder": None}):
        bare = ServiceSettings(indexes={"x": "indexes/x"}, rerankers={},
                               pipelines={"ce": [{"bm25": {"depth": 50}}, default]})
        with pytest.raises(ConfigError, match=r"cross_encoder steps served: model \(not "
                                              r"given\), backend \(not given\), max_length"):
            routed_settings(bare, None, spec)
    served = ServiceSettings(indexes={"x": "indexes/x"}, pipelines={"b": "bm25", "ce": [
        {"bm25": {"depth": 50}}, _step("/m/ce", top_k=5)]}, rerankers={})
    proxy = BatchedScorer(handle=None, spec=spec)
    routed = routed_settings(served, proxy, spec)
    assert routed.pipelines["b"] == "bm25"
    assert routed.pipelines["ce"][1] == {"cross_encoder": {"model": proxy, "top_k": 5}}


@pytest.mark.ray
@pytest.mark.slow
def test_batched_cross_encoder_on_ray_serve_answers_like_the_plain_service(
        cranfield, fp32_cross_encoder, tmp_path):
    from intentrank.index import IndexSettings, build_index
    from intentrank.scale.cluster import LocalCluster
    from intentrank.scale.serve import reset_scorer_stats, run, scorer_stats
    from intentrank.service.engine import Engine
    from intentrank.service.settings import ServiceSettings
    from intentrank.types import Document, Query

    model = fp32_cross_encoder
    build_index(cranfield.corpus(), tmp_path / "cranfield", IndexSettings(legs=("bm25",))
                ).close()
    settings = ServiceSettings(
        indexes={"cranfield": str(tmp_path / "cranfield")},
        pipelines={"bm25_ce": [{"bm25": {"depth": 12}}, _step(model, top_k=12)]},
        rerankers={"ce": _step(model)}, require_keys=False, workers=4)
    queries, _ = cranfield.split("test")
    texts = [q.text for q in queries[:6]]
    passages = [Document(str(i), t) for i, t in enumerate(
        ["lift of a wing at supersonic speed", "heat transfer in a boundary layer",
         "buckling of thin cylindrical shells"])]
    plain = Engine(settings)  # the service's own engine, in process
    served = plain.pipeline("bm25_ce", "search")
    expected = [plain.search(served, "cranfield", Query("q", t), 10, False, False,
                             scope=Scope.everything()) for t in texts]
    expected_rerank = plain.rerank(plain.pipeline("ce", "rerank"), "wing lift", passages, None,
                                   scope=Scope.everything())
    plain.close()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def post(path: str, body: dict) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=180) as resp:
            return json.loads(resp.read())

    with LocalCluster(workers=1, cpus_per_node=1):
        from ray import serve

        try:
            run(settings, replicas=1, cpus_per_replica=0.5, port=port,
                cross_encoder=ScorerSpec(model, "torch", 128), max_batch_size=6,
                batch_wait_timeout_s=0.5, scorer_cpus=0.5)
            reset_scorer_stats()
            with ThreadPoolExecutor(len(texts)) as pool:  # concurrent requests
                got = list(pool.map(lambda t: post("/search", {
                    "query": t, "pipeline": "bm25_ce", "top_k": 10}), texts))
            stats = scorer_stats()
            rerank = post("/rerank", {"query": "wing lift", "pipeline": "ce", "candidates": [
                {"id": d.id, "text": d.text} for d in passages]})
            after = scorer_stats()
        finally:
            serve.shutdown()
    assert stats["calls"] == len(texts)  # every query's pairs went to the scorer deployment
    assert stats["max_batch"] > 1 and stats["batches"] < len(texts)  # shared batches
    assert after["calls"] == len(texts) + 1
    for want, have in zip([*expected, expected_rerank], [*got, rerank], strict=True):
        assert [r["doc_id"] for r in have["results"]] == [r["doc_id"] for r in want["results"]]
        np.testing.assert_allclose([r["score"] for r in have["results"]],
                                   [r["score"] for r in want["results"]], rtol=F32_REL,
                                   atol=1e-5)
