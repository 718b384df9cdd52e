"""The leak fuzzer: 10,000 randomized requests across every endpoint of the service, over a
real index (900 SciFact abstracts in three tenants with acl groups; BM25, dense, TF-IDF and
graph legs) and eight keys (scoped readers, a scoped writer, an unscoped admin, a key
revoked mid-run, a key that expires mid-run), in-process, answers by a scripted LLM whose
every prompt is inspected.

Requests copy other tenants' text verbatim as queries and conversation turns, send filters
that try to widen the scope (``OR tenant = ...``, negations, ids of other tenants'
documents, malformed text), take k at its extremes, and try writes with read-only keys.
Goals (asserted): no document outside the key's scope returned, cited or placed in an LLM
prompt; no write accepted from a key without ``write``; no request served with a revoked or
expired key; no answer that tells whether an id outside the scope is held by a document
(existence probes: the same write, delete or search for an id another tenant holds and for an
absent one answer alike). :func:`test_no_attribute_of_the_view_leaks` probes every attribute
the scoped view exposes, for every key. With ``$INTENTRANK_LEAKS_OUT`` the counts per
endpoint are written there as JSON (``bench/leak_table.py`` renders docs/reliability.md's
table from it)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from scope_helpers import KEYS, LIMITS, fingerprint, make_keys, sees, settings_for, tenant_index
from service_helpers import ScriptedLLM

from intentrank.service import create_app
from intentrank.service.keyring import KeyRing, revoke_key

pytest.importorskip("fastapi")
pytest.importorskip("intentrank.filters")

REQUESTS = int(os.environ.get("INTENTRANK_LEAK_REQUESTS", "10000"))
SEED = 49
READERS = [k for k in KEYS if k != "admin"]
WIDENING = [None, None, None, 'tenant = "acme"', 'tenant = "globex" OR tenant = "initech"',
            'NOT tenant = "acme"', 'NOT (tenant = "acme")', 'acl IN ("finance", "legal")',
            'tenant != "nobody" OR acl = "research"', "acl = \"all-staff\" OR id PREFIX \"1\"",
            'tenant = "acme" OR (tenant =', "tenant = acme", ") OR (", 'tenant IN ()',
            'NOT NOT tenant = "initech"']
PIPELINES = ["bm25", "bm25", "tfidf", "graph", "dense", "rrf", None]
ENDPOINTS = {"search": 30, "search conversation": 12, "answer": 16, "rerank": 2,
             "cohere rerank": 2, "embeddings": 1, "evaluate": 3, "pipelines": 6, "reports": 3,
             "documents upsert": 8, "documents delete": 7, "no or unknown key": 6,
             "existence probe": 6}
# what an existence probe sends for an id (the same for one another tenant holds and an absent one)
PROBES = ("upsert", "delete", "delete by ids", "search by id")


class Fuzzer:
    def __init__(self, client: httpx.AsyncClient, app: Any, secrets: dict[str, str], index: Any,
                 llm: ScriptedLLM, keys_file: Path) -> None:
        self.client, self.app, self.secrets, self.llm = client, app, secrets, llm
        self.keys_file = keys_file
        self.rng = random.Random(SEED)
        self.meta = {i: index.doc(i).metadata for i in index.ids}
        self.text = {i: index.doc_text(i) for i in index.ids}
        self.prints = {i: fingerprint(t) for i, t in self.text.items()}
        self.ids = list(index.ids)
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.dead: set[str] = set()  # revoked or expired keys
        self.violations: list[str] = []

    # -- helpers --------------------------------------------------------------------
    def key(self, readers_only: bool = False) -> str:
        return self.rng.choice(READERS if readers_only else [*READERS, "admin"])

    def sees(self, key: str, doc_id: str) -> bool:
        return key == "admin" or sees(key, self.meta[doc_id])

    def foreign_text(self, key: str) -> str:
        other = self.rng.choice([i for i in self.rng.sample(self.ids, 20)
                                 if not self.sees(key, i)] or self.ids)
        words = self.text[other].split()
        start = self.rng.randrange(max(1, len(words) - 10))
        return " ".join(words[start:start + self.rng.choice([5, 20, 60, 200])])

    def top_k(self) -> int:
        return self.rng.choice([1, 1, 2, 5, 10, LIMITS.max_top_k, LIMITS.max_top_k,
                                LIMITS.max_top_k + 1, 0, -3])

    async def send(self, endpoint: str, key: str | None, method: str, path: str,
             **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.secrets.get(key, key)}"} if key else {}
        start = time.perf_counter()
        r = await self.client.request(method, path, headers=headers, **kwargs)
        c = self.counts[endpoint]
        c["seconds"] += time.perf_counter() - start
        c["requests"] += 1
        c[f"status {r.status_code // 100}xx"] += 1
        if key in self.dead:
            c["requests with a revoked or expired key"] += 1
            if r.status_code != 401:
                c["served after revocation or expiry"] += 1
                self.violations.append(f"{endpoint}: {key} served ({r.status_code}) when dead")
        return r

    def answer_of(self, r: Any, doc_id: str) -> tuple[int, Any]:
        """What a response tells about ``doc_id``: its status, and its body without what
        differs between any two requests (the request id, timings, the generation), the id
        itself replaced by a placeholder."""
        body = r.json()
        if isinstance(body, dict) and "results" in body:
            body = [d["doc_id"] for d in body["results"]]
        elif isinstance(body, dict):
            body = {k: v for k, v in body.items() if k not in (
                "request_id", "seconds", "generation")}
        return r.status_code, json.loads(json.dumps(body).replace(doc_id, "<id>"))

    def check_docs(self, endpoint: str, key: str, doc_ids: list[str], what: str) -> None:
        c = self.counts[endpoint]
        c[f"documents {what}"] += len(doc_ids)
        leaked = [d for d in doc_ids if d in self.meta and not self.sees(key, d)]
        c[f"outside the scope, {what}"] += len(leaked)
        if leaked:
            self.violations.append(f"{endpoint}: {key} got {leaked[:3]} {what}")

    # -- endpoints ------------------------------------------------------------------
    async def search(self, conversation: bool = False, answer: bool = False) -> None:
        endpoint = "answer" if answer else \
            "search conversation" if conversation else "search"
        key = self.key()
        sent: list[str] = []
        body: dict[str, Any] = {"top_k": self.top_k()}
        question = self.foreign_text(key) if self.rng.random() < 0.7 else \
            self.rng.choice(["cancer", "vitamin D", "T cells in mice", "the effect"])
        sent.append(question)
        if conversation:
            turns = [{"question": self.foreign_text(key), "answer": self.foreign_text(key)}
                     for _ in range(self.rng.choice([1, 2, 3]))]
            sent += [t for turn in turns for t in turn.values()]
            body["conversation"] = {"turns": turns, "question": question}
        else:
            body["query"] = question
        if answer:
            body["pipeline"] = "qa"
        elif not conversation and (p := self.rng.choice(PIPELINES)):
            body["pipeline"] = p
        if (f := self.rng.choice(WIDENING)) is not None:
            body["filter"] = f
        before = len(self.llm.requests)
        r = await self.send(endpoint, key, "POST", "/answer" if answer else "/search", json=body)
        if r.status_code != 200:
            return
        self.check_docs(endpoint, key, [d["doc_id"] for d in r.json()["results"]], "returned")
        if answer and r.json()["answer"]:
            self.check_docs(endpoint, key, [c["doc_id"] for c in
                                            r.json()["answer"]["citations"]], "cited")
        self.check_prompts(endpoint, key, self.llm.requests[before:], sent)

    def check_prompts(self, endpoint: str, key: str, requests: list[dict], sent: list[str]
                      ) -> None:
        c = self.counts[endpoint]
        for req in requests:
            text = " ".join(" ".join(m["content"].split()) for m in req["messages"])
            for s in sorted(sent, key=len, reverse=True):  # what the user sent is not a leak
                text = text.replace(" ".join(s.split()), " ")
            c["LLM prompts inspected"] += 1
            found = [d for d, fp in self.prints.items() if fp in text]
            c["passages in prompts"] += len(found)
            leaked = [d for d in found if not self.sees(key, d)]
            c["outside the scope, in prompts"] += len(leaked)
            if leaked:
                self.violations.append(f"{endpoint}: {key}'s prompt held {leaked[:3]}")

    async def rerank(self) -> None:
        key = self.key()
        own = [i for i in self.rng.sample(self.ids, 30) if self.sees(key, i)][:5]
        cands = [{"id": f"mine-{n}", "text": self.text[i][:300]}
                 for n, i in enumerate(own or self.ids[:1])]
        r = await self.send("rerank", key, "POST", "/rerank", json={
            "query": self.foreign_text(key), "candidates": cands,
            "top_k": self.rng.choice([None, 1, len(cands)])})
        if r.status_code == 200:
            got = [d["doc_id"] for d in r.json()["results"]]
            self.counts["rerank"]["documents returned"] += len(got)
            extra = set(got) - {c["id"] for c in cands}
            self.counts["rerank"]["outside the scope, returned"] += len(extra)
            if extra:
                self.violations.append(f"rerank: {key} got {sorted(extra)[:3]}")

    async def cohere(self) -> None:
        key = self.key()
        docs = [self.foreign_text(key)[:300] for _ in range(self.rng.choice([1, 3, 8, 9]))]
        r = await self.send("cohere rerank", key, "POST", self.rng.choice(["/v1/rerank",
                                                                     "/v2/rerank"]),
                      json={"query": self.foreign_text(key)[:500], "documents": docs,
                            "top_n": self.rng.choice([None, 1, 100]),
                            "return_documents": True})
        if r.status_code == 200:
            got = r.json()["results"]
            self.counts["cohere rerank"]["documents returned"] += len(got)
            bad = [x for x in got if x["document"]["text"] != docs[x["index"]]]
            self.counts["cohere rerank"]["outside the scope, returned"] += len(bad)
            if bad:
                self.violations.append(f"cohere rerank: {key} got a document not sent")

    async def embeddings(self) -> None:
        key = self.key()
        await self.send("embeddings", key, "POST", "/v1/embeddings", json={
            "input": [self.foreign_text(key)[:300]], "model": self.rng.choice(
                [None, "scifact", "../scifact"])})

    async def evaluate(self) -> None:
        key = self.key()
        r = await self.send("evaluate", key, "POST", "/evaluate", json={
            "run": "1 Q0 4983 1 2.0 t\n", "qrels": "1 0 4983 1\n"})
        allowed = key == "admin" or "evaluate" in KEYS[key]["permissions"]
        if r.status_code == 200 and not allowed and key not in self.dead:
            self.violations.append(f"evaluate: {key} without the permission was served")

    async def pipelines(self) -> None:
        key = self.key()
        r = await self.send("pipelines", key, "GET", "/pipelines")
        if r.status_code == 200:
            shown = r.json()["indexes"][0]["documents"]
            want = sum(self.sees(key, d) for d in self.ids)
            self.counts["pipelines"]["document counts checked"] += 1
            if shown != want:
                self.violations.append(f"pipelines: {key} shown {shown} documents, sees {want}")

    async def reports(self) -> None:
        await self.send("reports", self.key(), "GET", self.rng.choice(
            ["/reports", "/reports/r1.html", "/reports/keys.yaml"]))

    async def write(self, delete: bool) -> None:
        endpoint = "documents delete" if delete else "documents upsert"
        key = self.rng.choice(READERS)  # not admin: it could empty a tenant by a filter
        writer = "write" in KEYS[key]["permissions"]
        # the writer mostly tries outside its scope; one in twenty of its writes is real
        # (each commits a generation the service then switches to)
        own = writer and self.rng.random() < 0.05
        target = self.rng.choice([i for i in self.ids if self.sees(key, i) == own]
                                 if writer else self.ids)
        c = self.counts[endpoint]
        if delete:
            how = self.rng.randrange(3)
            if how == 0:
                r = await self.send(endpoint, key, "DELETE", f"/documents/{target}")
            else:
                r = await self.send(endpoint, key, "POST", "/documents/delete", json={
                    "ids": [target]} if how == 1 else {"filter": 'tenant = "acme"'})
            if r.status_code == 200:
                gone = r.json()["deleted"]
                c["documents deleted in scope"] += gone
                if how == 2 and gone:  # ANDed with the writer's scope: matches nothing
                    self.violations.append(f"{endpoint}: {key} deleted {gone} by a filter")
                elif how < 2:
                    self.ids.remove(target)
        else:
            tenant = "globex" if own else self.rng.choice(
                ["acme", "initech"] if writer else ["acme", "globex", "initech"])
            new = f"fuzz-{self.rng.randrange(10**6)}"  # a new id in the writer's namespace
            doc_id = self.rng.choice([target, f"{key}:{new}" if writer else new])
            doc = {"id": doc_id, "text": f"Fuzzer note {doc_id}: " + " ".join(  # its own words
                       self.rng.choices(["quokka", "lymph", "assay", "cohort", "dose"], k=30)),
                   "metadata": {"tenant": tenant, "acl": ["finance"]}}
            r = await self.send(endpoint, key, "POST", "/documents", json={"documents": [doc]})
            if r.status_code == 200:  # the oracle learns the new or changed document
                c["documents written in scope"] += 1
                if doc["id"] not in self.meta:
                    self.ids.append(doc["id"])
                self.meta[doc["id"]] = doc["metadata"]
                self.text[doc["id"]] = doc["text"]
                self.prints[doc["id"]] = fingerprint(doc["text"])
        if not writer:
            c["write attempts by keys without write"] += 1
            if r.status_code < 300:
                c["writes accepted from keys without write"] += 1
                self.violations.append(f"{endpoint}: {key} without write was served")

    async def existence(self) -> None:
        """The same request for an id another tenant's document holds and for an absent id of
        the same shape: the answers must be the same (status and body)."""
        key = self.rng.choice(READERS)
        hidden = [i for i in self.rng.sample(self.ids, 20) if not self.sees(key, i)]
        if not hidden:
            return
        held = self.rng.choice(hidden)
        absent = f"{held}-{self.rng.randrange(10**6)}"  # never an id: the index has none so
        probe = self.rng.choice(PROBES)
        tenant = KEYS[key].get("tenant", "acme")
        answers = []
        for doc_id in (held, absent):
            if probe == "upsert":
                r = await self.send("existence probe", key, "POST", "/documents", json={
                    "documents": [{"id": doc_id, "text": "Fuzzer probe of quokka assays.",
                                   "metadata": {"tenant": tenant, "acl": ["finance"]}}]})
            elif probe == "delete":
                r = await self.send("existence probe", key, "DELETE", f"/documents/{doc_id}")
            elif probe == "delete by ids":
                r = await self.send("existence probe", key, "POST", "/documents/delete",
                                    json={"ids": [doc_id]})
            else:
                r = await self.send("existence probe", key, "POST", "/search", json={
                    "query": "cells", "pipeline": "bm25", "filter": f'id = "{doc_id}"'})
            answers.append(self.answer_of(r, doc_id))
        c = self.counts["existence probe"]
        c["existence probes"] += 1
        if answers[0][0] < 300 and probe != "search by id":  # a write went through
            self.violations.append(f"existence probe: {key}'s {probe} of {held} was served")
        if answers[0] != answers[1]:
            c["existence told apart"] += 1
            self.violations.append(f"existence probe: {key}'s {probe} tells {held} exists: "
                                   f"{answers[0]} vs {answers[1]}")

    async def anonymous(self) -> None:
        key = self.rng.choice([None, "ir_guess", "x" * 300, "Bearer"])
        r = await self.send("no or unknown key", key, "POST", "/search", json={"query": "cancer"})
        if r.status_code != 401:
            self.violations.append(f"no or unknown key: {r.status_code}")

    async def run(self, n: int) -> None:
        kinds, weights = zip(*ENDPOINTS.items(), strict=True)
        act = {"search": self.search, "search conversation": lambda: self.search(True),
               "answer": lambda: self.search(False, True), "rerank": self.rerank,
               "cohere rerank": self.cohere, "embeddings": self.embeddings,
               "evaluate": self.evaluate, "pipelines": self.pipelines,
               "reports": self.reports, "documents upsert": lambda: self.write(False),
               "documents delete": lambda: self.write(True), "no or unknown key": self.anonymous,
               "existence probe": self.existence}
        for i in range(n):
            if i == n // 3:  # from now on the expiring key is past its expiry
                self.app.state.wall_clock = lambda: 1893456000.0 + 1
                self.dead.add("globex-expiring")
            if i == n // 2:
                revoke_key(self.keys_file, "acme-revoked-later")
                self.dead.add("acme-revoked-later")
            await act[self.rng.choices(kinds, weights)[0]]()


def test_no_request_of_10000_leaks_across_scopes(data_dir, tmp_path_factory):
    from intentrank.index import Index

    built = tenant_index(data_dir, tmp_path_factory.getbasetemp())
    root = tmp_path_factory.mktemp("leaks")
    shutil.copytree(built.path, root / "index")  # its own copy: the writer's writes are real
    index = Index.open(root / "index")
    secrets = make_keys(root / "keys.yaml")
    llm = ScriptedLLM()
    settings = settings_for(root / "index", KeyRing(path=root / "keys.yaml"), llm, root,
                            auth_failures_per_minute=10**9, access_log=False, rerankers={
                                "cross_encoder": {"cross_encoder": {"backend": "onnx",
                                                                    "max_length": 32}}})
    app = create_app(settings)

    async def fuzzed() -> Fuzzer:  # in the app's own loop: no test-client thread per request
        transport = httpx.ASGITransport(app, client=("10.0.0.9", 4321))
        async with httpx.AsyncClient(transport=transport, base_url="http://fuzz") as client:
            fuzz = Fuzzer(client, app, secrets, index, llm, root / "keys.yaml")
            await fuzz.run(REQUESTS)
            return fuzz

    start = time.perf_counter()
    try:
        fuzz = asyncio.run(fuzzed())
    finally:
        app.state.pool.close()
        app.state.engine.close()
    seconds = time.perf_counter() - start
    totals = sum(fuzz.counts.values(), Counter())
    if out := os.environ.get("INTENTRANK_LEAKS_OUT"):
        Path(out).write_text(json.dumps({
            "requests": REQUESTS, "seed": SEED, "documents": len(index),
            "documents_at_end": len(fuzz.ids),
            "seconds": round(seconds, 1), "date": time.strftime("%Y-%m-%d"),
            "endpoints": {k: dict(v) for k, v in sorted(fuzz.counts.items())}}, indent=1))
    assert fuzz.violations == []
    assert totals["requests"] == REQUESTS + totals["existence probes"]  # 2 requests each
    assert totals["outside the scope, returned"] == totals["outside the scope, cited"] == 0
    assert totals["outside the scope, in prompts"] == 0
    assert totals["writes accepted from keys without write"] == 0
    assert totals["served after revocation or expiry"] == 0
    # the fuzzer exercised what it claims: answers, prompts, dead keys, refused writes
    assert totals["documents returned"] > REQUESTS
    assert totals["documents cited"] > 0 and totals["LLM prompts inspected"] > REQUESTS // 20
    assert totals["passages in prompts"] > REQUESTS // 20
    assert totals["requests with a revoked or expired key"] > 0
    assert totals["write attempts by keys without write"] > REQUESTS // 50
    assert totals["documents written in scope"] > 0 and totals["documents deleted in scope"] > 0
    assert totals["existence told apart"] == 0 and totals["existence probes"] > REQUESTS // 50


def test_no_attribute_of_the_view_leaks(data_dir, tmp_path_factory):
    """Every attribute path of the scoped view, for every scoped key: the view answers only
    the names it lists (each probed here: a new one fails until it has a probe), no name of
    the index passes through, and none gives another tenant's id, text, metadata or vector
    or tells whether an id outside the scope is held."""
    import numpy as np

    from intentrank.service.scope import Scope, ScopedIndex, ScopeViolation
    from intentrank.types import Document

    index = tenant_index(data_dir, tmp_path_factory.getbasetemp())
    secrets_dir = tmp_path_factory.mktemp("view-keys")
    make_keys(secrets_dir / "keys.yaml")
    store = KeyRing(path=secrets_dir / "keys.yaml").current()
    foreign_text = {t: index.doc_text(next(i for i in index.ids
                                           if index.doc(i).metadata["tenant"] == t))
                    for t in ("acme", "globex", "initech")}

    def probes(view: ScopedIndex, seen: set[str], hidden: list[str], tenant: str
               ) -> dict[str, Any]:
        rows = np.array([index.row_of[i] for i in sorted(seen)])
        hidden_rows = [index.row_of[i] for i in hidden[:20]]

        def refused(fn: Any) -> bool:
            try:
                fn()
            except (ScopeViolation, KeyError):
                return True
            return False

        def searched(leg: str) -> bool:
            hits = [h for t in foreign_text.values()
                    for h in getattr(view, f"search_{leg}")([t], 50)]
            return all(set(index.ids[r] for r in h.rows) <= seen for h in hits) and any(
                len(h.rows) for h in hits)

        def same_answer(fn: Any) -> bool:  # an id held outside the scope vs an absent one
            return all(_norm(fn(h), h) == _norm(fn(f"{h}-absent"), f"{h}-absent")
                       for h in hidden[:20])

        return {
            "scope": isinstance(view.scope, Scope),
            "visible_count": view.visible_count == len(seen) == len(view),
            "visible": all(view.visible(i) == (i in seen) for i in index.ids),
            "ids": view.ids == [i for i in index.ids if i in seen],
            "row_of": set(view.row_of) == seen and len(view.row_of) == len(seen)
            and not any(h in view.row_of for h in hidden)
            and all(refused(lambda h=h: view.row_of[h]) for h in hidden[:20]),
            "id_array": set(view.id_array[rows].tolist()) == seen
            and all(refused(lambda r=r: view.id_array[r]) for r in hidden_rows)
            and refused(lambda: view.id_array[:]) and refused(
                lambda: view.id_array[np.ones(len(index), dtype=bool)]),
            "embeddings": np.array_equal(view.embeddings[rows], index.embeddings[rows])
            and all(refused(lambda r=r: view.embeddings[r]) for r in hidden_rows)
            and refused(lambda: view.embeddings[:, 0]),
            "parent_of": set(view.parent_of) <= seen,
            "doc_and_parent_ids": view.doc_and_parent_ids == seen,
            "documents": [d.id for d in view.documents()] == view.ids,
            "doc": all(refused(lambda h=h: view.doc(h)) for h in hidden[:20])
            and view.doc(view.ids[0]).id == view.ids[0],
            "doc_text": all(refused(lambda h=h: view.doc_text(h)) for h in hidden[:20]),
            "allowed_rows": np.array_equal(view.allowed_rows(), [i in seen for i in index.ids])
            and not view.allowed_rows('tenant = "nobody"').any(),
            "search_bm25": searched("bm25"), "search_dense": searched("dense"),
            "search_tfidf": searched("tfidf"), "search_graph": searched("graph"),
            "settings": view.settings is index.settings,  # configuration, no document
            "embedder": view.embedder is index.embedder,
            "encode_queries": np.array_equal(view.encode_queries(["cells"]),
                                             index.encode_queries(["cells"])),
            "has": all(view.has(leg) == index.has(leg) for leg in ("bm25", "dense", "x")),
            "write_refusal": same_answer(lambda i: view.write_refusal(
                Document(i, "probe", metadata={"tenant": tenant, "acl": ["finance", "research"]}))),
            "deletable": same_answer(view.deletable) and not view.deletable(hidden[0]),
        }

    passed, public = Counter(), [n for n in dir(index) if not n.startswith("_")]
    for name in READERS:
        key = store.named(name)
        assert key is not None and key.scope is not None
        view = ScopedIndex(index, Scope.of_key(name, key.scope))
        assert sorted(n for n in dir(view) if not n.startswith("_") and n != "EXPOSED") == \
            sorted(ScopedIndex.EXPOSED)
        for attr in set(public) - set(ScopedIndex.EXPOSED):  # nothing passes through
            with pytest.raises(AttributeError, match="exposes only"):
                getattr(view, attr)
        seen = {i for i in index.ids if sees(name, index.doc(i).metadata)}
        hidden = [i for i in index.ids if i not in seen]
        results = probes(view, seen, hidden, KEYS[name]["tenant"])
        assert set(results) == set(ScopedIndex.EXPOSED)
        assert [a for a, ok in results.items() if not ok] == [], name
        passed.update(results)
    assert len(passed) == len(ScopedIndex.EXPOSED) and "doc_line" in public \
        and "metadata_columns" in public and "embeddings" in public


def _norm(answer: Any, doc_id: str) -> Any:
    return json.loads(json.dumps(answer).replace(doc_id, "<id>"))
