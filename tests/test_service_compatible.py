"""The providers' APIs of the service with the providers' own clients: Cohere's rerank
(``cohere.ClientV2`` and ``cohere.Client`` on POST /v2/rerank and /v1/rerank) and OpenAI's
embeddings (``openai.OpenAI`` on POST /v1/embeddings), against a live server on a loopback
port over a real index of 300 Cranfield abstracts; and once against ``intentrank serve``
itself, started as a subprocess."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import numpy as np
import pytest
from service_helpers import BM25_KEY, KEY, Server, small_index
from tolerances import F32_REL as REL

from intentrank.service import ServiceSettings, create_app
from intentrank.service.auth import ApiKey, KeyStore, hash_key
from intentrank.service.models import CohereRerankResponse, EmbeddingsResponse
from intentrank.service.settings import DEFAULT_RERANKERS

pytest.importorskip("fastapi")
cohere = pytest.importorskip("cohere")
openai = pytest.importorskip("openai")

AUTH = {"Authorization": f"Bearer {KEY}"}
CE = DEFAULT_RERANKERS["cross_encoder"]["cross_encoder"]  # the default reranker's settings
QUERY = "boundary layer growth on a flat plate"


@pytest.fixture(scope="module")
def index(data_dir, tmp_path_factory):
    return small_index(data_dir, tmp_path_factory.mktemp("compat") / "cranfield300")


@pytest.fixture(scope="module")
def served(index, tmp_path_factory):
    """The default cross-encoder, a cut-off cascade over it, keys on, default limits."""
    log = tmp_path_factory.mktemp("compat-log") / "access.jsonl"
    keys = KeyStore([ApiKey("all", hash_key(KEY)),
                     ApiKey("bm25-only", hash_key(BM25_KEY), frozenset({"bm25"}))])
    settings = ServiceSettings(
        indexes={"cranfield": index}, pipelines={"bm25": "bm25"},
        rerankers={"cross_encoder": {"cross_encoder": dict(CE)},
                   "ce_top3": [{"cross_encoder": dict(CE)}, {"cutoff": 3}]},
        keys=keys, access_log=log, llm=None, workers=2, queue_limit=8)
    with Server(create_app(settings)) as server:
        yield server.url, log


@pytest.fixture(scope="module")
def texts(index):
    """Twelve Cranfield abstracts (title and text, as a client would send a passage)."""
    return [index.doc(i).full_text() for i in index.ids[:12]]


@pytest.fixture(scope="module")
def expected(texts):
    """The in-process scores of the same cross-encoder for (QUERY, text)."""
    from intentrank.models.cross_encoder import load_cross_encoder

    scorer = load_cross_encoder(backend=CE["backend"], max_length=CE["max_length"])
    return scorer.predict([(QUERY, t) for t in texts])


def best_first(scores: np.ndarray) -> list[int]:
    """Positions by score, ties by position's id string (rerank_head's order)."""
    return sorted(range(len(scores)), key=lambda i: (-float(scores[i]), str(i)))


def cohere_v2(url: str, key: str = KEY) -> Any:
    return cohere.ClientV2(api_key=key, base_url=url, timeout=60)


def openai_client(url: str, key: str = KEY) -> Any:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def log_records(path, request_id: str) -> list[dict[str, Any]]:
    for _ in range(100):  # the line is written just after the response is sent
        mine = [r for r in map(json.loads, path.read_text().splitlines())
                if r["request_id"] == request_id]
        if mine:
            return mine
        time.sleep(0.02)
    return []


# -- Cohere rerank ----------------------------------------------------------------------------
def test_cohere_client_v2_scores_are_the_in_process_cross_encoders(served, texts, expected):
    resp = cohere_v2(served[0]).rerank(model="cross_encoder", query=QUERY, documents=texts,
                                       top_n=5)
    order = best_first(expected)
    assert [r.index for r in resp.results] == order[:5]
    for r in resp.results:
        assert r.relevance_score == pytest.approx(float(expected[r.index]), rel=REL)
        assert 0.0 <= r.relevance_score <= 1.0
    assert resp.meta.api_version.version == "2" and resp.meta.billed_units.search_units == 1
    assert resp.id and len(resp.id) == 16


def test_cohere_v1_client_returns_documents_as_given(served, texts, expected):
    docs: list[Any] = [{"text": t, "source": f"s{i}"} if i % 2 else t
                       for i, t in enumerate(texts)]
    resp = cohere.Client(api_key=KEY, base_url=served[0], timeout=60).rerank(
        model="cross_encoder", query=QUERY, documents=docs, return_documents=True)
    assert [r.index for r in resp.results] == best_first(expected)
    for r in resp.results:
        assert r.relevance_score == pytest.approx(float(expected[r.index]), rel=REL)
        assert r.document.text == texts[r.index]
        if r.index % 2:
            assert r.document.source == f"s{r.index}"  # other fields kept (extra allowed)
    assert resp.meta.api_version.version == "1"


def test_the_raw_reply_has_cohere_shape_and_a_cascade_cuts_the_list(served, texts, expected):
    body = {"model": "ce_top3", "query": QUERY, "documents": texts, "top_n": 10}
    r = httpx.post(f"{served[0]}/v1/rerank", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    CohereRerankResponse.model_validate(r.json())
    assert set(r.json()) == {"id", "results", "meta"} and r.json()["id"] == \
        r.headers["x-request-id"]
    results = r.json()["results"]
    assert [x["index"] for x in results] == best_first(expected)[:3]  # the cut-off's 3
    assert all(set(x) == {"index", "relevance_score"} for x in results)
    # the first reranker when no model is named (Cohere's v1 makes it optional)
    r = httpx.post(f"{served[0]}/v1/rerank", headers=AUTH, timeout=60,
                   json={"query": QUERY, "documents": texts[:2]})
    assert [x["index"] for x in r.json()["results"]] == best_first(expected[:2])


def test_rank_fields_read_the_named_object_fields(served):
    docs = [{"title": "Recipes", "body": "Apple pie with cinnamon."},
            {"title": "Boundary layers", "body": "The laminar boundary layer over a flat "
                                                 "plate thickens downstream."}]
    r = httpx.post(f"{served[0]}/v2/rerank", headers=AUTH, timeout=60, json={
        "model": "cross_encoder", "query": QUERY, "documents": docs,
        "rank_fields": ["title", "body"], "return_documents": True})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["index"] == 1
    assert r.json()["results"][0]["document"] == docs[1]


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"documents": []}, "BadRequestError", "documents is empty"),
    ({"top_n": 0}, "BadRequestError", "top_n must be at least 1, got 0"),
    ({"documents": [f"document {i}" for i in range(10_000)]}, "BadRequestError",
     "10000 documents; the limit is 100"),
    ({"documents": ["fine", "  "]}, "BadRequestError", "documents[1] is empty"),
    ({"documents": ["x" * 10_001]}, "BadRequestError",
     "documents[0] is 10001 characters; the limit is 10000"),
    ({"query": ""}, "BadRequestError", "query is empty"),
    ({"model": "rerank-v3.5"}, "NotFoundError",
     "unknown model 'rerank-v3.5': the models here are the served rerankers: "
     "cross_encoder, ce_top3"),
    ({"model": "bm25"}, "NotFoundError", "unknown model 'bm25'"),
    ({"key": "wrong"}, "UnauthorizedError", "unknown API key"),
    ({"key": BM25_KEY}, "ForbiddenError", "this key may not use pipeline 'cross_encoder'"),
])
def test_cohere_client_surfaces_bad_requests(served, kwargs, error, message):
    key = kwargs.pop("key", KEY)
    args = {"model": "cross_encoder", "query": QUERY, "documents": ["a flat plate"], **kwargs}
    with pytest.raises(getattr(cohere.errors, error)) as caught:
        cohere_v2(served[0], key).rerank(**args)
    status = {"BadRequestError": 400, "NotFoundError": 404, "UnauthorizedError": 401,
              "ForbiddenError": 403}[error]
    assert caught.value.status_code == status
    assert message in caught.value.body["message"] and message in caught.value.body["error"]


def test_rerank_requests_are_in_the_access_log(served):
    r = httpx.post(f"{served[0]}/v2/rerank", timeout=60,
                   headers={**AUTH, "X-Request-ID": "compat-rerank-1"},
                   json={"model": "ce_top3", "query": QUERY, "documents": ["a", "b"]})
    assert r.status_code == 200
    r = httpx.post(f"{served[0]}/v1/rerank", timeout=60,
                   headers={**AUTH, "X-Request-ID": "compat-rerank-2"},
                   json={"model": "cross_encoder", "query": QUERY, "documents": []})
    assert r.status_code == 400
    (ok,) = log_records(served[1], "compat-rerank-1")
    assert ok["path"] == "/v2/rerank" and ok["status"] == 200 and ok["key"] == "all"
    assert ok["pipeline"] == "ce_top3" and ok["fallbacks"] == 0
    (bad,) = log_records(served[1], "compat-rerank-2")
    assert bad["status"] == 400 and "documents is empty" in bad["error"]
    assert KEY not in served[1].read_text()


# -- OpenAI embeddings ------------------------------------------------------------------------
def test_openai_client_embeddings_are_the_index_query_encoders(served, index):
    inputs = ["boundary layer on a flat plate", "heat transfer in hypersonic flow"]
    want = index.encode_queries(inputs)
    client = openai_client(served[0])
    got = client.embeddings.create(model="cranfield", input=inputs)  # base64 underneath
    assert got.model == "cranfield" and [d.index for d in got.data] == [0, 1]
    assert got.usage.prompt_tokens > 0 and got.usage.total_tokens == got.usage.prompt_tokens
    for d, w in zip(got.data, want, strict=True):
        assert np.allclose(d.embedding, w, rtol=REL, atol=1e-6)
    floats = client.embeddings.create(model="cranfield", input=inputs[0],
                                      encoding_format="float")
    assert len(floats.data) == 1 and len(floats.data[0].embedding) == want.shape[1]
    assert np.allclose(floats.data[0].embedding, want[0], rtol=REL, atol=1e-6)
    raw = client.embeddings.create(model="cranfield", input=inputs, encoding_format="base64")
    decoded = np.frombuffer(base64.b64decode(raw.data[1].embedding), dtype="<f4")
    assert np.allclose(decoded, want[1], rtol=REL, atol=1e-6)
    same = client.embeddings.create(model="cranfield", input=inputs[:1],
                                    dimensions=want.shape[1], encoding_format="float")
    assert len(same.data[0].embedding) == want.shape[1]


def test_the_raw_embeddings_reply_has_openai_shape(served):
    r = httpx.post(f"{served[0]}/v1/embeddings", headers=AUTH, timeout=60,
                   json={"model": "cranfield", "input": "shock waves",
                         "encoding_format": "float", "user": "someone"})
    assert r.status_code == 200, r.text
    EmbeddingsResponse.model_validate(r.json())
    assert set(r.json()) == {"object", "data", "model", "usage"}
    assert r.json()["object"] == "list" and r.json()["data"][0]["object"] == "embedding"
    assert r.json()["usage"]["prompt_tokens"] == 4  # [CLS] shock waves [SEP] (MiniLM)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"input": []}, "BadRequestError", "input is empty"),
    ({"input": ["t"] * 101}, "BadRequestError", "101 inputs; the limit is 100"),
    ({"input": ["fine", ""]}, "BadRequestError", "input[1] is empty"),
    ({"input": [[101, 2023]]}, "BadRequestError", "input[0] is token ids"),
    ({"dimensions": 256}, "BadRequestError",
     "dimensions is 256; model 'cranfield' gives 384-dimensional embeddings"),
    ({"model": "text-embedding-3-small"}, "NotFoundError",
     "unknown model 'text-embedding-3-small': the models here are the served indexes with "
     "a dense leg: cranfield"),
    ({"key": "wrong"}, "AuthenticationError", "unknown API key"),
])
def test_openai_client_surfaces_bad_requests(served, kwargs, error, message):
    key = kwargs.pop("key", KEY)
    args = {"model": "cranfield", "input": ["a flat plate"], **kwargs}
    with pytest.raises(getattr(openai, error)) as caught:
        openai_client(served[0], key).embeddings.create(**args)
    status = {"BadRequestError": 400, "NotFoundError": 404, "AuthenticationError": 401}[error]
    assert caught.value.status_code == status
    assert message in str(caught.value)  # the client puts error.message in its text
    assert caught.value.body["message"].startswith(message.split("'")[0])


def test_embeddings_are_logged_with_the_index_and_any_key_may_embed(served):
    r = httpx.post(f"{served[0]}/v1/embeddings", timeout=60,
                   headers={"Authorization": f"Bearer {BM25_KEY}",
                            "X-Request-ID": "compat-embed-1"},
                   json={"model": "cranfield", "input": ["flow"]})
    assert r.status_code == 200, r.text
    (rec,) = log_records(served[1], "compat-embed-1")
    assert rec["path"] == "/v1/embeddings" and rec["index"] == "cranfield"
    assert rec["key"] == "bm25-only" and rec["status"] == 200


def test_bodies_over_the_size_limit_are_413_in_each_providers_shape(index):
    from intentrank.service import Limits

    settings = ServiceSettings(indexes={"cranfield": index}, pipelines={"bm25": "bm25"},
                               rerankers={"slow": [{"slow_test": {"seconds": 0}}]},
                               require_keys=False, access_log=False,
                               limits=Limits(max_body_bytes=1_000))
    with Server(create_app(settings)) as server:
        big = ["x" * 2_000]
        r = httpx.post(f"{server.url}/v1/embeddings", json={"model": "cranfield",
                                                            "input": big})
        assert r.status_code == 413 and "1000 bytes" in r.json()["error"]["message"]
        r = httpx.post(f"{server.url}/v2/rerank", json={"query": "q", "documents": big})
        assert r.status_code == 413 and "1000 bytes" in r.json()["message"]


# -- load ---------------------------------------------------------------------------------------
class SlowEncoding:
    """An index whose query encoder takes ``seconds`` (a stand-in for a big embedder)."""

    def __init__(self, index: Any, seconds: float) -> None:
        self._index, self.seconds = index, seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def __len__(self) -> int:
        return len(self._index)

    def encode_queries(self, texts: list[str]) -> Any:
        time.sleep(self.seconds)
        return self._index.encode_queries(texts)


def test_a_full_queue_answers_503_with_retry_after_on_both(index):
    settings = ServiceSettings(
        indexes={"cranfield": SlowEncoding(index, 0.4)}, pipelines={"bm25": "bm25"},
        rerankers={"slow": [{"slow_test": {"seconds": 0.4}}]}, require_keys=False,
        workers=1, queue_limit=1, retry_after_s=3, access_log=False)
    with Server(create_app(settings)) as server:
        calls = [("/v2/rerank", {"model": "slow", "query": "q", "documents": ["a", "b"]}),
                 ("/v1/embeddings", {"model": "cranfield", "input": "flow"})]
        for path, body in calls:
            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                responses = list(pool.map(lambda _, p=path, b=body: httpx.post(
                    f"{server.url}{p}", json=b, timeout=30), range(6)))
            codes = sorted(r.status_code for r in responses)
            assert codes.count(200) >= 2 and codes.count(503) >= 3, (path, codes)
            busy = next(r for r in responses if r.status_code == 503)
            assert busy.headers["retry-after"] == "3"
            message = busy.json()["message"] if "rerank" in path else \
                busy.json()["error"]["message"]
            assert "queue limit 1" in message
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # the client's class for it
            outcomes = list(pool.map(lambda _: _embed_or_error(server.url), range(4)))
        assert any(isinstance(o, openai.InternalServerError) and o.status_code == 503
                   for o in outcomes), outcomes


def _embed_or_error(url: str) -> Any:
    try:
        return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0,
                             timeout=30).embeddings.create(model="cranfield", input="flow")
    except openai.APIStatusError as exc:
        return exc


# -- the schema -----------------------------------------------------------------------------
def test_the_openapi_schema_documents_them(served):
    schema = httpx.get(f"{served[0]}/openapi.json").json()
    for path in ("/v1/rerank", "/v2/rerank", "/v1/embeddings"):
        op = schema["paths"][path]["post"]
        assert op["tags"] == ["compatible APIs"]
        assert {"200", "400", "401", "404", "413", "503"} <= set(op["responses"])
        assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    rerank = schema["components"]["schemas"]["CohereRerankRequest"]["properties"]
    assert {"model", "query", "documents", "top_n", "return_documents"} <= set(rerank)
    embed = schema["components"]["schemas"]["EmbeddingsRequest"]["properties"]
    assert {"model", "input", "encoding_format"} <= set(embed)


# -- intentrank serve itself ----------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_both_clients_against_intentrank_serve(index, tmp_path, texts, expected):
    """The command as deployed: `intentrank serve --index ... -p bm25` with a key from
    $INTENTRANK_API_KEYS, the default reranker, on 127.0.0.1."""
    port = _free_port()
    env = {**os.environ, "INTENTRANK_API_KEYS": hash_key(KEY),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "intentrank.cli", "serve", "--index", f"cran={index.path}",
         "-p", "bm25", "--port", str(port), "--access-log", str(tmp_path / "log.jsonl")],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"intentrank serve did not start:\n{proc.stdout.read()}")
            time.sleep(0.25)
        resp = cohere_v2(url).rerank(model="cross_encoder", query=QUERY, documents=texts,
                                     top_n=3)
        assert [r.index for r in resp.results] == best_first(expected)[:3]
        assert resp.results[0].relevance_score == pytest.approx(
            float(expected[resp.results[0].index]), rel=REL)
        got = openai_client(url).embeddings.create(model="cran", input=[QUERY])
        assert np.allclose(got.data[0].embedding, index.encode_queries([QUERY])[0],
                           rtol=REL, atol=1e-6)
        with pytest.raises(openai.AuthenticationError):
            openai_client(url, "wrong").embeddings.create(model="cran", input=[QUERY])
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
