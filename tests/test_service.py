"""The HTTP service through the real stack: uvicorn on a loopback port over a real index of
300 Cranfield abstracts, requests with httpx (every endpoint, keys, limits, bad bodies,
503 when the queue is full, 504 on timeout), and a schemathesis run that finds no 5xx."""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import BM25_KEY, KEY, ScriptedLLM, Server, has_answer_stage, small_index
from tolerances import F32_REL as REL

from intentrank.errors import ConfigError
from intentrank.llm.client import LLMClient
from intentrank.service import Limits, ServiceSettings, create_app
from intentrank.service.auth import ApiKey, KeyStore, hash_key
from intentrank.service.models import AnswerResponse, EvaluateResponse, SearchResponse

pytest.importorskip("fastapi")
AUTH = {"Authorization": f"Bearer {KEY}"}
SECRET = "sk-test-backend-secret-0123456789"
LIMITS = Limits(max_body_bytes=20_000, max_query_chars=200, max_top_k=20, max_turns=3,
                max_candidates=5, max_candidate_chars=500)


@pytest.fixture(scope="module")
def index(data_dir, tmp_path_factory):
    return small_index(data_dir, tmp_path_factory.mktemp("svc") / "cranfield300")


@pytest.fixture(scope="module")
def llm():
    return ScriptedLLM()


@pytest.fixture(scope="module")
def served(index, llm, tmp_path_factory):
    """The main server: bm25, rrf, a cross-encoder reranker and (when the answer stage
    exists) an answering pipeline over a scripted LLM; keys on; small limits."""
    root = tmp_path_factory.mktemp("svc-files")
    reports = root / "reports"
    reports.mkdir()
    (reports / "r1.html").write_text("<html><body><h1>report one</h1></body></html>")
    (reports / "notes.txt").write_text("not a report")
    (reports / "passwd.html").symlink_to("/etc/passwd")
    pipelines = {"bm25": "bm25", "rrf": "rrf",
                 "conversation": ["concat_turns", {"bm25": {"depth": 10}}]}
    if has_answer_stage():
        pipelines["qa"] = ["bm25", {"cutoff": 5},
                           {"answer": {"top_k": 3, "abstain": "llm", "cite": "llm"}}]
        pipelines["qa-posthoc"] = ["bm25", {"cutoff": 5},
                                   {"answer": {"top_k": 3, "abstain": "llm"}}]
    keys = KeyStore([ApiKey("all", hash_key(KEY)),
                     ApiKey("bm25-only", hash_key(BM25_KEY), frozenset({"bm25"}))])
    settings = ServiceSettings(
        indexes={"cranfield": index}, pipelines=pipelines, keys=keys, limits=LIMITS,
        report_dirs=[reports], access_log=root / "access.jsonl",
        llm=LLMClient(llm, cache=False, retries=0), workers=2, queue_limit=8)
    with Server(create_app(settings)) as server:
        yield server, root / "access.jsonl"


@pytest.fixture(scope="module")
def client(served):
    with httpx.Client(base_url=served[0].url, timeout=30) as c:
        yield c


def test_health_needs_no_key_and_everything_else_does(client):
    assert client.get("/health").json()["status"] == "ok"
    r = client.get("/pipelines")
    assert r.status_code == 401 and "API key is required" in r.json()["error"]
    assert client.get("/pipelines", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/search", json={"query": "flow"}).status_code == 401
    info = client.get("/pipelines", headers={"X-API-Key": BM25_KEY}).json()
    allowed = {p["name"]: p["allowed"] for p in info["pipelines"]}
    assert allowed["bm25"] and not allowed["rrf"] and not allowed["cross_encoder"]
    assert info["indexes"] == [{"name": "cranfield", "documents": 300}]
    assert info["limits"]["max_top_k"] == 20


def test_a_key_gets_403_for_a_pipeline_it_is_not_allowed(client):
    r = client.post("/search", json={"query": "flow", "pipeline": "rrf"},
                    headers={"X-API-Key": BM25_KEY})
    assert r.status_code == 403 and "'rrf'" in r.json()["error"]
    r = client.post("/search", json={"query": "flow", "pipeline": "bm25"},
                    headers={"X-API-Key": BM25_KEY})
    assert r.status_code == 200
    r = client.post("/rerank", json={"query": "flow", "candidates": [{"text": "flow"}]},
                    headers={"X-API-Key": BM25_KEY})
    assert r.status_code == 403


def test_search_returns_the_in_process_ranking_with_stage_scores_and_trace(client, index):
    from intentrank.core.config import resolve_pipeline
    from intentrank.pipelines import pipeline_from_config

    text = "boundary layer flow over a flat plate"
    r = client.post("/search", json={"query": text, "pipeline": "rrf", "top_k": 5},
                    headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    SearchResponse.model_validate(body)
    expected = pipeline_from_config(resolve_pipeline("rrf"), index=index).search(text, k=5)
    assert [d["doc_id"] for d in body["results"]] == expected.doc_ids
    for got, want in zip(body["results"], expected.docs, strict=True):
        assert got["score"] == pytest.approx(want.score, rel=REL)
        assert set(got["stage_scores"]) == {"rrf/bm25", "rrf/dense", "rrf"} >= set(
            got["stage_ranks"])
        assert got["stage_ranks"]["rrf"] == got["rank"]
        assert got["text"] and got["title"]
    stages = {s["stage"]: s for s in body["stages"]}
    assert set(stages) == {"rrf/bm25", "rrf/dense", "rrf"}
    assert all(s["seconds"] > 0 and s["calls"] == 1 for s in stages.values())
    assert body["fallbacks"] == 0 and body["answer"] is None and body["request_id"]


def test_concurrent_searches_read_the_right_documents(served, index):
    """Worker threads read passages at the same time (Index.doc shares one file handle)."""
    def one(i: int) -> httpx.Response:
        return httpx.post(f"{served[0].url}/search", headers=AUTH, timeout=30, json={
            "query": ["shock wave", "heat transfer", "boundary layer", "wing flutter"][i % 4],
            "pipeline": "bm25", "top_k": 20})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, range(32)))
    assert [r.status_code for r in responses] == [200] * 32
    for r in responses:
        for d in r.json()["results"]:
            doc = index.doc(d["doc_id"])
            assert d["title"] == doc.title and d["text"] == doc.text


class MeetingIndex:
    """An index whose document reads each wait until two readers are inside at once."""

    def __init__(self, index: Any) -> None:
        self._index, self._meet = index, threading.Barrier(2, timeout=10)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def __len__(self) -> int:
        return len(self._index)

    def doc(self, doc_id: str) -> Any:
        self._meet.wait()
        return self._index.doc(doc_id)


def test_the_engine_reads_documents_in_many_threads_at_once(index, llm):
    """Index.doc reads positionally (os.pread): the engine adds no lock around it."""
    from intentrank.service.engine import Engine

    settings = ServiceSettings(indexes={"cranfield": MeetingIndex(index)},
                               pipelines={"bm25": "bm25"}, rerankers={}, require_keys=False,
                               llm=LLMClient(llm, cache=False, retries=0))
    engine = Engine(settings)
    try:
        served = engine.indexes["cranfield"]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            docs = list(pool.map(served.doc, index.ids[:2]))  # both inside at once
        assert [d.id for d in docs] == index.ids[:2]
    finally:
        engine.close()


def test_search_takes_a_conversation(client):
    conv = {"turns": [{"question": "What is a boundary layer?", "answer": "A thin layer."}],
            "question": "How does it grow along a flat plate?"}
    r = client.post("/search", json={"conversation": conv, "pipeline": "bm25", "top_k": 3},
                    headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["query"] == conv["question"] and len(r.json()["results"]) == 3


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"query": "x" * 201}, 422, "query is 201 characters; the limit is 200"),
    ({"query": "   "}, 422, "query is empty"),
    ({"query": "flow", "top_k": 21}, 422, "top_k is 21; the limit is 20"),
    ({"query": "flow", "top_k": 0}, 422, "top_k"),
    ({"query": "flow", "top_k": "ten"}, 422, "top_k: Input should be a valid integer"),
    ({"query": 5}, 422, "query: Input should be a valid string"),
    ({"query": "flow", "colour": "red"}, 422, "colour: Extra inputs are not permitted"),
    ({}, 422, "exactly one of 'query' and 'conversation'"),
    ({"query": "a", "conversation": {"question": "b"}}, 422, "exactly one of"),
    ({"conversation": {"turns": [{"question": "q"}] * 4, "question": "b"}}, 422,
     "4 earlier turns; the limit is 3"),
    ({"conversation": {"turns": [{"question": "q", "answer": "a" * 501}], "question": "b"}},
     422, "conversation.turns[0].answer is 501 characters; the limit is 500"),
    ({"query": "flow", "pipeline": "nope"}, 422, "unknown pipeline 'nope'; served: bm25, rrf"),
    ({"query": "flow", "index": "../etc"}, 422, "unknown index '../etc'; served: cranfield"),
    ({"query": "flow", "pipeline": "cross_encoder"}, 422, "unknown pipeline"),
])
def test_search_limits_and_bad_fields_are_4xx_with_a_message(client, body, status, message):
    r = client.post("/search", json=body, headers=AUTH)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


def test_malformed_json_and_oversized_bodies(client):
    r = client.post("/search", content=b'{"query": "flow"', headers={
        **AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"].startswith("malformed JSON")
    r = client.post("/search", content=b"[1, 2]", headers={
        **AUTH, "Content-Type": "application/json"})
    assert r.status_code == 422
    big = json.dumps({"query": "flow", "pad": "x" * 30_000}).encode()
    r = client.post("/search", content=big, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413 and "20000 bytes" in r.json()["error"]

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"query": "'
        for _ in range(30):
            yield b"x" * 1000
        yield b'"}'

    r = client.post("/search", content=chunks(), headers={
        **AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413


def test_rerank_orders_the_users_own_passages(client):
    cands = [{"id": "sky", "text": "The sky is blue on a clear day."},
             {"id": "bl", "text": "The laminar boundary layer over a flat plate thickens "
                                  "with distance from the leading edge."},
             {"text": "Recipes for apple pie."}]
    r = client.post("/rerank", json={"query": "boundary layer growth on a flat plate",
                                     "candidates": cands}, headers=AUTH)
    assert r.status_code == 200, r.text
    SearchResponse.model_validate(r.json())
    results = r.json()["results"]
    assert results[0]["doc_id"] == "bl" and {d["doc_id"] for d in results} == {"sky", "bl", "c3"}
    assert results[0]["stage_ranks"] == {"input": 2, "cross_encoder": 1}
    assert r.json()["pipeline"] == "cross_encoder" and r.json()["index"] is None
    r = client.post("/rerank", json={"query": "q", "candidates": cands, "top_k": 1},
                    headers=AUTH)
    assert len(r.json()["results"]) == 1


@pytest.mark.parametrize(("body", "message"), [
    ({"query": "q", "candidates": [{"text": "t"}] * 6}, "6 candidates; the limit is 5"),
    ({"query": "q", "candidates": []}, "candidates"),
    ({"query": "q", "candidates": [{"id": "a", "text": "t"}, {"id": "a", "text": "u"}]},
     "candidates[1].id 'a' is given twice"),
    ({"query": "q", "candidates": [{"text": "t" * 501}]},
     "candidates[0].text is 501 characters; the limit is 500"),
    ({"query": "q", "candidates": [{"text": "t"}], "pipeline": "bm25"},
     "unknown reranker 'bm25'; served: cross_encoder"),
])
def test_rerank_limits(client, body, message):
    r = client.post("/rerank", json=body, headers=AUTH)
    assert r.status_code == 422 and message in r.json()["error"], r.text


def test_answer_refuses_a_pipeline_without_an_answer_stage(client):
    r = client.post("/answer", json={"query": "flow", "pipeline": "rrf"}, headers=AUTH)
    assert r.status_code == 422
    assert "pipeline 'rrf' does not produce answers" in r.json()["error"]


@pytest.mark.skipif(not has_answer_stage(), reason="the 'answer' stage is not registered yet")
def test_answer_with_citations_and_a_failing_llm_degrades_to_counted_fallbacks(
        client, served, llm, monkeypatch):
    r = client.post("/answer", json={"query": "boundary layer on a flat plate",
                                     "pipeline": "qa"}, headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    AnswerResponse.model_validate(body)
    first = body["results"][0]["doc_id"]
    assert body["answer"]["text"] == "The boundary layer thickens downstream [1]."
    assert body["answer"]["citations"][0]["n"] == 1
    assert body["answer"]["citations"][0]["doc_id"] == first
    assert body["answer"]["citations"][0]["text"]
    assert body["answer"]["fallback"] == "" and body["fallbacks"] == 0
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setattr(llm, "fail", f"401 invalid key {SECRET}")
    r = client.post("/answer", json={"query": "heat transfer in hypersonic flow",
                                     "pipeline": "qa"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["answer"]["fallback"] == "empty"
    assert r.json()["stages"][-1]["counters"].get("llm_failed") == 1
    assert SECRET not in r.text and "[redacted]" in r.text
    assert SECRET not in served[1].read_text()


def test_posthoc_answer_shows_each_cited_passage_with_its_supporting_sentence(client):
    """Citations attributed by the real bundled cross-encoder: every cited passage comes
    with its title and the sentence that supports the answer; unsupported sentences listed."""
    r = client.post("/answer", json={"query": "boundary layer on a flat plate",
                                     "pipeline": "qa-posthoc"}, headers=AUTH)
    assert r.status_code == 200, r.text
    answer = AnswerResponse.model_validate(r.json()).answer
    assert "[" not in answer.text or answer.citations  # markers only for real citations
    for c in answer.citations:
        assert c.support and c.support in c.text
    assert isinstance(answer.unsupported, list)
    assert len(answer.citations) + len(answer.unsupported) >= 1


def test_a_conversation_without_a_pipeline_runs_the_conversation_pipeline(client):
    turns = [{"question": "What is a boundary layer?", "answer": ""}]
    r = client.post("/search", json={"conversation": {"turns": turns,
                                                      "question": "Does it thicken?"}},
                    headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pipeline"] == "conversation"
    assert body["searched"] == "What is a boundary layer? Does it thicken?"
    plain = client.post("/search", json={"query": "Does it thicken?"}, headers=AUTH)
    assert plain.json()["pipeline"] == "rrf"  # a one-off query keeps the default


def test_evaluate_matches_the_metrics_code(client):
    from intentrank.measures.metrics import evaluate

    run = "1 Q0 d1 1 3.0 t\n1 Q0 d2 2 2.0 t\n2 Q0 d3 1 1.0 t\n2 Q0 d9 2 0.5 t\n"
    qrels = "1 0 d2 1\n2 0 d3 2\n2 0 d4 1\n3 0 d5 0\n"
    r = client.post("/evaluate", json={"run": run, "qrels": qrels, "per_query": True,
                                       "metrics": ["nDCG@10", "MRR@10", "Recall@100"]},
                    headers=AUTH)
    assert r.status_code == 200, r.text
    EvaluateResponse.model_validate(r.json())
    want = evaluate({"1": {"d1": 3.0, "d2": 2.0}, "2": {"d3": 1.0, "d9": 0.5}},
                    {"1": {"d2": 1}, "2": {"d3": 2, "d4": 1}, "3": {"d5": 0}},
                    ["nDCG@10", "MRR@10", "Recall@100"])
    for name, value in want.aggregate.items():
        assert r.json()["metrics"][name] == pytest.approx(value, rel=REL)
    assert r.json()["skipped"] == ["3"] and r.json()["queries"] == 2
    assert set(r.json()["per_query"]) == {"1", "2"}


@pytest.mark.parametrize(("body", "message"), [
    ({"run": "1 Q0 d1 1 x t\n", "qrels": "1 0 d1 1\n"}, "run:1 (field 'score'): score 'x'"),
    ({"run": "1 Q0 d1 1 1 t\n", "qrels": "1 0 d1 0.5\n"}, "qrels:1"),
    ({"run": "", "qrels": "1 0 d1 1\n"}, "run: no results found"),
    ({"run": "1 Q0 d1 1 1 t\n", "qrels": "1 0 d1 1\n", "metrics": ["nDCG@0"]},
     "the cut-off must be >= 1"),
    ({"run": "1 Q0 d1 1 1 t\n", "qrels": "1 0 d1 1\n", "metrics": []}, "give 1 to 20"),
])
def test_evaluate_bad_input_is_422_naming_the_line(client, body, message):
    r = client.post("/evaluate", json=body, headers=AUTH)
    assert r.status_code == 422 and message in r.json()["error"], r.text
    assert "/tmp" not in r.json()["error"] and "intentrank-eval" not in r.json()["error"]


def test_reports_are_served_by_name_from_the_configured_list(client):
    names = [r["name"] for r in client.get("/reports", headers=AUTH).json()]
    assert names == ["r1.html"]  # not the .txt, not the symlink
    r = client.get("/reports/r1.html", headers=AUTH)
    assert r.status_code == 200 and "report one" in r.text
    assert r.headers["content-security-policy"] == "sandbox"
    assert client.get("/reports/r1.html").status_code == 401
    for bad in ("passwd.html", "..%2F..%2Fetc%2Fpasswd", "notes.txt"):
        assert client.get(f"/reports/{bad}", headers=AUTH).status_code == 404


def test_the_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "<title>intentrank</title>" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("app.js", "common.js", "reports.js", "style.css"):
        assert client.get(f"/static/{asset}").status_code == 200
    assert "report-list" in client.get("/ui/reports").text


def test_cors_is_off_unless_configured(client):
    r = client.options("/search", headers={"Origin": "http://evil.test",
                                           "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers


def test_access_log_is_json_lines_without_keys(client, served):
    client.post("/search", json={"query": "shock waves", "pipeline": "bm25"},
                headers={**AUTH, "X-Request-ID": "req-abc.1"})
    for _ in range(100):  # the line is written just after the response is sent
        records = [json.loads(line) for line in served[1].read_text().splitlines()]
        mine = [r for r in records if r["request_id"] == "req-abc.1"]
        if mine:
            break
        time.sleep(0.02)
    assert len(mine) == 1
    rec = mine[0]
    assert rec["status"] == 200 and rec["pipeline"] == "bm25" and rec["key"] == "all"
    assert rec["fallbacks"] == 0 and rec["latency_ms"] > 0 and rec["index"] == "cranfield"
    assert all({"request_id", "status", "latency_ms", "path"} <= set(r) for r in records)
    text = served[1].read_text()
    assert KEY not in text and BM25_KEY not in text


@pytest.fixture(scope="module")
def slow_server(index):
    """One worker, a queue of one, a 1 s timeout, keys off, CORS for one origin."""
    settings = ServiceSettings(
        indexes={"cranfield": index}, rerankers={}, require_keys=False, workers=1,
        queue_limit=1, timeout_s=1.0, retry_after_s=3, access_log=False,
        cors_origins=["http://app.test"],
        pipelines={"slow": ["bm25", {"slow_test": {"seconds": 0.3}}],
                   "slower": ["bm25", {"slow_test": {"seconds": 1.6}}]})
    with Server(create_app(settings)) as server:
        yield server.url


def test_a_full_queue_answers_503_with_retry_after(slow_server):
    def one(_: int) -> httpx.Response:
        return httpx.post(f"{slow_server}/search", json={"query": "flow", "pipeline": "slow"},
                          timeout=30)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(one, range(6)))
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 2 and codes.count(503) >= 3 and set(codes) == {200, 503}, codes
    busy = next(r for r in responses if r.status_code == 503)
    assert busy.headers["retry-after"] == "3" and "queue limit 1" in busy.json()["error"]
    assert httpx.get(f"{slow_server}/health").json()["in_flight"] <= 2


def test_a_request_over_the_timeout_is_504_and_cors_follows_the_setting(slow_server):
    r = httpx.post(f"{slow_server}/search", json={"query": "flow", "pipeline": "slower"},
                   timeout=30)
    assert r.status_code == 504 and "longer than 1 s" in r.json()["error"]
    r = httpx.options(f"{slow_server}/search", headers={
        "Origin": "http://app.test", "Access-Control-Request-Method": "POST"})
    assert r.headers["access-control-allow-origin"] == "http://app.test"
    r = httpx.options(f"{slow_server}/search", headers={
        "Origin": "http://evil.test", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers


def test_schemathesis_finds_no_server_error(served):
    """Every operation of the OpenAPI schema, 15 schema-valid and 15 schema-violating
    generated requests each, with a valid key: no response is a 5xx."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import response_schema_conformance

    url = served[0].url
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    seen: list[tuple[str, int]] = []

    def fuzzer():  # noqa: ANN202 (a fresh function per operation: hypothesis marks it)
        def fuzz(case) -> None:  # noqa: ANN001
            response = case.call(base_url=url, headers=AUTH, timeout=30)
            label = f"{case.method.upper()} {case.path}"
            seen.append((label, response.status_code))
            assert response.status_code < 500, (label, case.body, response.text[:300])
            if response.status_code == 200 and "json" in response.headers["content-type"]:
                case.validate_response(response, checks=[response_schema_conformance])
        return fuzz

    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                given(case=operation.as_strategy(generation_mode=mode))(settings(
                    max_examples=15, deadline=None, database=None, derandomize=True,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))(fuzzer()))()
            except Unsatisfiable:  # nothing to violate (GET /health takes no input)
                assert mode == GenerationMode.NEGATIVE

    labels = {label for label, _ in seen}
    assert {"POST /search", "POST /rerank", "POST /answer", "POST /evaluate",
            "GET /reports/{name}"} <= labels
    assert any(code == 200 for label, code in seen if label == "POST /search")


def test_settings_are_checked_before_serving(index, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="API keys are required but none are configured"):
        ServiceSettings(indexes={"i": index}).check()
    with pytest.raises(ConfigError, match="not served"):
        ServiceSettings(indexes={"i": index}, pipelines={"bm25": "bm25"}, keys=KeyStore(
            [ApiKey("a", hash_key("k"), frozenset({"dense"}))])).check()
    with pytest.raises(ConfigError, match="index name '../x'"):
        ServiceSettings(indexes={"../x": index}, require_keys=False).check()
    bad = tmp_path / "keys.yaml"
    bad.write_text("keys:\n  - name: a\n    sha256: plain-text-key\n")
    with pytest.raises(ConfigError, match="64 hex digits"):
        KeyStore.from_file(bad)
    good = tmp_path / "good.yaml"
    good.write_text(f"keys:\n  - name: a\n    sha256: {hash_key('s3cret')}\n"
                    f"    pipelines: [bm25]\n")
    store = KeyStore.from_file(good)
    assert store.lookup("s3cret").allows("bm25") and not store.lookup("s3cret").allows("rrf")
    assert store.lookup("other") is None
    env = KeyStore.from_env(f"{hash_key('x')}, {hash_key('y')}:bm25|rrf")
    assert env.lookup("x").pipelines is None and env.lookup("y").pipelines == {"bm25", "rrf"}


def test_build_settings_generates_a_key_when_none_is_configured(index, monkeypatch):
    from intentrank.service.command import build_settings

    monkeypatch.delenv("INTENTRANK_API_KEYS", raising=False)
    where = Path(index.path) if hasattr(index, "path") else None
    if where is None:
        pytest.skip("the index does not expose its directory")
    settings, key = build_settings([f"cran={where}"], ["bm25", "rrf"], log=lambda m: None)
    assert key and settings.keys.lookup(key) is not None
    assert list(settings.indexes) == ["cran"] and list(settings.pipelines) == ["bm25", "rrf"]
    monkeypatch.setenv("INTENTRANK_API_KEYS", hash_key("k"))
    settings, key = build_settings([str(where)], None, log=lambda m: None)
    assert key is None and settings.keys.lookup("k") is not None
    assert os.environ["INTENTRANK_API_KEYS"] == hash_key("k")
