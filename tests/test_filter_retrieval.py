"""Filters where documents come in: retrievers (a static ``filter`` ANDed with each query's,
queries grouped by filter, ``allow=`` passed to the index), the stages that search with
derived queries (multi_query, multi_faceted) and ``parents``, ``Stage.search(filter=)``, YAML
and the CLI; on a small fake index, and on a real Cranfield index with metadata once the
index has ``allowed_rows``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from intentrank.core.config import build_pipeline
from intentrank.core.registry import BuildContext
from intentrank.errors import ConfigError, FilterError
from intentrank.filters import MetadataColumns, Not, and_filters, parse_filter
from intentrank.index.hits import Hits
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.query.multi_faceted import MultiFacetedRetriever
from intentrank.query.multi_query import MultiQueryRetriever
from intentrank.retrieve.parents import ParentDocuments
from intentrank.retrieve.retrievers import BM25Retriever
from intentrank.types import Query, Ranking, Trace

WORDS = ["wing", "flow", "shock", "heat", "plate", "jet"]


class FakeIndex:
    """Twelve passages (two per parent) with metadata; every leg scores by shared words and
    records what it was asked."""

    path = "fake"

    def __init__(self) -> None:
        self.records = [{"id": f"d{i}", "parent_id": f"p{i // 2}", "team": "ab"[i % 2],
                         "year": 2015 + i, "tags": WORDS[i % 6: i % 6 + 2]}
                        for i in range(12)]
        self.texts = [" ".join(r["tags"] * (1 + i % 3)) for i, r in enumerate(self.records)]
        self.ids = [r["id"] for r in self.records]
        self.id_array = np.array(self.ids, dtype=object)
        self.row_of = {d: i for i, d in enumerate(self.ids)}
        self.parent_of = {r["id"]: r["parent_id"] for r in self.records}
        self.columns = MetadataColumns.from_records(self.records)
        self.calls: list[tuple[str, list[str], np.ndarray | None]] = []

    def allowed_rows(self, filt: Any) -> np.ndarray | None:
        f = and_filters(filt)
        return None if f is None else f.mask(self.columns)

    def _search(self, leg: str, texts: list[str], k: int,
                allow: np.ndarray | None = None) -> list[Hits]:
        self.calls.append((leg, list(texts), allow))
        out = []
        for text in texts:
            scores = np.array([sum(t.split().count(w) for w in text.split())
                               for t in self.texts], dtype=np.float64)
            if allow is not None:
                scores[~allow] = 0
            rows = np.lexsort((np.arange(len(scores)), -scores))[:k]
            rows = rows[scores[rows] > 0]
            out.append(Hits(rows.astype(np.int64), scores[rows]))
        return out

    def search_bm25(self, texts: list[str], k: int, allow: np.ndarray | None = None):
        return self._search("bm25", texts, k, allow)

    def search_tfidf(self, texts: list[str], k: int, allow: np.ndarray | None = None):
        return self._search("tfidf", texts, k, allow)


def _passes(index: FakeIndex, filt: str, doc_ids: list[str]) -> bool:
    f = parse_filter(filt)
    return all(f.matches(index.records[index.row_of[d]]) for d in doc_ids)


def test_a_retriever_ands_its_filter_with_each_querys_and_groups_queries() -> None:
    index = FakeIndex()
    stage = BM25Retriever(index, depth=3, filter='team = "a"')
    queries = [Query("q1", "wing flow", filter="year >= 2020"), Query("q2", "flow shock"),
               Query("q3", "heat plate", filter="year >= 2020"), Query("q4", "jet wing")]
    result = stage.run(queries)
    assert len(index.calls) == 2  # one search per distinct combined filter
    by_texts = {tuple(t): allow for _, t, allow in index.calls}
    want = parse_filter('team = "a" AND year >= 2020').mask(index.columns)
    assert by_texts[("wing flow", "heat plate")].tolist() == want.tolist()
    assert by_texts[("flow shock", "jet wing")].tolist() == \
        parse_filter('team = "a"').mask(index.columns).tolist()
    for q, r in zip(queries, result.rankings, strict=True):
        combined = and_filters(stage.filter, q.filter)
        assert r.doc_ids and _passes(index, str(combined), r.doc_ids)
        assert r.query is q
        # pre-filtering: the top 3 among the matching documents, by the unfiltered scores
        full = index.search_bm25([q.text], 12)[0]
        allowed = [index.ids[i] for i in full.rows
                   if combined.matches(index.records[int(i)])][:3]
        assert r.doc_ids == allowed
    assert result.trace.stages["bm25"].counters["filtered_queries"] == 4
    assert "filter='team = \"a\"'" in stage.describe()


def test_no_filter_searches_as_before_and_an_empty_selection_returns_nothing() -> None:
    index = FakeIndex()
    assert BM25Retriever(index, depth=4).search("flow").doc_ids == ["d1", "d7", "d0", "d6"]
    assert index.calls[-1][2] is None  # no allow= at all: indexes without filtering work
    assert BM25Retriever(index, depth=4, filter="year > 3000").search("flow").doc_ids == []
    got = BM25Retriever(index, depth=4).search("flow", k=2, filter='team = "a"')
    assert got.doc_ids == ["d0", "d6"]


def test_filter_from_yaml_config_and_its_errors() -> None:
    index = FakeIndex()
    node = [{"bm25": {"depth": 5, "filter": "team = 'b' AND NOT tags = 'jet'"}}]
    stage = build_pipeline(node, BuildContext(index))
    got = stage.search("wing jet flow")
    assert got.doc_ids and _passes(index, "team = 'b' AND NOT tags = 'jet'", got.doc_ids)
    with pytest.raises(ConfigError, match=r"pipeline\[0\]\.bm25: bad filter at position 8 "
                                          r"\('b'\): expected a value"):
        build_pipeline([{"bm25": {"filter": "team = b"}}], BuildContext(index))
    with pytest.raises(ConfigError, match="bm25: filter must be filter text or a Filter"):
        build_pipeline([{"bm25": {"filter": 3}}], BuildContext(index))
    sparse = build_pipeline([{"sparse": {"depth": 4, "filter": "year <= 2018"}}],
                            BuildContext(index))
    ranking = sparse.search("wing flow shock heat")
    assert ranking.doc_ids and _passes(index, "year <= 2018", ranking.doc_ids)
    assert {leg for leg, _, allow in index.calls if allow is not None} == {"bm25", "tfidf"}


def test_queries_take_filter_text_and_refuse_other_things() -> None:
    assert Query("q", "x", filter="a = 1").filter == parse_filter("a = 1")
    with pytest.raises(FilterError, match="Query.filter must be filter text or a Filter"):
        Query("q", "x", filter={"a": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Query("q", "x", filter="a = ")


class VariantsLLM:
    """Two variants for every query."""

    name = "fake:variants"

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        return LLMReply("1. wing heat\n2. shock jet")


def test_multi_query_and_multi_faceted_keep_the_querys_filter() -> None:
    index = FakeIndex()
    query = Query("q1", "flow plate", filter='team = "a"')
    stage = MultiQueryRetriever(LLMClient(VariantsLLM(), cache=None),
                                BM25Retriever(index, depth=4), n=2)
    ranking = stage.run([query]).rankings[0]
    assert len(index.calls) == 1 and len(index.calls[0][1]) == 3  # the query + 2 variants
    assert ranking.doc_ids and _passes(index, 'team = "a"', ranking.doc_ids)
    faceted = MultiFacetedRetriever(BM25Retriever(index, depth=4))
    aspects = query.with_derived("aspect", ["wing", "jet"], "aspects")
    ranking = faceted.run([aspects]).rankings[0]
    assert ranking.doc_ids and _passes(index, 'team = "a"', ranking.doc_ids)
    assert index.calls[-1][2].tolist() == parse_filter('team = "a"').mask(
        index.columns).tolist()


def test_parents_come_only_from_passages_the_filter_let_through() -> None:
    index = FakeIndex()
    pipe = BM25Retriever(index, depth=12) >> ParentDocuments(index)
    everything = pipe.search("wing flow shock heat plate jet").doc_ids
    assert len(everything) == 6
    narrowed = pipe.search("wing flow shock heat plate jet", filter="year >= 2023").doc_ids
    assert narrowed == ["p4", "p5"]  # d8..d11


def test_not_of_a_missing_field_lets_it_through() -> None:
    index = FakeIndex()
    got = BM25Retriever(index, depth=12).search("wing flow", filter=Not(parse_filter(
        "owner = 'x'")))
    assert len(got.doc_ids) == len(BM25Retriever(index, depth=12).search("wing flow").doc_ids)


# --- a real index (Cranfield, with metadata) ------------------------------------------------

QUESTIONS = ["boundary layer growth on a flat plate", "shock wave interaction with a "
             "turbulent boundary layer", "heat transfer in hypersonic flow"]
FILTERS = ['year >= 1960 AND group IN ("a", "c")', 'NOT group = "b" OR title PREFIX "on"',
           'labs = "ames" AND year < 1958']


@pytest.fixture(scope="module")
def meta_index(cranfield, tmp_path_factory):
    """Cranfield's 1,400 abstracts with metadata (year, group, labs: a list), BM25 and
    TF-IDF legs."""
    from intentrank.index import IndexSettings, build_index
    from intentrank.types import Document

    docs = []
    for doc in cranfield.corpus():
        n = int(doc.id)
        meta = {"year": 1950 + n % 20, "group": "abc"[n % 3],
                "labs": ["ames", "langley", "lewis"][n % 3: n % 3 + 1 + n % 2]}
        docs.append(Document(doc.id, doc.text, doc.title, metadata=meta))
    return build_index(docs, tmp_path_factory.mktemp("meta") / "cranfield",
                       IndexSettings(legs=("bm25", "tfidf")))


def _record(index, doc_id: str) -> dict[str, Any]:
    return index.doc(doc_id).filter_record()


@pytest.mark.parametrize("leg", ["bm25", "tfidf"])
def test_filtered_search_is_a_search_of_the_matching_documents(meta_index, leg,
                                                               tmp_path) -> None:
    """A filtered retriever returns what the same retriever returns over an index built from
    the matching documents only (their statistics), ten of them."""
    from intentrank.index import build_index
    from intentrank.retrieve.retrievers import TfidfRetriever

    cls = BM25Retriever if leg == "bm25" else TfidfRetriever
    for n, text in enumerate(FILTERS):
        f = parse_filter(text)
        matching = [d for d in meta_index.documents() if f.matches(d.filter_record())]
        only = build_index(matching, tmp_path / str(n), meta_index.settings)
        for q in QUESTIONS:
            got = cls(meta_index, depth=10, filter=f).search(q)
            want = cls(only, depth=10).search(q)
            assert got.doc_ids == want.doc_ids and len(want.doc_ids) == 10, (leg, text, q)
            assert [d.score for d in got.docs] == [d.score for d in want.docs]
        only.close()


def test_a_fused_pipeline_runs_queries_each_with_its_own_filter(meta_index) -> None:
    from intentrank.retrieve.retrievers import TfidfRetriever

    pipe = (BM25Retriever(meta_index, depth=50) | TfidfRetriever(meta_index, depth=50)) % 5
    queries = [Query(f"q{i}", q, filter=f) for i, (q, f) in enumerate(zip(QUESTIONS, FILTERS,
                                                                          strict=True))]
    result = pipe.run([*queries, Query("all", QUESTIONS[0])])
    for q, r in zip(queries, result.rankings[:-1], strict=True):
        assert len(r.doc_ids) == 5
        assert all(q.filter.matches(_record(meta_index, d)) for d in r.doc_ids)
        alone = (BM25Retriever(meta_index, depth=50, filter=q.filter)
                 | TfidfRetriever(meta_index, depth=50, filter=q.filter)) % 5
        assert r.doc_ids == alone.search(q.text).doc_ids
    unfiltered = result.rankings[-1].doc_ids
    assert unfiltered == pipe.search(QUESTIONS[0]).doc_ids
    assert not all(parse_filter(FILTERS[0]).matches(_record(meta_index, d)) for d in unfiltered)


def test_cli_search_with_a_filter(meta_index) -> None:
    from typer.testing import CliRunner

    from intentrank.cli import app

    res = CliRunner().invoke(app, ["search", str(meta_index.path), QUESTIONS[0], "-p", "bm25",
                                   "-k", "5", "--json", "--filter", FILTERS[0]])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)[0]
    assert rows["filter"] == str(parse_filter(FILTERS[0]))
    ids = [r["id"] for r in rows["results"]]
    assert ids == BM25Retriever(meta_index, depth=100, filter=FILTERS[0]).search(
        QUESTIONS[0], k=5).doc_ids
    res = CliRunner().invoke(app, ["search", str(meta_index.path), QUESTIONS[0], "-p", "bm25",
                                   "--filter", 'lab = "ames" OR year > 3000'])
    assert res.exit_code == 0, res.output
    assert "warning: --filter matches no document of this index; no document has the " \
           "field(s) 'lab'" in " ".join(res.output.split())


@pytest.fixture(scope="module")
def cranfield_bm25(cranfield, tmp_path_factory):
    from intentrank.index import IndexSettings, build_index

    return build_index(cranfield.corpus(), tmp_path_factory.mktemp("fbm25") / "cranfield",
                       IndexSettings(legs=("bm25",)))


def test_cli_eval_with_a_filter(small_cranfield, cranfield, cranfield_bm25, tmp_path) -> None:
    """Every query of the run searches only the documents the filter lets through (here by
    the reserved field ``id``: the corpus has no metadata)."""
    from typer.testing import CliRunner

    from intentrank.cli import app
    from intentrank.data.trec import load_run

    runs = {}
    for name, extra in (("all", []), ("some", ["--filter", 'id < "5" AND NOT id = "12"'])):
        res = CliRunner().invoke(app, ["eval", str(small_cranfield), "--index",
                                       str(cranfield_bm25.path), "-p", "bm25", "--runs-dir",
                                       str(tmp_path / name), *extra])
        assert res.exit_code == 0, res.output
        runs[name] = load_run(tmp_path / name / "bm25.trec")
    f = parse_filter('id < "5" AND NOT id = "12"')
    assert set(runs["some"]) == set(runs["all"]) == {"1", "2", "4", "8"}
    texts = {qid: cranfield.queries[qid].text for qid in runs["some"]}
    for qid, ranked in runs["some"].items():
        assert len(ranked) == 100 and all(f.matches({"id": d}) for d in ranked)
        want = BM25Retriever(cranfield_bm25, depth=10, filter=f).search(texts[qid]).doc_ids
        assert sorted(ranked, key=lambda d: -ranked[d])[:10] == want  # the library's search


def test_cli_refuses_a_bad_filter_before_any_work(tmp_path) -> None:
    from typer.testing import CliRunner

    from intentrank.cli import app

    for command in (["search", str(tmp_path / "none"), "q"], ["answer", str(tmp_path), "q"],
                    ["eval", str(tmp_path), "-p", "bm25"]):
        res = CliRunner().invoke(app, [*command, "--filter", 'year >= 2020 AND team = a'])
        assert res.exit_code == 2
        assert "error: bad filter at position 25 ('a'): expected a value" in res.output


def test_an_index_that_cannot_filter_says_so() -> None:
    class Plain(FakeIndex):
        allowed_rows = None

    index = Plain()
    assert BM25Retriever(index, depth=2).search("flow").doc_ids == ["d1", "d7"]
    with pytest.raises(ConfigError, match=r"bm25: this index \(Plain\) cannot filter by "
                                          r"metadata; filter: team = \"a\""):
        BM25Retriever(index, depth=2).search("flow", filter='team = "a"')


def test_a_trace_counts_filtered_queries_only_when_there_are_some() -> None:
    index = FakeIndex()
    trace = Trace()
    BM25Retriever(index, depth=2)([Ranking(Query("q", "wing"))], trace)
    assert "filtered_queries" not in trace.stages["bm25"].counters
