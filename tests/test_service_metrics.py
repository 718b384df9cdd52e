"""GET /metrics through the real stack: uvicorn over a real index of Cranfield abstracts,
a known mix of requests (answered, refused 401/403/404/413/429, unmatched, a slow pipeline,
503 while draining), then the scrape parsed with prometheus_client's own parser: the
request and error counts and the latency histogram's buckets match what was sent."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest
from service_helpers import BM25_KEY, KEY, Server, small_index

from intentrank.service import Limits, ServiceSettings, create_app
from intentrank.service.auth import ApiKey, KeyStore, hash_key

pytest.importorskip("prometheus_client")
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITED = "test-key-limited"
SLOW_S = 0.3


def scrape(client: httpx.Client) -> dict[str, list]:
    """The samples of every family in GET /metrics, by family name."""
    from prometheus_client.parser import text_string_to_metric_families

    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "X-API-Key" not in r.text and "sk-" not in r.text  # counts, never a key
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def counted(samples: dict[str, list], family: str, suffix: str) -> Counter:
    """The counter ``family`` by (route, method, status or code, pipeline)."""
    keys = ("route", "method", "code" if family.endswith("errors") else "status", "pipeline")
    return Counter({tuple(s.labels[k] for k in keys): int(s.value)
                    for s in samples.get(family, []) if s.name == family + suffix})


def settled(client: httpx.Client, sent: Counter) -> tuple[dict[str, list], int]:
    """The scrape once the requests in ``sent`` are all counted (a request is recorded just
    after its answer went out), and how many scrapes came before it (1 at the start)."""
    scrapes, deadline = 1, time.monotonic() + 5
    while True:
        samples = scrape(client)
        got = counted(samples, "intentrank_http_requests", "_total")
        got.pop(("/metrics", "GET", "2xx", ""), None)
        if got == sent or time.monotonic() > deadline:
            assert got == sent
            return samples, scrapes
        scrapes += 1
        time.sleep(0.05)


def by_labels(samples: list, name: str, **labels: str) -> list:
    return [s for s in samples if s.name == name
            and all(s.labels.get(k) == v for k, v in labels.items())]


@pytest.fixture(scope="module")
def served(data_dir, tmp_path_factory):
    index = small_index(data_dir, tmp_path_factory.mktemp("met") / "cranfield", n=60)
    keys = KeyStore([ApiKey("all", hash_key(KEY)),
                     ApiKey("bm25-only", hash_key(BM25_KEY), frozenset({"bm25"})),
                     ApiKey("limited", hash_key(LIMITED), rate_limit=1)])
    settings = ServiceSettings(
        indexes={"cranfield": index},
        pipelines={"bm25": "bm25", "rrf": "rrf",
                   "slow": ["bm25", {"slow_test": {"seconds": SLOW_S}}]},
        keys=keys, limits=Limits(max_body_bytes=5_000), access_log=False, workers=2,
        queue_limit=8)
    app = create_app(settings)
    with Server(app) as server:
        yield server, app


def test_metrics_count_every_request_by_route_template_status_and_pipeline(served):
    server, app = served
    sent: Counter = Counter()  # (route, method, status, pipeline) -> requests
    codes: Counter = Counter()  # (route, method, code, pipeline) -> errors
    seconds: dict[tuple, list[float]] = {}  # client-side latency, >= the server's

    def call(client: httpx.Client, key: tuple, code: int, method: str, path: str,
             **kw: object) -> None:
        start = time.perf_counter()
        r = client.request(method, path, **kw)
        took = time.perf_counter() - start
        assert r.status_code == code, (path, r.status_code, r.text)
        route, pipeline = key
        full = (route, method, f"{code // 100}xx", pipeline)
        sent[full] += 1
        seconds.setdefault(full, []).append(took)
        if code >= 400:
            codes[(route, method, str(code), pipeline)] += 1

    with httpx.Client(base_url=server.url, timeout=30) as client:
        before = scrape(client)
        assert not before["intentrank_http_requests"]  # nothing answered before this scrape
        for q in ("boundary layer", "shock wave", "heat transfer"):
            call(client, ("/search", "bm25"), 200, "POST", "/search", headers=AUTH,
                 json={"query": q, "pipeline": "bm25", "top_k": 3})
        call(client, ("/search", "rrf"), 200, "POST", "/search", headers=AUTH,
             json={"query": "flutter", "pipeline": "rrf", "top_k": 3})
        call(client, ("/search", "slow"), 200, "POST", "/search", headers=AUTH,
             json={"query": "wing", "pipeline": "slow", "top_k": 3})
        call(client, ("/search", "rrf"), 403, "POST", "/search",
             headers={"Authorization": f"Bearer {BM25_KEY}"},
             json={"query": "flutter", "pipeline": "rrf"})
        for _ in range(2):
            call(client, ("/pipelines", ""), 401, "GET", "/pipelines")
        call(client, ("/pipelines", ""), 200, "GET", "/pipelines",
             headers={"Authorization": f"Bearer {LIMITED}"})
        call(client, ("/pipelines", ""), 429, "GET", "/pipelines",
             headers={"Authorization": f"Bearer {LIMITED}"})
        call(client, ("/documents/{doc_id}", ""), 401, "DELETE", "/documents/d1")
        call(client, ("/search", ""), 413, "POST", "/search", headers=AUTH,
             content=b"{" + b" " * 6_000 + b"}")
        call(client, ("unmatched", ""), 404, "GET", "/no/such/path")
        call(client, ("/health", ""), 200, "GET", "/health")
        app.state.drain.begin()  # shutting down: refused before routing, still counted
        call(client, ("/search", ""), 503, "POST", "/search", headers=AUTH,
             json={"query": "x"})
        app.state.drain.since = None
        final, scrapes = settled(client, sent)
    assert counted(final, "intentrank_http_errors", "_total") == codes
    # each earlier scrape is counted (the one answering is not, yet)
    assert counted(final, "intentrank_http_requests", "_total")[
        ("/metrics", "GET", "2xx", "")] == scrapes

    # the histogram: one observation per request; a bucket holds at least the requests the
    # client saw answered within its bound, and the slow pipeline none under its sleep
    hist = final["intentrank_http_request_duration_seconds"]
    for key, took in seconds.items():
        labels = dict(zip(("route", "method", "status", "pipeline"), key, strict=True))
        count = by_labels(hist, "intentrank_http_request_duration_seconds_count", **labels)
        assert [s.value for s in count] == [len(took)], key
        total = by_labels(hist, "intentrank_http_request_duration_seconds_sum", **labels)
        assert 0 < total[0].value <= sum(took), key
        buckets = by_labels(hist, "intentrank_http_request_duration_seconds_bucket", **labels)
        bounds = [(float(b.labels["le"]), b.value) for b in buckets]
        assert bounds[-1] == (float("inf"), len(took))
        assert [v for _, v in bounds] == sorted(v for _, v in bounds)  # cumulative
        for le, value in bounds:
            assert value >= sum(t <= le for t in took), (key, le)
    slow = by_labels(hist, "intentrank_http_request_duration_seconds_bucket",
                     route="/search", pipeline="slow")
    assert {float(b.labels["le"]): b.value for b in slow}[0.25] == 0
    # the shard replica metrics' registry is rendered too (the process's default one)
    assert "python_gc_objects_collected" in final or "process_cpu_seconds" in final
