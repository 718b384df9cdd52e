"""Scopes through the whole service on a real index (900 SciFact abstracts in three tenants
with access groups): what each key sees, exactly (the top k among its documents), user
filters that can only narrow, answers whose prompts hold no other scope's passage,
permissions (401 vs 403), expiry and revocation through the keys file, rate limits, size
limits, index names, logs, and LLM replies cached per scope."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scope_helpers import fingerprint, make_keys, sees, settings_for, tenant_index
from service_helpers import ScriptedLLM

from intentrank.service import create_app
from intentrank.service.keyring import KeyRing, revoke_key

pytest.importorskip("fastapi")
pytest.importorskip("intentrank.filters")
from fastapi.testclient import TestClient  # noqa: E402


@pytest.fixture(scope="module")
def index(data_dir, tmp_path_factory):
    return tenant_index(data_dir, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def setup(index, tmp_path_factory):
    root = tmp_path_factory.mktemp("scopes")
    secrets = make_keys(root / "keys.yaml")
    llm = ScriptedLLM()
    app = create_app(settings_for(index, KeyRing(path=root / "keys.yaml"), llm, root,
                                  body_limits={"/search": 6_000, "/documents": 50_000}))
    with TestClient(app) as client:
        yield client, secrets, llm, root, app


def call(setup, method: str, path: str, key: str | None, headers: dict | None = None,
         **kwargs):
    client, secrets = setup[0], setup[1]
    auth = {"Authorization": f"Bearer {secrets[key]}"} if key else {}
    return client.request(method, path, headers={**auth, **(headers or {})}, **kwargs)


def visible_rows(index, key: str) -> np.ndarray:
    return np.array([sees(key, index.doc(i).metadata) for i in index.ids])


@pytest.fixture(scope="module")
def own_index(index, tmp_path_factory):
    """Each key's documents alone, as an index of their own (built on first use)."""
    from intentrank.index import build_index

    built: dict = {}

    def of(key: str):
        if key not in built:
            docs = [d for d in index.documents() if sees(key, d.metadata)]
            built[key] = build_index(docs, tmp_path_factory.mktemp(key) / "idx",
                                     index.settings)
        return built[key]

    yield of
    for own in built.values():
        own.close()


@pytest.mark.parametrize("key", ["acme", "acme-finance", "initech-research"])
@pytest.mark.parametrize("pipeline", ["bm25", "tfidf", "dense"])
def test_a_scoped_search_is_a_search_of_the_keys_documents_alone(setup, own_index, key,
                                                                   pipeline):
    """Pre-filter semantics, with the scope's own statistics: the scoped list equals the same
    pipeline over an index of only the documents the key may see (nothing of the other
    tenants' documents, not even their term statistics, shapes it)."""
    from intentrank.core.config import resolve_pipeline
    from intentrank.pipelines import pipeline_from_config

    text = "vitamin D deficiency and bone fractures in older adults"
    r = call(setup, "POST", "/search", key, json={"query": text, "pipeline": pipeline,
                                                   "top_k": 10})
    assert r.status_code == 200, r.text
    got = [(d["doc_id"], d["score"]) for d in r.json()["results"]]
    alone = pipeline_from_config(resolve_pipeline(pipeline), index=own_index(key)).search(
        text, k=10)
    assert [d for d, _ in got] == alone.doc_ids and len(got) == 10
    np.testing.assert_allclose([s for _, s in got], [d.score for d in alone.docs], rtol=1e-6)


@pytest.mark.parametrize(("user_filter", "expect"), [
    ('tenant = "globex"', "none"),                        # another tenant: nothing
    ('tenant = "acme" OR tenant = "globex"', "own"),      # widening: still only its own
    ('NOT tenant = "acme"', "none"),
    ('acl IN ("legal")', "subset"),                       # narrowing works
    ('id != "no-such-id"', "own"),
])
def test_a_user_filter_can_only_narrow_the_scope(setup, index, user_filter, expect):
    r = call(setup, "POST", "/search", "acme", json={
        "query": "cancer cells", "pipeline": "bm25", "top_k": 50, "filter": user_filter})
    assert r.status_code == 200, r.text
    metas = [index.doc(d["doc_id"]).metadata for d in r.json()["results"]]
    assert all(sees("acme", m) for m in metas)
    if expect == "none":
        assert metas == []
    else:
        assert metas and (expect == "own" or all("legal" in m["acl"] for m in metas))


def test_a_malformed_filter_is_422_naming_the_problem(setup):
    r = call(setup, "POST", "/search", "acme", json={"query": "cells", "filter":
                                                      'tenant = "acme" OR (tenant ='})
    assert r.status_code == 422 and r.json()["error"].startswith("filter:")


def test_a_conversation_quoting_another_tenants_document_finds_only_the_keys_own(setup, index):
    foreign = next(i for i in index.ids if not sees("globex", index.doc(i).metadata))
    quote = index.doc(foreign).text
    conv = {"turns": [{"question": quote[:900], "answer": quote[:900]}],
            "question": "tell me more about that"}
    r = call(setup, "POST", "/search", "globex", json={"conversation": conv, "top_k": 20})
    assert r.status_code == 200, r.text
    ids = [d["doc_id"] for d in r.json()["results"]]
    assert ids and foreign not in ids
    assert all(sees("globex", index.doc(i).metadata) for i in ids)


def test_an_answer_cites_and_prompts_only_the_keys_documents(setup, index):
    llm = setup[2]
    foreign = [i for i in index.ids if not sees("initech-research", index.doc(i).metadata)]
    query = index.doc(foreign[0]).text[:600]  # another tenant's text, verbatim
    before = len(llm.requests)
    r = call(setup, "POST", "/answer", "initech-research", json={"query": query,
                                                                  "pipeline": "qa"})
    assert r.status_code == 200, r.text
    body = r.json()
    cited = [c["doc_id"] for c in body["answer"]["citations"]]
    assert cited and all(sees("initech-research", index.doc(c).metadata) for c in cited)
    assert all(c["source"] == c["doc_id"] for c in body["answer"]["citations"])  # no path
    prompts = [" ".join(m["content"].split()) for req in llm.requests[before:]
               for m in req["messages"]]
    assert prompts
    text = " ".join(p.replace(" ".join(query.split()), "") for p in prompts)
    assert not [f for f in foreign if fingerprint(index.doc_text(f)) in text]
    assert any(fingerprint(index.doc_text(c)) in text for c in cited)


def test_pipelines_lists_what_the_key_sees(setup, index):
    info = call(setup, "GET", "/pipelines", "acme-finance").json()
    assert info["indexes"] == [{"name": "scifact",
                                "documents": int(visible_rows(index, "acme-finance").sum())}]
    assert call(setup, "GET", "/pipelines", "admin").json()["indexes"][0]["documents"] == 900


def test_401_and_403_are_distinct(setup):
    assert call(setup, "POST", "/search", None, json={"query": "x"}).status_code == 401
    r = setup[0].post("/search", json={"query": "x"}, headers={"X-API-Key": "ir_nope"})
    assert r.status_code == 401 and r.json()["error"] == "unknown API key"
    r = call(setup, "POST", "/evaluate", "globex", json={"run": "1 Q0 d 1 1 t\n",
                                                          "qrels": "1 0 d 1\n"})
    assert r.status_code == 403 and "lacks the 'evaluate' permission" in r.json()["error"]
    r = call(setup, "POST", "/documents", "acme", json={"documents": [
        {"id": "x", "text": "y", "metadata": {"tenant": "acme"}}]})
    assert r.status_code == 403 and "'write' permission" in r.json()["error"]
    r = call(setup, "DELETE", "/documents/123", "globex")
    assert r.status_code == 403
    assert call(setup, "GET", "/reports", "acme-finance").status_code == 403
    assert call(setup, "GET", "/reports", "acme").status_code == 200


def test_expired_and_revoked_keys_are_refused_from_then_on(setup):
    client, _, _, root, app = setup
    ok = call(setup, "POST", "/search", "globex-expiring", json={"query": "cells"})
    assert ok.status_code == 200
    real = app.state.wall_clock
    app.state.wall_clock = lambda: 1893456000.0  # 2030-01-01T00:00:00Z: the expiry
    try:
        r = call(setup, "POST", "/search", "globex-expiring", json={"query": "cells"})
        assert r.status_code == 401 and r.json()["error"] == "this API key has expired"
    finally:
        app.state.wall_clock = real
    assert call(setup, "GET", "/pipelines", "acme-revoked-later").status_code == 200
    revoke_key(root / "keys.yaml", "acme-revoked-later")
    assert call(setup, "GET", "/pipelines", "acme-revoked-later").status_code == 401
    app.state.buckets.__init__()  # the failures above count against this client


def test_rate_limits_per_key_and_per_client_and_texts_logged_when_configured(index, tmp_path):
    from intentrank.service.auth import ApiKey, KeyStore, hash_key

    keys = KeyStore([ApiKey("slow", hash_key("s"), rate_limit=4)])
    app = create_app(settings_for(index, keys, ScriptedLLM(), tmp_path,
                                  auth_failures_per_minute=4, log_texts=True))
    with TestClient(app) as client:
        r = client.post("/search", json={"query": "zebrafish heart regeneration"},
                        headers={"X-API-Key": "s"})
        assert r.status_code == 200
        assert "zebrafish heart regeneration" in (tmp_path / "access.jsonl").read_text()
        codes = [client.get("/pipelines", headers={"X-API-Key": "s"}).status_code
                 for _ in range(4)]
        assert codes == [200, 200, 200, 429]  # 4 a minute, the search was the first
        r = client.get("/pipelines", headers={"X-API-Key": "s"})
        assert int(r.headers["retry-after"]) >= 1 and "rate limit of 4" in r.json()["error"]
        app.state.buckets.__init__()
        wrong = [client.get("/pipelines", headers={"X-API-Key": f"guess{i}"}).status_code
                 for i in range(5)]
        assert wrong == [401, 401, 401, 401, 429]  # 4 failures a minute, then refused ...
        r = client.get("/pipelines", headers={"X-API-Key": "s"})
        assert r.status_code == 429 and "failed authentications" in r.json()["error"]


def test_size_limits_are_per_endpoint(setup):
    big = "x " * 3_500  # 7,000 bytes: over /search's 6,000, under /documents' 50,000
    r = call(setup, "POST", "/search", "acme", json={"query": big})
    assert r.status_code == 413 and "6000 bytes" in r.json()["error"]
    r = call(setup, "POST", "/documents", "globex-writer", json={
        "documents": [{"id": "new-1", "text": big, "metadata": {"tenant": "acme"}}]})
    assert r.status_code == 403  # read (not 413), then refused: outside its scope


@pytest.mark.parametrize("name", ["../scifact", "/etc/passwd", "scifact/../x", "..", ""])
def test_index_names_are_looked_up_never_used_as_paths(setup, name):
    r = call(setup, "POST", "/search", "admin", json={"query": "cells", "index": name})
    assert r.status_code == 422 and "unknown index" in r.json()["error"]
    r = call(setup, "POST", "/documents/delete", "admin", json={"index": name, "ids": ["1"]})
    assert r.status_code == 422 and "unknown index" in r.json()["error"]


def test_the_access_log_names_the_key_and_logs_no_text_unless_configured(setup):
    client, secrets, _, root, _ = setup
    call(setup, "POST", "/search", "acme", json={"query": "zebrafish heart regeneration"},
         headers={"X-Request-ID": "scope-log-1"})
    records = [json.loads(line) for line in (root / "access.jsonl").read_text().splitlines()]
    mine = [r for r in records if r.get("request_id") == "scope-log-1"]
    assert mine and mine[0]["key"] == "acme"
    text = (root / "access.jsonl").read_text()
    assert "zebrafish" not in text and not any(s in text for s in secrets.values())


def test_llm_replies_are_cached_per_scope(tmp_path):
    from intentrank.llm.base import LLMReply
    from intentrank.llm.cache import ReplyCache
    from intentrank.service.scope import ScopedReplyCache

    inner = ReplyCache(tmp_path / "replies.sqlite")
    a, b = ScopedReplyCache(inner, 'tenant = "a"'), ScopedReplyCache(inner, 'tenant = "b"')
    a.put("k", LLMReply("from a's passages"), "fake", "m")
    assert a.get("k").text == "from a's passages"
    assert b.get("k") is None and inner.get("k") is None


def test_rerank_scores_only_the_callers_own_documents(setup):
    cands = [{"id": "mine-1", "text": "Vitamin D and fractures."},
             {"id": "mine-2", "text": "Statins and heart disease."}]
    r = call(setup, "POST", "/rerank", "globex", json={"query": "vitamin D",
                                                        "candidates": cands})
    assert r.status_code == 200, r.text
    assert {d["doc_id"] for d in r.json()["results"]} == {"mine-1", "mine-2"}
    r = call(setup, "POST", "/v1/rerank", "globex", json={
        "query": "vitamin D", "documents": ["Vitamin D and fractures.", "Statins."]})
    assert r.status_code == 200 and {x["index"] for x in r.json()["results"]} == {0, 1}


def test_writes_stay_in_the_writers_scope_and_are_served_at_once(index, tmp_path):
    """POST /documents and the deletes through the index's own updates (skipped until
    intentrank.index.update is merged): a scoped writer adds within its scope, the new
    document is found by its tenant and not by another, writes outside it are refused."""
    import shutil

    pytest.importorskip("intentrank.index.update")
    shutil.copytree(index.path, tmp_path / "index")
    secrets = make_keys(tmp_path / "keys.yaml")
    app = create_app(settings_for(tmp_path / "index", KeyRing(path=tmp_path / "keys.yaml"),
                                  ScriptedLLM(), tmp_path))
    with TestClient(app) as client:
        def as_(key: str) -> dict:
            return {"Authorization": f"Bearer {secrets[key]}"}

        new = {"id": "globex-writer:note-1",
               "text": "Quokka lymphocytes glow under blue light.",
               "metadata": {"tenant": "globex", "acl": ["research"],
                            "path": "lab/notes.md", "headings": ["Notes", "Quokkas"]}}
        r = client.post("/documents", json={"documents": [new]}, headers=as_("globex-writer"))
        assert r.status_code == 200 and r.json()["added"] == 1, r.text
        hits = client.post("/search", json={"query": "quokka lymphocytes", "pipeline": "bm25"},
                           headers=as_("globex")).json()["results"]
        assert hits[0]["doc_id"] == new["id"] and hits[0]["source"] == "notes.md › Quokkas"
        answer = client.post("/answer", json={"query": "quokka lymphocytes", "pipeline": "qa"},
                             headers=as_("globex")).json()["answer"]
        assert answer["citations"][0]["source"] == "notes.md › Quokkas"  # what the page shows
        other = client.post("/search", json={"query": "quokka lymphocytes",
                                             "pipeline": "bm25"}, headers=as_("acme"))
        assert new["id"] not in [d["doc_id"] for d in other.json()["results"]]
        outside = {**new, "id": "globex-writer:x-2", "metadata": {"tenant": "acme"}}
        r = client.post("/documents", json={"documents": [outside]},
                        headers=as_("globex-writer"))
        assert r.status_code == 403 and "outside this key's scope" in r.json()["error"]
        own = next(i for i in index.ids if index.doc(i).metadata["tenant"] == "globex")
        r = client.post("/documents", json={"documents": [{**new, "id": own}]},
                        headers=as_("globex-writer"))  # replaces a document it sees
        assert r.status_code == 200 and r.json()["replaced"] == 1, r.text
        r = client.delete(f"/documents/{own}", headers=as_("globex-writer"))
        assert r.status_code == 200 and r.json()["deleted"] == 1
        r = client.delete(f"/documents/{new['id']}", headers=as_("globex-writer"))
        assert r.status_code == 200 and r.json()["deleted"] == 1
        # an id held by another tenant's document is answered as an absent one
        held = next(i for i in index.ids if index.doc(i).metadata["tenant"] == "acme")
        absent = "9" * len(held)
        assert absent not in index.row_of

        def answers(doc_id: str) -> list[tuple[int, str]]:
            doc = {**new, "id": doc_id}
            got = [client.post("/documents", json={"documents": [doc]},
                               headers=as_("globex-writer")),
                   client.delete(f"/documents/{doc_id}", headers=as_("globex-writer")),
                   client.post("/documents/delete", json={"ids": [doc_id]},
                               headers=as_("globex-writer"))]
            return [(r.status_code, r.json()["error"].replace(doc_id, "<id>")) for r in got]

        assert answers(held) == answers(absent)
        assert [code for code, _ in answers(held)] == [422, 404, 404]


def test_every_engine_and_update_call_requires_a_scope_object(setup):
    """The scope is an object with no default: a call that forgets it, or passes a filter's
    text by hand, is a TypeError, never an unscoped request."""
    import inspect

    from intentrank.service import updates
    from intentrank.service.engine import Engine
    from intentrank.service.scope import Scope
    from intentrank.types import Query

    calls = [getattr(Engine, n) for n in ("search", "rerank", "rerank_texts", "embed",
                                          "visible_documents", "view")]
    for fn in [*calls, updates.upsert, updates.delete]:
        scope = inspect.signature(fn).parameters.get("scope")
        assert scope is not None and scope.default is inspect.Parameter.empty, fn.__name__
    engine = setup[4].state.engine
    served = engine.pipeline("bm25", "search")
    with pytest.raises(TypeError):
        engine.search(served, "scifact", Query("q", "cells"), 5, False, False)
    with pytest.raises(TypeError, match="scope must be a Scope"):
        engine.search(served, "scifact", Query("q", "cells"), 5, False, False,
                      scope='tenant = "acme"')
    with pytest.raises(TypeError, match="scope must be a Scope"):
        engine.visible_documents("scifact", scope=None)
    mine = engine.search(served, "scifact", Query("q", "cells"), 50, False, False,
                         scope=Scope.of_key("acme", 'tenant = "acme"'))
    assert {engine.indexes["scifact"].doc(d["doc_id"]).metadata["tenant"]
            for d in mine["results"]} == {"acme"}


def test_the_view_decides_writes_by_what_it_sees_and_the_keys_namespace():
    """Every outcome of ScopedIndex.write_refusal and deletable on a three-document index (a
    small fake: the real index's writes are tested above): metadata outside the scope is 403;
    a visible id is replaced; a new id must be in the key's namespace, the same answer for an
    absent id and one another tenant holds; an id in the namespace that a document the key
    does not see holds (only an unscoped writer can have put it there) is 409."""
    from intentrank.filters import MetadataColumns
    from intentrank.service.scope import Scope, ScopedIndex
    from intentrank.types import Document

    class Three:
        ids = ["g-1", "a-1", "w:held"]
        row_of = {d: i for i, d in enumerate(ids)}
        parent_of: dict = {}
        meta = [{"tenant": "globex"}, {"tenant": "acme"}, {"tenant": "acme"}]

        def __len__(self) -> int:
            return 3

        def allowed_rows(self, flt):
            cols = MetadataColumns.from_records([{**m, "id": d}
                                                 for d, m in zip(self.ids, self.meta, strict=True)])
            return np.asarray(flt.mask(cols), dtype=bool)

    view = ScopedIndex(Three(), Scope.of_key("w", 'tenant = "globex"'))
    mine = {"tenant": "globex"}

    def refusal(doc_id, meta=mine):
        return view.write_refusal(Document(doc_id, "text", metadata=meta))

    assert refusal("g-1") is None and refusal("w:new") is None
    assert refusal("w:new", {"tenant": "acme"})[0] == 403
    held, absent = refusal("a-1"), refusal("a-2")
    assert held[0] == absent[0] == 422 and held == absent
    assert refusal("w:held")[0] == 409
    assert view.deletable("g-1") and not view.deletable("a-1") and not view.deletable("a-2")
    everyone = ScopedIndex(Three(), Scope.everything())
    assert everyone.write_refusal(Document("a-1", "t", metadata={})) is None
    assert len(everyone) == 3 and len(view) == 1 and view.ids == ["g-1"]
