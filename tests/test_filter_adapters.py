"""The frameworks' metadata filters mapped onto intentrank's: LangChain's vector-store dicts
and LlamaIndex's ``MetadataFilters`` (real objects), checked against LlamaIndex's own filter
evaluation, refused when they have no counterpart, and used by both adapters' retrievers
over a real index."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn
from test_filter_retrieval import QUESTIONS, meta_index  # noqa: F401

from intentrank.errors import ConfigError, FilterError
from intentrank.filters import parse_filter
from intentrank.integrations.filter_maps import from_langchain, from_llamaindex
from intentrank.retrieve.retrievers import BM25Retriever


@pytest.mark.parametrize(("spec", "text"), [
    ({"team": "a"}, 'team = "a"'),
    ({"team": "a", "year": 2020}, 'team = "a" AND year = 2020'),
    ({"year": {"$gte": 2020, "$lt": 2024}}, "year >= 2020 AND year < 2024"),
    ({"year": {"$gt": 1, "$lte": 2.5, "$ne": 2}}, "year > 1 AND year <= 2.5 AND year != 2"),
    ({"team": {"$eq": "a"}}, 'team = "a"'),
    ({"team": {"$in": ["a", "b"]}}, 'team IN ("a", "b")'),
    ({"team": {"$nin": ["a"]}}, 'NOT team IN ("a")'),
    ({"year": {"$between": [2000, 2010]}}, "year >= 2000 AND year <= 2010"),
    ({"updated": {"$gte": "2024-01-31"}}, "updated >= 2024-01-31"),
    ({"draft": False}, "draft = false"),
    ({"$and": [{"team": "a"}, {"$or": [{"year": 1}, {"year": 2}]}]},
     'team = "a" AND (year = 1 OR year = 2)'),
    ({"$or": [{"team": "a"}]}, 'team = "a"'),
    ({"$not": {"team": "a"}}, 'NOT team = "a"'),
    ({"meta.lang": "en"}, 'meta.lang = "en"'),
])
def test_langchain_dicts(spec: dict[str, Any], text: str) -> None:
    assert from_langchain(spec) == parse_filter(text)


def test_langchain_passes_text_filters_and_none_through() -> None:
    assert from_langchain(None) is None and from_langchain({}) is None
    assert from_langchain('team = "a"') == parse_filter('team = "a"')
    f = parse_filter("year > 1")
    assert from_langchain(f) is f


@pytest.mark.parametrize(("spec", "says"), [
    ({"team": {"$like": "a%"}}, "filter.team.$like: unsupported operator '$like'"),
    ({"team": {"$exists": True}}, "unsupported operator '$exists'"),
    ({"$nor": [{"a": 1}]}, "filter.$nor: unknown or unsupported operator"),
    ({"team": ["a", "b"]}, "a list is not a value; for one of several values write "
                           "{'team': {'$in': ['a', 'b']}}"),
    ({"team": None}, "filter.team: expected a string, number, bool or date, got None"),
    ({"team": {"$in": "ab"}}, "filter.team.$in: expected a list of values"),
    ({"year": {"$between": [1]}}, "expected [low, high]"),
    ({"$and": []}, "filter.$and: expected a non-empty list of dicts"),
    ({"$and": [{"a": 1}, {}]}, r"filter.$and[1]: expected a non-empty dict"),
    ({"team": {}}, "expected operators such as"),
    ({"team": {"$eq": {"x": 1}}}, "filter.team.$eq: expected a string, number"),
    ({"year": {"$gt": True}}, "a bool compares only with = and !="),
    (["team"], "expected a dict, filter text or a Filter"),
])
def test_langchain_refusals(spec: Any, says: str) -> None:
    with pytest.raises(FilterError) as err:
        from_langchain(spec)
    assert says in str(err.value)


def _mf(key: str, value: Any, op: FilterOperator) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


def test_llamaindex_metadata_filters() -> None:
    filters = MetadataFilters(filters=[
        _mf("team", "a", FilterOperator.EQ),
        MetadataFilters(filters=[_mf("year", 2020, FilterOperator.GTE),
                                 _mf("tags", "x", FilterOperator.CONTAINS)],
                        condition=FilterCondition.OR),
        MetadataFilters(filters=[_mf("team", ["b", "c"], FilterOperator.IN),
                                 _mf("year", 3, FilterOperator.NE)],
                        condition=FilterCondition.NOT),
        _mf("tags", ["y", "z"], FilterOperator.ALL),
        _mf("tags", ["p"], FilterOperator.NIN)])
    assert from_llamaindex(filters) == parse_filter(
        'team = "a" AND (year >= 2020 OR tags = "x") AND NOT (team IN ("b", "c") OR '
        'year != 3) AND tags = "y" AND tags = "z" AND NOT tags IN ("p")')
    assert from_llamaindex(MetadataFilters(filters=[])) is None
    assert from_llamaindex(None) is None
    assert from_llamaindex(_mf("tags", ["a"], FilterOperator.ANY)) == parse_filter(
        'tags IN ("a")')
    assert from_llamaindex('team = "a"') == parse_filter('team = "a"')


@pytest.mark.parametrize(("flt", "says"), [
    (_mf("title", "wing", FilterOperator.TEXT_MATCH), "the operator 'text_match' has no "
                                                      "intentrank counterpart"),
    (_mf("title", "", FilterOperator.IS_EMPTY), "'is_empty' has no intentrank counterpart"),
    (_mf("tags", [], FilterOperator.ALL), "'all' of no values"),
    (_mf("team", ["a"], FilterOperator.EQ), "filters[0] (team ==): expected a string"),
    (_mf("team", "a", FilterOperator.IN), "expected a list of values"),
])
def test_llamaindex_refusals(flt: MetadataFilter, says: str) -> None:
    with pytest.raises(FilterError) as err:
        from_llamaindex(MetadataFilters(filters=[flt]))
    assert says in str(err.value)
    with pytest.raises(FilterError, match="expected a LlamaIndex MetadataFilters"):
        from_llamaindex(3)


RECORDS = [{"team": t, "year": y, "tags": list(g)}
           for t, y, g in itertools.product("abc", (2019, 2020, 2021),
                                            ((), ("x",), ("x", "y"), ("y", "z")))]
CASES = [(k, v, op) for op, k, v in [
    *((op, "team", v) for op in (FilterOperator.EQ, FilterOperator.NE, FilterOperator.GT,
                                 FilterOperator.LTE) for v in ("a", "b")),
    *((op, "year", v) for op in (FilterOperator.EQ, FilterOperator.NE, FilterOperator.GT,
                                 FilterOperator.GTE, FilterOperator.LT, FilterOperator.LTE)
      for v in (2019, 2020, 2020.5)),
    *((op, f, v) for op in (FilterOperator.IN, FilterOperator.NIN)
      for f, v in (("team", ["a", "c"]), ("year", [2021]), ("team", []))),
    *((FilterOperator.CONTAINS, "tags", v) for v in ("x", "z", "q")),
    *((op, "tags", v) for op in (FilterOperator.ANY, FilterOperator.ALL)
      for v in (["x"], ["y", "z"], ["x", "q"]))]]


@pytest.mark.parametrize("condition", [FilterCondition.AND, FilterCondition.OR,
                                       FilterCondition.NOT])
def test_llamaindex_semantics_agree_with_llamaindexs_own(condition) -> None:
    """Over records that hold every field, each mapped filter passes the records that
    LlamaIndex's own in-memory filter passes (alone, and two at a time)."""
    pairs = [[c] for c in CASES] + [list(p) for p in zip(CASES, CASES[7:], strict=False)]
    mixed = 0
    for group in pairs:
        filters = MetadataFilters(filters=[_mf(*c) for c in group], condition=condition)
        theirs = build_metadata_filter_fn(lambda i: RECORDS[int(i)], filters)
        ours = from_llamaindex(filters)
        want = [theirs(str(i)) for i in range(len(RECORDS))]
        assert [ours.matches(r) for r in RECORDS] == want, (group, condition)
        mixed += 0 < sum(want) < len(RECORDS)
    assert mixed >= 0.6 * len(pairs)  # most cases pass some records and not others


def test_langchain_retriever_with_filters(meta_index) -> None:  # noqa: F811 (fixture)
    from intentrank.integrations.langchain import IntentrankRetriever

    spec = {"year": {"$gte": 1960}, "group": {"$in": ["a", "c"]}}
    retriever = IntentrankRetriever(pipeline="bm25", index=meta_index,
                                    search_kwargs={"filter": spec, "k": 5})
    flt = parse_filter('year >= 1960 AND group IN ("a", "c")')
    for q in QUESTIONS:
        docs = retriever.invoke(q)
        want = BM25Retriever(meta_index, depth=100, filter=flt).search(q, k=5)
        assert [d.id for d in docs] == want.doc_ids and len(docs) == 5
        assert all(d.metadata["year"] >= 1960 and d.metadata["group"] in "ac" for d in docs)
        narrowed = retriever.invoke(q, filter={"labs": "ames"})
        assert narrowed and all("ames" in d.metadata["labs"] and d.metadata["year"] >= 1960
                                for d in narrowed)
    with pytest.raises(ConfigError, match=r"search_kwargs filter.group.\$like: unsupported "
                                          r"operator '\$like'"):
        IntentrankRetriever(pipeline="bm25", index=meta_index,
                            search_kwargs={"filter": {"group": {"$like": "a"}}})
    with pytest.raises(ConfigError, match=r"search_kwargs: unknown key\(s\) \['fetch_k'\]"):
        IntentrankRetriever(pipeline="bm25", index=meta_index, search_kwargs={"fetch_k": 3})


def test_llamaindex_retriever_with_filters(meta_index) -> None:  # noqa: F811 (fixture)
    from intentrank.integrations.llamaindex import IntentrankRetriever

    filters = MetadataFilters(filters=[_mf("labs", "lewis", FilterOperator.CONTAINS),
                                       _mf("year", 1955, FilterOperator.LT)],
                              condition=FilterCondition.AND)
    retriever = IntentrankRetriever("bm25", index=meta_index, k=5, filters=filters)
    for q in QUESTIONS:
        nodes = retriever.retrieve(q)
        want = BM25Retriever(meta_index, depth=100, filter='labs = "lewis" AND year < 1955'
                             ).search(q, k=5)
        assert [n.node.node_id for n in nodes] == want.doc_ids and len(nodes) == 5
        assert all("lewis" in n.node.metadata["labs"] for n in nodes)
