"""pgvector against intentrank's dense leg, on a real Postgres (``pg_uri``) and the real
index of 900 SciFact abstracts in three tenants (``scope_helpers.tenant_index``, shared with
the scope tests): its vectors loaded into a table, exact pgvector search returns the dense
leg's ids, ranks and scores (float32), filtered too; an HNSW index's recall@10 against exact
at several ``hnsw.ef_search``, and filtered with and without iterative index scans; the same
pipeline (RRF, then the cross-encoder) over both stores; and a leak probe of the service
serving the table (``serve --index name=postgresql://...``) to scoped keys."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from scope_helpers import KEYS, fingerprint, make_keys, sees, tenant_index
from service_helpers import ScriptedLLM

from intentrank.filters import parse_filter
from intentrank.types import Query

pytestmark = pytest.mark.slow  # encodes 900 abstracts when the index is not built yet
K = 10


@pytest.fixture(scope="module")
def tenants(data_dir, tmp_path_factory):
    return tenant_index(data_dir, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def pg(pg_uri, tenants):
    """The tenants' documents and the index's own vectors in table ``tenants``."""
    from intentrank.index.postgres import PgIndex, PgTable
    from intentrank.index.postgres_write import create_table, upsert

    table = PgTable("tenants", fts="fts")
    create_table(pg_uri, table, tenants.embeddings.shape[1])
    idx = PgIndex(pg_uri, table, embedder=tenants.embedder)
    upsert(idx, list(tenants.documents()), np.asarray(tenants.embeddings))
    yield idx
    idx.close()


@pytest.fixture(scope="module")
def queries(data_dir):
    from intentrank.data.dataset import load_dataset

    qs, _ = load_dataset(data_dir / "scifact").split("test")
    return [q.text for q in qs[:60]]


def same_ranking(got, want, tol: float = 1e-5) -> None:
    """Same ids at the same ranks, scores within float32 tolerance; two ids may trade places
    only where their scores tie within it."""
    assert len(got) == len(want)
    for (gi, gs), (wi, ws) in zip(got, want, strict=True):
        assert gs == pytest.approx(ws, abs=tol)
        if gi != wi:
            assert abs(dict(want).get(gi, -9) - ws) < tol, (gi, wi)


def dense_hits(index, q, k, allow=None):
    return [list(zip(index.id_array[h.rows].tolist(), h.scores.tolist(), strict=True))
            for h in index.search_dense([""] * len(q), k, query_vectors=q, allow=allow)]


@pytest.mark.parametrize("flt", [None, 'tenant = "acme"', 'tenant = "globex" AND acl = "legal"',
                                 'acl = "all-staff" OR tenant = "initech"'])
def test_exact_pgvector_returns_the_dense_leg(tenants, pg, queries, flt):
    q = tenants.encode_queries(queries)
    allow = None if flt is None else tenants.allowed_rows(parse_filter(flt))
    want = dense_hits(tenants, q, K, allow)
    got = pg.search_vector(queries, K, flt, query_vectors=q, exact=True)
    for g, w in zip(got, want, strict=True):
        same_ranking(g, w)
    assert sum(g == w for g, w in zip([[d for d, _ in x] for x in got],
                                      [[d for d, _ in x] for x in want], strict=True)) \
        >= len(queries) - 2  # ties are rare


def test_the_stages_rank_alike(tenants, pg, queries):
    from intentrank.retrieve.postgres import PgVectorRetriever
    from intentrank.retrieve.retrievers import DenseRetriever

    qs = [Query(str(i), t, filter=parse_filter('NOT tenant = "acme"'))
          for i, t in enumerate(queries[:20])]
    ours = PgVectorRetriever(pg, depth=K, exact=True).run(qs).rankings
    theirs = DenseRetriever(tenants, depth=K).run(qs).rankings
    for a, b in zip(ours, theirs, strict=True):
        same_ranking([(d.doc_id, d.score) for d in a.docs], [(d.doc_id, d.score) for d in b.docs])


def recall(got, exact) -> float:
    return float(np.mean([len({d for d, _ in g} & {d for d, _ in e}) / max(len(e), 1)
                          for g, e in zip(got, exact, strict=True)]))


def test_hnsw_recall_against_exact(tenants, pg, queries):
    from intentrank.index.postgres_write import create_hnsw, drop_index

    q = tenants.encode_queries(queries)
    exact = pg.search_vector(queries, K, query_vectors=q, exact=True)
    flt = 'tenant = "globex" AND acl = "research"'  # 1 row in 9
    exact_f = pg.search_vector(queries, K, flt, query_vectors=q, exact=True)
    name = create_hnsw(pg, m=16, ef_construction=64)
    try:
        plan = pg.execute("EXPLAIN SELECT id FROM tenants ORDER BY embedding <=> "
                          "(SELECT embedding FROM tenants LIMIT 1) LIMIT 10",
                          settings={"enable_seqscan": "off"})
        assert name in " ".join(r[0] for r in plan)  # exact=False's setting uses it
        by_ef = {ef: recall(pg.search_vector(queries, K, query_vectors=q, ef_search=ef,
                                             exact=False), exact) for ef in (10, 40, 100)}
        assert by_ef[100] >= 0.95 and by_ef[100] >= by_ef[10]
        off = pg.search_vector(queries, K, flt, query_vectors=q, ef_search=10, iterative="off",
                               exact=False)
        on = pg.search_vector(queries, K, flt, query_vectors=q, ef_search=10, exact=False)
        # without iterative scans the index hands over ef_search rows and the filter keeps
        # about a ninth of them; with them it searches on until K rows pass
        assert np.mean([len(x) for x in off]) < K <= min(len(x) for x in on)
        assert recall(on, exact_f) >= 0.9 > recall(off, exact_f)
    finally:
        drop_index(pg, name)


def test_one_pipeline_over_both_stores(tenants, pg, queries):
    """RRF of the two legs, then the cross-encoder: over the table and over the index; the
    cross-encoder reads the same passages from both (equal scores per document)."""
    from intentrank.core.config import build_pipeline
    from intentrank.pipelines import build_context

    def pipeline(a: dict, b: dict) -> list:
        return [{"fuse": {"method": "rrf", "rrf_k": 60, "inputs": [a, b]}}, {"cutoff": 20},
                {"cross_encoder": {"top_k": 20, "backend": "onnx", "max_length": 128}}]

    on_pg = build_pipeline(pipeline({"pgvector": {"depth": 50, "exact": True}},
                                    {"postgres_fts": {"depth": 50}}), build_context(pg))
    on_index = build_pipeline(pipeline({"dense": {"depth": 50}}, {"bm25": {"depth": 50}}),
                              build_context(tenants))
    qs = [Query(str(i), t) for i, t in enumerate(queries[:8])]
    a, b = on_pg.run(qs).rankings, on_index.run(qs).rankings
    shared = 0
    for ra, rb in zip(a, b, strict=True):
        assert len(ra.docs) == 20 and ra.docs[0].stage_scores.get("rrf/pgvector") is not None \
            or "rrf/postgres_fts" in ra.docs[0].stage_scores
        ce = {d.doc_id: d.stage_scores["cross_encoder"] for d in rb.docs}
        for d in ra.docs:
            if d.doc_id in ce:
                shared += 1
                assert d.stage_scores["cross_encoder"] == pytest.approx(ce[d.doc_id], abs=1e-5)
    assert shared > 40


def test_no_scoped_request_leaks_from_a_postgres_table(pg, pg_uri, tmp_path):
    """A probe through the HTTP service serving the table by URI: every scoped reader
    searches with other tenants' text as queries and filters that try to widen its scope,
    on both stages, their fusion and an answering pipeline; nothing outside its scope is
    returned, cited or put in a prompt."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from intentrank.llm.client import LLMClient
    from intentrank.service import ServiceSettings, create_app
    from intentrank.service.keyring import KeyRing

    secrets = make_keys(tmp_path / "keys.yaml")
    llm = ScriptedLLM()
    hybrid = {"fuse": {"method": "rrf", "inputs": [{"pgvector": {"depth": 20}},
                                                   {"postgres_fts": {"depth": 20}}]}}
    settings = ServiceSettings(
        indexes={"scifact": pg_uri + "&table=tenants"}, keys=KeyRing(path=tmp_path / "keys.yaml"),
        pipelines={"vec": ["pgvector"], "fts": ["postgres_fts"], "hybrid": [hybrid],
                   "qa": ["postgres_fts", {"cutoff": 5},
                          {"answer": {"top_k": 3, "abstain": "llm", "cite": "llm"}}]},
        rerankers={}, report_dirs=[tmp_path], access_log=False,
        llm=LLMClient(llm, cache=False, retries=0), workers=2)
    docs = {d.id: d for d in pg_docs(pg)}
    prints = {i: fingerprint(d.text) for i, d in docs.items()}
    rng = random.Random(59)
    widen = [None, 'tenant = "acme"', 'NOT tenant = "acme"', 'tenant = "globex" OR acl = '
             '"legal"', 'id PREFIX "1"', "tenant = \"x\"; DROP TABLE tenants; --"]
    counts = {"returned": 0, "leaked": 0, "prompts": 0, "requests": 0}
    with TestClient(create_app(settings)) as client:
        for key in itertools.islice(itertools.cycle(
                [k for k in KEYS if k != "admin"]), 160):
            foreign = [i for i in docs if not sees(key, docs[i].metadata)]
            body = {"query": docs[rng.choice(foreign)].text[:300],
                    "pipeline": rng.choice(["vec", "fts", "hybrid", "qa"]), "top_k": 20}
            if (f := rng.choice(widen)) is not None:
                body["filter"] = f
            path = "/answer" if body["pipeline"] == "qa" else "/search"
            before = len(llm.requests)
            r = client.post(path, json=body, headers={"Authorization": f"Bearer {secrets[key]}"})
            counts["requests"] += 1
            if r.status_code != 200:
                assert r.status_code in (401, 422), r.text  # a dead key, a malformed filter
                continue
            got = [d["doc_id"] for d in r.json()["results"]]
            if path == "/answer" and r.json()["answer"]:
                got += [c["doc_id"] for c in r.json()["answer"]["citations"]]
            counts["returned"] += len(got)
            counts["leaked"] += sum(not sees(key, docs[d].metadata) for d in got)
            for req in llm.requests[before:]:
                text = " ".join(" ".join(m["content"].split()) for m in req["messages"])
                text = text.replace(" ".join(body["query"].split()), " ")
                counts["prompts"] += 1
                counts["leaked"] += sum(fp in text and not sees(key, docs[d].metadata)
                                        for d, fp in prints.items())
    assert counts["leaked"] == 0
    assert counts["returned"] > 500 and counts["prompts"] > 10  # the probe probed
    assert pg.count() == len(docs)  # the table is whole


def pg_docs(pg) -> list:
    return [pg.doc(i) for i in pg.ids]
