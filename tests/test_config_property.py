"""Property tests: the YAML pipeline grammar fed arbitrary YAML-like structures builds a
pipeline or raises a ConfigError/DataError, never anything else (and a built pipeline runs or
raises an IntentrankError); the LLM reply parsers turn arbitrary text into a Parsed value and
never raise."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intentrank.core.registry import BuildContext
from intentrank.core.stage import Stage
from intentrank.errors import ConfigError, DataError, IntentrankError
from intentrank.fuse.dynamic import validate_weights
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.llm.parsing import (
    Parsed,
    ParseError,
    parse_json_array,
    parse_numbered_list,
    parse_yes_no,
    read_json_object,
)
from intentrank.pipelines import build_pipeline, pipeline_from_config
from intentrank.query.followups import parse_followups
from intentrank.rerank.listwise import repair_order
from intentrank.types import Query

PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

STAGE_NAMES = ["bm25", "tfidf", "dense", "graph", "sparse", "cutoff", "fuse", "followups",
               "listwise", "multi_query", "compression", "llm_judge", "fuq", "parents",
               "nope"]
PARAM_NAMES = ["k", "depth", "top_k", "rrf_k", "leg_depth", "weights", "inputs", "method", "m",
               "n", "window", "step", "max_tokens", "max_passage_chars", "retriever", "alpha",
               "beta", "gamma", "params", "tolerance", "kk", "rrf", "weighted", "interleave",
               "dynamic"]


class FakeLLM:
    """A plausible reply to every prompt kind (numbered list, JSON array and object)."""

    name = "fake:property"

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        return LLMReply('1. What is lift?\n2. Why drag?\n[2, 1, 3]\n'
                        '{"dense": 0.5, "sparse": 0.3, "graph": 0.2}\nyes')


@pytest.fixture(scope="module")
def bm25_index(cranfield, tmp_path_factory):
    from intentrank.index import IndexSettings, build_index

    return build_index(cranfield.corpus(), tmp_path_factory.mktemp("prop") / "cranfield",
                       IndexSettings(legs=("bm25",)))


@pytest.fixture(scope="module")
def llm():
    return LLMClient(FakeLLM(), cache=None)


# what each stage accepts (plus a typo), so that the factories' own checks are reached
STAGE_PARAMS = {
    "bm25": ["depth"], "tfidf": ["depth"], "dense": ["depth"], "graph": ["depth"],
    "sparse": ["depth", "leg_depth"], "followups": ["m", "max_tokens"], "parents": [],
    "listwise": ["top_k", "window", "step", "max_passage_chars", "max_tokens"],
    "compression": ["top_k", "max_passage_chars", "max_tokens"],
    "llm_judge": ["top_k", "max_passage_chars"],
    "fuq": ["alpha", "beta", "gamma", "top_k", "params"],
}
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 120), st.integers(1, 30), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.sampled_from(STAGE_NAMES + PARAM_NAMES),
)
values = st.one_of(st.integers(-2, 40), st.integers(1, 12), scalars,
                   st.lists(st.floats(-1, 2) | st.integers(-1, 3), max_size=4))
keys = st.one_of(st.sampled_from(STAGE_NAMES + PARAM_NAMES), st.text(max_size=4),
                 st.integers(-2, 2), st.none(), st.booleans())


def _stage(children: st.SearchStrategy) -> st.SearchStrategy:
    def params(name: str) -> st.SearchStrategy:
        return st.dictionaries(st.sampled_from([*STAGE_PARAMS[name], "kk", "k"]), values,
                               max_size=3).map(lambda p: {name: p} if p else name)

    return st.one_of(
        st.sampled_from(sorted(STAGE_PARAMS)).flatmap(params),
        st.builds(lambda r, p: {"multi_query": {"retriever": r, **p}}, children,
                  st.dictionaries(st.sampled_from(["n", "rrf_k", "k", "max_tokens"]), values,
                                  max_size=2)),
        st.builds(lambda k: {"cutoff": k}, values),
        st.builds(lambda method, inputs, extra: {"fuse": {"method": method, "inputs": inputs,
                                                          **extra}},
                  st.sampled_from(["rrf", "weighted", "interleave", "dynamic", "max"]),
                  st.lists(children, min_size=1, max_size=4),
                  st.dictionaries(st.sampled_from(["rrf_k", "k", "weights", "tolerance",
                                                   "max_tokens"]),
                                  values, max_size=2)),
    )


nodes = st.recursive(
    st.one_of(scalars, _stage(st.sampled_from(["bm25", "tfidf", {"bm25": {"depth": 5}}]))),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=3),
        _stage(children),
    ),
    max_leaves=12,
)


def _build_or_config_error(node, index, llm) -> Stage | None:
    try:
        stage = build_pipeline(node, BuildContext(index, {"llm": llm}))
    except (ConfigError, DataError):
        return None
    assert isinstance(stage, Stage)
    return stage


@settings(PROPERTY, max_examples=300)
@given(node=nodes)
def test_grammar_builds_or_raises_config_error(bm25_index, llm, node):
    stage = _build_or_config_error(node, bm25_index, llm)
    if stage is None:
        return
    stage.describe()
    try:  # a built pipeline runs, or fails with a named error (e.g. a leg the index lacks)
        result = stage.run([Query("1", "shock wave boundary layer")])
    except IntentrankError:
        return
    assert len(result.rankings) == 1


@PROPERTY
@given(data=st.one_of(
    st.dictionaries(st.sampled_from(["pipeline", "index", "description", "pipline"]), nodes,
                    max_size=3),
    nodes))
def test_config_files_build_or_raise_config_error(bm25_index, llm, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.yaml"
        try:
            path.write_text(yaml.safe_dump(data))
        except yaml.YAMLError:
            return
        try:
            stage = pipeline_from_config(path, index=bm25_index, llm=llm)
        except (ConfigError, DataError):
            return
    assert isinstance(stage, Stage)


# -- parsers -------------------------------------------------------------------------------
reply_text = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(["[", "]", "{", "}", ",", ":", '"', "1", "2", "-3", "1e999",
                              "NaN", "Infinity", "true", "null", " ", "\n", "```json\n",
                              "```", "1. ", "Q2: ", "- ", "yes", "no", "dense", "0.5",
                              "Follow-up questions:", "?", "\u00a0", "•"]),
             max_size=80).map("".join),
)


@settings(max_examples=200, deadline=None)
@given(text=reply_text, limit=st.none() | st.integers(-2, 5), n=st.integers(1, 6))
def test_parsers_never_raise(text, limit, n):
    for parsed in (parse_numbered_list(text, limit=limit, exclude=(text[:20],)),
                   parse_json_array(text), parse_yes_no(text)):
        assert isinstance(parsed, Parsed)
        assert parsed.ok or parsed.reason
    # what run_step treats as an unusable reply (ParseError is a ValueError), nothing else
    with contextlib.suppress(ValueError, KeyError, TypeError):
        validate_weights(read_json_object(text))
    items, reason = parse_followups(text, text[:10], n)
    assert len(items) <= n and (items or reason)
    arr = parse_json_array(text)
    order, _ = repair_order(arr.value, n)
    assert sorted(order) == list(range(n))


def test_runaway_replies_are_cheap():
    """A model stuck in a loop of brackets: parsed (no RecursionError) and refused."""
    for text in ("[" * 50_000 + "]" * 50_000, "[ " * 5_000 + "]" * 5_000, "{" * 20_000,
                 "```json\n" + "[" * 10_000 + "\n```"):
        assert not parse_json_array(text).ok
        with pytest.raises(ParseError):
            read_json_object(text)
    assert repair_order([float("inf"), float("nan"), "2", 1], 2) == ([1, 0], True)
