"""`serve --watch-index` merges in the background (service/merging.py): after a switch to a
generation whose segments the tiered policy would merge, a thread runs merge_tiers while
requests keep answering from the generation they read; the service then switches to the
merged one, which answers the same."""

from __future__ import annotations

import io
import itertools
import json
import os
import threading
import time

from test_service_lifecycle import _wait

QUERIES = ["boundary layer", "heat transfer", "supersonic flow", "wing lift", "shock"]


def _crowded(cranfield, where) -> list:  # noqa: ANN001
    """Cranfield's first 180 abstracts; the first 120 built at ``where`` plus ten segments
    of 5 added without the policy's merges (11 segments in the lowest tier)."""
    from intentrank.index import IndexSettings, build_index, update

    docs = list(itertools.islice(cranfield.corpus(), 180))
    build_index(docs[:120], where, IndexSettings(legs=("bm25", "tfidf"))).close()
    for start in range(120, 170, 5):
        update.upsert(where, docs[start:start + 5], merge_policy=False)
    return docs


def _held_merges(monkeypatch) -> tuple[threading.Event, threading.Event, list]:  # noqa: ANN001
    """(merging, release, seen): a merge's commit sets ``merging``, records its thread's
    (nice, faiss threads) in ``seen``, then waits for ``release`` (at most 30 s)."""
    from intentrank.index import update

    merging, release, seen = threading.Event(), threading.Event(), []
    real_commit = update.write_commit

    def slow_commit(old, change, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if change.merged:
            import faiss

            seen.append((os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
                         faiss.omp_get_max_threads()))
            merging.set()
            release.wait(30)
        return real_commit(old, change, *args, **kwargs)

    monkeypatch.setattr(update, "write_commit", slow_commit)
    return merging, release, seen


def _watching_app(where, log: io.StringIO):  # noqa: ANN001, ANN202
    """The service over index ``c`` at ``where``, watching it every 0.1 s, logging to ``log``."""
    from intentrank.service import ServiceSettings, create_app

    return create_app(ServiceSettings(indexes={"c": where}, pipelines={"bm25": "bm25"},
                                      rerankers={}, require_keys=False, watch_s=0.1,
                                      access_log=log))


def test_a_crowded_tier_is_merged_in_the_background_while_searches_answer(
        cranfield, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from intentrank.index import update
    from intentrank.index.store import Index

    where = tmp_path / "idx"
    docs = _crowded(cranfield, where)
    merging, release, _ = _held_merges(monkeypatch)  # a merge waits until searches have run
    log = io.StringIO()
    with TestClient(_watching_app(where, log)) as client:
        def search(q: str) -> tuple[str, list]:
            r = client.post("/search", json={"query": q, "pipeline": "bm25"})
            assert r.status_code == 200, r.text
            body = r.json()
            return body["generation"], [(x["doc_id"], x["score"]) for x in body["results"]]

        with monkeypatch.context() as off:
            off.setattr(update, "merge_candidates", lambda entries: None)
            added = update.upsert(where, docs[170:180])  # the switch that starts the merge
        assert added.segments == 12
        assert merging.wait(60), "no background merge started"
        during, seconds = [], []
        for q in QUERIES * 4:  # the merge is under way: requests answer, from the add's commit
            t = time.perf_counter()
            during.append((q, *search(q)))
            seconds.append(time.perf_counter() - t)
        assert {g for _, g, _ in during} == {added.generation}
        assert max(seconds) < 5
        release.set()
        _wait(lambda: client.get("/health").json()["generations"]["c"] != added.generation,
              what="the merged generation")
        merged_gen = client.get("/health").json()["generations"]["c"]
        after = {q: search(q) for q in QUERIES}
    with Index(where) as index:
        assert index.generation == merged_gen and len(index.segments) < 12
    for q, _, hits in during:
        gen, merged_hits = after[q]
        assert gen == merged_gen
        assert [d for d, _ in merged_hits] == [d for d, _ in hits]
        for (_, a), (_, b) in zip(merged_hits, hits, strict=True):
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b))
    # the merger logs after its commit, which the watcher may switch to first
    _wait(lambda: '"index_merge' in log.getvalue(), what="the merge's log line")
    events = [json.loads(x) for x in log.getvalue().splitlines() if '"index_merge' in x]
    assert [e["event"] for e in events] == ["index_merge"]
    assert events[0]["to"] == merged_gen


def test_service_writes_leave_the_policy_s_merges_to_the_background_merger(
        cranfield, tmp_path, monkeypatch):
    """Under --watch-index a POST /documents commits its segment only (no inline merge, the
    response does not wait for one); the background merger merges after the switch; a write
    that arrives while that merge runs waits for it and is committed after it."""
    from fastapi.testclient import TestClient

    from intentrank.index.store import Index

    where = tmp_path / "idx"
    docs = _crowded(cranfield, where)
    with Index(where) as index:
        assert len(index.segments) == 11
    merging, release, merge_thread = _held_merges(monkeypatch)  # a merge waits for the test
    log = io.StringIO()
    app = _watching_app(where, log)

    def post(batch: list) -> dict:
        r = client.post("/documents", json={"index": "c", "documents": [
            {"id": d.id, "text": d.text, "title": d.title} for d in batch]})
        assert r.status_code == 200, r.text
        return r.json()

    with TestClient(app) as client:
        t = time.perf_counter()
        body = post(docs[170:175])  # 12 segments: the policy would merge
        assert time.perf_counter() - t < 20 and body["added"] == 5
        assert merging.wait(60), "no background merge started"
        with Index(where) as index:  # the write's own commit: its segment, nothing merged
            assert index.generation == body["generation"] and len(index.segments) == 12
        second: dict = {}
        writer = threading.Thread(target=lambda: second.update(post(docs[175:180])))
        writer.start()
        time.sleep(0.5)
        assert writer.is_alive(), "a write during the merge did not wait for it"
        release.set()
        writer.join(60)
        assert second["added"] == 5
        _wait(lambda: client.get("/health").json()["generations"]["c"] == second["generation"],
              what="the second write's generation")
    with Index(where) as index:
        assert len(index) == 180 and len(index.segments) == 4  # 10 merged into 1, one more
        assert index.ids[-5:] == [d.id for d in docs[175:180]]
    # the merger logs after its commit, which the watcher may switch to first
    _wait(lambda: '"index_merge' in log.getvalue(), what="the merge's log line")
    events = [json.loads(x) for x in log.getvalue().splitlines() if '"index_merge' in x]
    assert [e["event"] for e in events] == ["index_merge"]
    assert merge_thread == [(19, 1)]  # the merge yields: lowest priority, one faiss thread
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == 0
