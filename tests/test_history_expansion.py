"""The no-LLM conversational expansions (first_turn, history_terms) and the
fused_reformulations stage, on hand-made conversations and on real CAsT 2021 turns."""

from __future__ import annotations

import pytest

from intentrank.core.registry import BuildContext
from intentrank.errors import ConfigError
from intentrank.fuse.rrf import rrf
from intentrank.pipelines import build_pipeline
from intentrank.query.history_expansion import FirstTurn, HistoryTerms, content_words
from intentrank.types import Query, Ranking, Trace, Turn

CONVERSATION = (Turn("What is lobular carcinoma in situ?", "LCIS is an area of abnormal cells."),
                Turn("How common is it in women?"),
                Turn("Is it hereditary, like breast cancer genes?"))


def _turn(text: str = "What are common treatments?") -> Query:
    return Query("q1", text, history=CONVERSATION)


def _expand(stage, query: Query) -> tuple[Query, Trace]:
    trace = Trace()
    (out,) = stage([Ranking(query)], trace)
    return out.query, trace


def test_content_words_drop_stopwords_numbers_and_repeats():
    assert content_words("What is the 2020 rate of LCIS, and is LCIS rare?") == ["rate", "lcis",
                                                                               "rare"]


def test_first_turn_puts_the_first_question_before_the_turn():
    out, _ = _expand(FirstTurn(), _turn())
    assert out.text == "What is lobular carcinoma in situ? What are common treatments?"
    assert out.turn == "What are common treatments?"
    assert out.derived_of("rewrite") == [out.text]


def test_history_terms_adds_the_heaviest_words_of_earlier_questions():
    stage = HistoryTerms(max_terms=4, decay=0.5)
    # first question: distance 1 (weight 1); the previous question: 1; the one before: 0.5
    assert stage.terms(_turn()) == ["lobular", "carcinoma", "situ", "hereditary"]
    out, _ = _expand(stage, _turn())
    assert out.text == "What are common treatments? lobular carcinoma situ hereditary"


def test_words_already_in_the_turn_are_not_added_again():
    assert "carcinoma" not in HistoryTerms().terms(_turn("Treatments of the carcinoma?"))


def test_a_turn_without_history_is_left_alone_and_counted():
    for stage in (FirstTurn(), HistoryTerms()):
        out, trace = _expand(stage, Query("q0", "What is LCIS?"))
        assert out.text == "What is LCIS?" and not out.derived
        assert trace.stages[stage.name].counters["unchanged"] == 1


@pytest.mark.parametrize(("params", "message"), [
    ({"max_terms": 0}, "max_terms"), ({"decay": 0}, "decay"), ({"decay": 1.5}, "decay")])
def test_bad_history_terms_parameters_are_refused(params, message):
    with pytest.raises(ConfigError, match=message):
        build_pipeline({"history_terms": params}, BuildContext())


@pytest.mark.parametrize(("params", "message"), [
    ({"methods": []}, "non-empty list"),
    ({"methods": ["raw", "raw"]}, "twice"),
    ({"methods": ["raw", "first_turn"], "text_from": "rewrite_full"}, "text_from"),
    ({"methods": ["raw", 3]}, "stage name"),
    ({"retriever": "bm25", "depth": 5}, "unknown parameter"),
    ({"methods": ["raw", "nonsense"]}, "unknown stage"),
])
def test_bad_fused_reformulations_configs_are_refused(params, message):
    with pytest.raises(ConfigError, match=message):
        build_pipeline({"fused_reformulations": params}, BuildContext(index=object()))


def _lists(ctx: BuildContext, node, queries: list[Query]) -> list[list[str]]:
    """Each query's doc ids from the pipeline ``node`` built in ``ctx``."""
    return [r.doc_ids for r in build_pipeline(node, ctx).run(queries).rankings]


def test_fused_reformulations_is_rrf_of_each_methods_bm25_list_on_real_cast(cast21):
    """Real CAsT 2021 turns and index: the stage's ranking is exactly RRF (rrf_k 60) of
    BM25's list for the raw turn and for each expansion; later stages see ``text_from``."""
    ds, index = cast21
    queries, _ = ds.split("test")
    turns = [q for q in queries if q.history][:5]
    ctx = BuildContext(index=index)
    stage = build_pipeline({"fused_reformulations": {
        "methods": ["raw", "first_turn", "history_terms"],
        "retriever": {"bm25": {"depth": 20}}, "text_from": "history_terms"}}, ctx)
    result = stage.run(turns)
    raw = _lists(ctx, {"bm25": {"depth": 20}}, turns)
    first = _lists(ctx, ["first_turn", {"bm25": {"depth": 20}}], turns)
    terms = _lists(ctx, ["history_terms", {"bm25": {"depth": 20}}], turns)
    for i, ranking in enumerate(result.rankings):
        expected = rrf([raw[i], first[i], terms[i]], rrf_k=60)
        assert ranking.doc_ids == sorted(expected, key=lambda d: (-expected[d], d))
        assert ranking.query.text == HistoryTerms().expanded(turns[i])
        assert ranking.query.turn == turns[i].text
    assert {"fused_reformulations/first_turn", "fused_reformulations/history_terms"} <= set(
        result.trace.stages)


def test_shipped_conversation_pipeline_fuses_four_lists_on_real_cast(cast21):
    """The shipped ``conversation`` config on real CAsT 2021 turns (the rewrite scripted):
    RRF of BM25's lists for the raw turn, first_turn, history_terms and the rewrite, and
    later stages see the rewrite."""
    from fakes import RecordingLLM

    from intentrank.llm.base import LLMReply
    from intentrank.llm.client import LLMClient
    from intentrank.pipelines import pipeline_from_config

    class Rewriter(RecordingLLM):
        def answer(self, messages, params) -> LLMReply:
            return LLMReply('Rewritten: "What are the symptoms of throat cancer?"')

    ds, index = cast21
    queries, _ = ds.split("test")
    turns = [q for q in queries if q.history][:3]
    stage = pipeline_from_config("conversation", index, llm=LLMClient(Rewriter(), cache=False))
    result = stage.run(turns)
    ctx = BuildContext(index=index)
    rewritten = [Query(t.id, "What are the symptoms of throat cancer?") for t in turns]
    parts = [_lists(ctx, {"bm25": {"depth": 100}}, turns),
             _lists(ctx, ["first_turn", {"bm25": {"depth": 100}}], turns),
             _lists(ctx, ["history_terms", {"bm25": {"depth": 100}}], turns),
             _lists(ctx, {"bm25": {"depth": 100}}, rewritten)]
    for i, ranking in enumerate(result.rankings):
        expected = rrf([p[i] for p in parts], rrf_k=60)
        assert ranking.doc_ids == sorted(expected, key=lambda d: (-expected[d], d))
        assert ranking.query.text == "What are the symptoms of throat cancer?"


def test_cli_reformulates_without_an_llm(tmp_path):
    import json

    from typer.testing import CliRunner

    from intentrank.cli import app
    from intentrank.data.conversations import Conversation, ConversationTurn, write_conversations

    write_conversations([Conversation("c1", (
        ConversationTurn("c1_1", "What is throat cancer?"),
        ConversationTurn("c1_2", "Is it treatable?")))], tmp_path / "conversations.jsonl")
    out = tmp_path / "rewrites.jsonl"
    r = CliRunner().invoke(app, ["reformulate", str(tmp_path), "-m", "first_turn", "-m",
                                 "history_terms", "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["turn"], x["method"], x["reformulation"]) for x in lines] == [
        ("c1_1", "first_turn", "What is throat cancer?"),
        ("c1_2", "first_turn", "What is throat cancer? Is it treatable?"),
        ("c1_1", "history_terms", "What is throat cancer?"),
        ("c1_2", "history_terms", "Is it treatable? throat cancer")]
    bad = CliRunner().invoke(app, ["reformulate", str(tmp_path), "-m", "topic"])
    assert bad.exit_code == 2 and "history_terms" in bad.output
