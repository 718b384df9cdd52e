"""GET /metrics: the service's requests, errors and latency per endpoint and per pipeline, in
Prometheus' text format, scraped from a served app over a real index (300 Cranfield
abstracts) and parsed with prometheus_client's own parser."""

from __future__ import annotations

import pytest
from service_helpers import ScriptedLLM, small_index

from intentrank.llm.client import LLMClient
from intentrank.service import Limits, ServiceSettings, create_app
from intentrank.service.auth import ApiKey, KeyStore, hash_key

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

QUERY = "zebrafish-free boundary layer transition at hypersonic speeds"


def scrape(client: TestClient) -> dict[tuple[str, frozenset], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert QUERY not in r.text and "doc-42" not in r.text and "sk-metrics" not in r.text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_count_requests_errors_and_latency_per_endpoint_and_pipeline(data_dir, tmp_path):
    index = small_index(data_dir, tmp_path / "cranfield300", n=300)
    keys = KeyStore([ApiKey("all", hash_key("sk-metrics-all")),
                     ApiKey("bm25-only", hash_key("sk-metrics-bm25"), frozenset({"bm25"}),
                            permissions=frozenset({"read"}))])
    settings = ServiceSettings(
        indexes={"cranfield": index}, pipelines={"bm25": "bm25", "rrf": "rrf"}, keys=keys,
        limits=Limits(max_top_k=20), access_log=False,
        llm=LLMClient(ScriptedLLM(), cache=False, retries=0), workers=2, queue_limit=8)
    all_, bm25 = ({"X-API-Key": "sk-metrics-all"}, {"X-API-Key": "sk-metrics-bm25"})
    with TestClient(create_app(settings)) as client:
        before = scrape(client)
        for _ in range(3):
            r = client.post("/search", json={"query": QUERY, "pipeline": "bm25"}, headers=all_)
            assert r.status_code == 200
        r = client.post("/search", json={"query": QUERY, "pipeline": "rrf"}, headers=bm25)
        assert r.status_code == 403  # the key may not use rrf: an error of that pipeline
        assert client.post("/search", json={"query": QUERY, "top_k": 99},
                           headers=all_).status_code == 422
        assert client.delete("/documents/doc-42", headers=bm25).status_code == 403
        assert client.get("/no/such/path").status_code == 404
        after = scrape(client)

    def d(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    post = {"method": "POST", "endpoint": "/search"}
    assert d("intentrank_http_requests_total", status="200", **post) == 3
    assert d("intentrank_http_requests_total", status="403", **post) == 1
    assert d("intentrank_http_requests_total", status="422", **post) == 1
    assert d("intentrank_http_errors_total", **{"class": "4xx"}, **post) == 2
    assert d("intentrank_http_request_seconds_count", **post) == 5
    assert d("intentrank_http_request_seconds_sum", **post) > 0
    # ids are never labels: the route's template is
    assert d("intentrank_http_requests_total", method="DELETE",
             endpoint="/documents/{doc_id}", status="403") == 1
    assert d("intentrank_http_requests_total", method="GET", endpoint="unmatched",
             status="404") == 1
    assert d("intentrank_pipeline_requests_total", pipeline="bm25", status="200") == 3
    assert d("intentrank_pipeline_request_seconds_count", pipeline="bm25") == 3
    assert d("intentrank_pipeline_errors_total", pipeline="rrf", **{"class": "4xx"}) == 1
    assert d("intentrank_pipeline_errors_total", pipeline="bm25", **{"class": "4xx"}) == 0
    buckets = sorted((float(dict(k)["le"]), v) for (n, k), v in after.items()
                     if n == "intentrank_http_request_seconds_bucket"
                     and dict(k).get("endpoint") == "/search" and dict(k)["method"] == "POST")
    counts = [v for _, v in buckets]
    assert buckets[-1][0] == float("inf") and counts == sorted(counts)  # cumulative
    assert counts[-1] == after[("intentrank_http_request_seconds_count",
                                frozenset(post.items()))]
