"""The service under change and at the end of its life: a rebuild of a served index
directory is switched to atomically (each response names one generation and lists exactly
that generation's documents; /health and the access log say when it switched); SIGTERM under
load lets in-flight requests finish, answers new ones 503, completes the access log and
exits 0. Real indexes (BM25 over Cranfield abstracts), real uvicorn, a real signal."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def _build(cranfield, where: Path, skip: int, n: int = 120):
    from intentrank.index import IndexSettings, build_index

    docs = list(itertools.islice(cranfield.corpus(), skip, skip + n))
    return build_index(docs, where, IndexSettings(legs=("bm25",)), overwrite=True)


def _watched_app(cranfield, where: Path):
    """A BM25 index of 120 Cranfield abstracts at ``where`` and an app watching it every
    0.1 s: (app, the index's first generation, the access log)."""
    from intentrank.service import ServiceSettings, create_app

    first = _build(cranfield, where, skip=0)
    generation = first.generation
    first.close()
    log = io.StringIO()
    app = create_app(ServiceSettings(indexes={"c": where}, pipelines={"bm25": "bm25"},
                                     rerankers={}, require_keys=False, watch_s=0.1,
                                     access_log=log))
    return app, generation, log


def _wait(predicate, seconds: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")


def test_a_rebuild_is_served_atomically_and_said_in_health_and_log(cranfield, tmp_path):
    from fastapi.testclient import TestClient

    where = tmp_path / "idx"
    app, gen_a, log = _watched_app(cranfield, where)
    queries = ["boundary layer", "heat transfer", "supersonic flow", "wing lift", "shock"]
    seen: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    failures: list[int] = []
    stop = threading.Event()
    with TestClient(app) as client:
        assert client.get("/health").json()["generations"] == {"c": gen_a}

        def hammer() -> None:
            for i in itertools.count():  # bounded by the rebuilds below, and 2,000 requests
                if stop.is_set() or i >= 2000:
                    return
                q = queries[i % len(queries)]
                r = client.post("/search", json={"query": q, "pipeline": "bm25"})
                if r.status_code != 200:
                    failures.append(r.status_code)
                    continue
                body = r.json()
                seen.setdefault((q, body["generation"]), set()).add(
                    tuple(x["doc_id"] for x in body["results"]))

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        gens = [gen_a]
        try:
            for k in (1, 2):  # two rebuilds under load, each of other documents
                idx = _build(cranfield, where, skip=60 * k)
                gens.append(idx.generation)
                idx.close()
                _wait(lambda g=gens[-1]: client.get("/health").json()["generations"]
                      == {"c": g}, what=f"generation {gens[-1]}")
                time.sleep(0.3)  # some requests on the new generation
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        health = client.get("/health").json()
    assert not failures
    assert health["reloads"] == 2 and health["reload_errors"] == 0
    assert {g for _, g in seen} <= set(gens) and gens[-1] in {g for _, g in seen}
    for (q, g), lists in seen.items():  # one generation per response, never a mix
        assert len(lists) == 1, (q, g, lists)
        from intentrank.index import Index
        from intentrank.retrieve.retrievers import BM25Retriever
        if g == gens[-1]:
            with Index(where) as idx:
                assert idx.generation == g
                expected = BM25Retriever(idx, depth=10).search(q).doc_ids[:10]
            assert list(next(iter(lists))) == expected
    switches = [json.loads(x) for x in log.getvalue().splitlines() if '"event"' in x]
    assert [(s["event"], s["from"], s["to"]) for s in switches] == [
        ("index_reload", gens[0], gens[1]), ("index_reload", gens[1], gens[2])]
    # the old generations were closed once unused: the next build deletes them
    _build(cranfield, where, skip=0).close()
    left = sorted(p.name for p in where.iterdir() if p.name.startswith("gen-"))
    assert gens[0] not in left and gens[1] not in left


SERVER = """
import sys
sys.path.insert(0, {tests!r})
import service_helpers  # registers the slow_test stage
from intentrank.service.command import serve
from intentrank.service.settings import ServiceSettings
settings = ServiceSettings(indexes={{"c": {index!r}}}, rerankers={{}}, require_keys=False,
                           pipelines={{"bm25": "bm25", "slow": [
                               {{"bm25": {{"depth": 5}}}}, {{"slow_test": {{"seconds": 2.0}}}}]}},
                           workers=4, access_log={log!r}, drain_s=30)
serve(settings, port={port})
"""


def test_sigterm_drains_in_flight_refuses_new_logs_all_and_exits_0(cranfield, tmp_path):
    where = tmp_path / "idx"
    _build(cranfield, where, skip=0).close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    access = tmp_path / "access.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SERVER).format(
        tests=str(ROOT / "tests"), index=str(where), log=str(access), port=port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                return httpx.get(url + "/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                return False

        _wait(up, 120, "the server")
        results: dict[str, int] = {}

        def call(rid: str, pipeline: str) -> None:
            try:
                r = httpx.post(url + "/search", json={"query": "wing", "pipeline": pipeline},
                               headers={"X-Request-Id": rid}, timeout=60)
                results[rid] = r.status_code
            except httpx.HTTPError:
                results[rid] = 0

        slow = [threading.Thread(target=call, args=(f"slow-{i}", "slow")) for i in range(3)]
        for t in slow:
            t.start()
        _wait(lambda: httpx.get(url + "/health").json()["in_flight"] == 3, 30, "3 in flight")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        for i in range(5):  # new requests while the slow ones run: 503
            call(f"new-{i}", "bm25")
        for t in slow:
            t.join(60)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    out = proc.stdout.read() if proc.stdout else ""
    assert code == 0, out
    assert all(results[f"slow-{i}"] == 200 for i in range(3)), results
    assert all(results[f"new-{i}"] == 503 for i in range(5)), results
    logged = {r["request_id"]: r["status"] for r in
              map(json.loads, access.read_text().splitlines()) if "request_id" in r}
    for rid, status in results.items():
        assert logged.get(rid) == status, (rid, status, logged.get(rid))
    # the 3 slow ones (a /health poll answered a moment before may still be counted)
    draining = re.search(r"SIGTERM: draining \((\d+) in flight", out)
    assert draining and int(draining.group(1)) >= 3, out


def test_a_broken_new_generation_is_refused_and_the_old_one_stays_served(cranfield,
                                                                         tmp_path):
    import shutil

    from fastapi.testclient import TestClient

    from intentrank.index import layout

    where = tmp_path / "idx"
    app, gen_a, log = _watched_app(cranfield, where)
    with TestClient(app) as client:
        before = client.post("/search", json={"query": "wing", "pipeline": "bm25"}).json()
        broken = layout.new_generation_name()
        shutil.copytree(where / gen_a, where / broken)
        victim = max((p for p in (where / broken).rglob("*") if p.is_file()),
                     key=lambda p: p.stat().st_size)
        victim.write_bytes(victim.read_bytes()[:10])  # truncated: opening it fails
        layout.write_current(where, broken)
        _wait(lambda: client.get("/health").json()["reload_errors"] == 1,
              what="the failed reload")
        time.sleep(0.5)  # the watcher does not retry the same broken generation
        health = client.get("/health").json()
        after = client.post("/search", json={"query": "wing", "pipeline": "bm25"}).json()
    assert health["reload_errors"] == 1 and health["reloads"] == 0
    assert health["generations"] == {"c": gen_a}
    assert after["generation"] == gen_a and after["results"] == before["results"]
    events = [json.loads(x) for x in log.getvalue().splitlines() if '"event"' in x]
    assert [e["event"] for e in events] == ["index_reload_failed"]
    assert str(victim.name) in events[0]["error"]


def test_a_reload_reuses_the_loaded_query_embedder(cranfield, tmp_path):
    from intentrank.index import IndexSettings, build_index
    from intentrank.service import ServiceSettings
    from intentrank.service.engine import Engine

    docs = list(itertools.islice(cranfield.corpus(), 40))
    settings = IndexSettings(legs=("bm25", "dense"))
    build_index(docs[:30], tmp_path / "idx", settings, embedding_cache=False).close()
    engine = Engine(ServiceSettings(indexes={"c": tmp_path / "idx"},
                                    pipelines={"dense": "dense"}, rerankers={},
                                    require_keys=False))
    try:
        before = engine.indexes["c"]
        model = before.embedder
        build_index(docs[10:], tmp_path / "idx", settings, embedding_cache=False,
                    overwrite=True).close()
        changed = engine.generations.reload()
        after = engine.indexes["c"]
        assert changed == {"c": (before.generation, after.generation)}
        assert after is not before and after.embedder is model and len(after) == 30
    finally:
        engine.close()


def test_updates_are_served_as_they_commit(cranfield, tmp_path):
    """`serve --watch-index` and the update commands: an upsert, then a delete, each switched
    to (its generation in /health) with the documents it added found and the ones it
    deleted gone."""
    from fastapi.testclient import TestClient

    from intentrank.index.update import delete, upsert
    from intentrank.types import Document

    where = tmp_path / "idx"
    app, gen_a, _ = _watched_app(cranfield, where)
    new = Document("zz-new", "a hypersonic scramjet inlet with boundary layer bleed")
    with TestClient(app) as client:
        def top(query: str) -> list[str]:
            r = client.post("/search", json={"query": query, "pipeline": "bm25"})
            assert r.status_code == 200, r.text
            return [x["doc_id"] for x in r.json()["results"]]

        assert "zz-new" not in top("scramjet inlet bleed")
        added = upsert(where, [new])
        _wait(lambda: client.get("/health").json()["generations"] == {"c": added.generation},
              what="the upsert's generation")
        assert top("scramjet inlet bleed")[0] == "zz-new"
        removed = delete(where, ["zz-new"])
        _wait(lambda: client.get("/health").json()["generations"] == {"c": removed.generation},
              what="the delete's generation")
        assert "zz-new" not in top("scramjet inlet bleed")
    assert gen_a not in (added.generation, removed.generation)
