"""Conversational reformulation stages: each method's prompt, the searched text, fallbacks,
the truncation policy, the no-LLM baseline, YAML pipelines, and real models on CAsT."""

from __future__ import annotations

import pytest
from fakes import RecordingLLM

from intentrank.core.registry import BuildContext
from intentrank.core.stage import Stage
from intentrank.data.conversations import load_cast
from intentrank.llm.base import LLMReply
from intentrank.llm.client import LLMClient
from intentrank.llm.parsing import ParseError
from intentrank.pipelines import build_pipeline
from intentrank.query.dialog import clip_words, render_dialog
from intentrank.query.reformulate import (
    METHODS,
    ConcatTurns,
    ConversationalReformulator,
    clean_rewrite,
    unmask,
)
from intentrank.types import Query, Ranking, Trace, Turn

HISTORY = (Turn("What is throat cancer?", "Cancer of the pharynx or the larynx."),
           Turn("What causes it?", "Smoking and alcohol, mostly."))
TURN = Query("c1_3", "Is it treatable?", HISTORY)
FIRST = Query("c1_1", "What is throat cancer?")


class Scripted(RecordingLLM):
    """Replies by the prompt that was sent (the last user message's first line)."""

    def __init__(self, replies: dict[str, str]) -> None:
        super().__init__()
        self.replies = replies

    def answer(self, messages, params) -> LLMReply:
        text = messages[-1]["content"]
        for key, reply in self.replies.items():
            if key in text:
                return LLMReply(reply)
        return LLMReply("")


def _run(stage: Stage, queries: list[Query]) -> tuple[list[Query], Trace]:
    trace = Trace()
    out = stage([Ranking(q) for q in queries], trace)
    return [r.query for r in out], trace


def test_full_dialog_rewrite_replaces_the_searched_text_and_keeps_the_turn():
    llm = Scripted({"Last message: Is it treatable?": "Rewritten: \"Is throat cancer treatable?\""})
    stage = ConversationalReformulator(LLMClient(llm, cache=False), "rewrite_full")
    (out, first), trace = _run(stage, [TURN, FIRST])
    assert out.text == "Is throat cancer treatable?"
    assert out.turn == "Is it treatable?" and out.derived_of("rewrite") == [out.text]
    assert first == FIRST  # no history: no call, left alone
    assert len(llm.requests) == 1
    assert trace.stages["rewrite_full"].counters["no_history"] == 1
    sent = llm.requests[0]["messages"][-1]["content"]
    assert "User: What causes it?\nAssistant: Smoking and alcohol, mostly." in sent


def test_questions_only_sends_no_answers():
    llm = Scripted({"Last question:": "Is throat cancer treatable?"})
    _run(ConversationalReformulator(LLMClient(llm, cache=False), "rewrite_questions"), [TURN])
    sent = llm.requests[0]["messages"][-1]["content"]
    assert "What causes it?" in sent and "Smoking" not in sent and "Assistant:" not in sent


def test_summarize_then_rewrite_makes_two_calls_and_passes_the_summary_on():
    llm = Scripted({"Conversation:": "The user asks about throat cancer and its causes.",
                    "Summary: The user asks about throat cancer": "Is throat cancer treatable?"})
    (out,), trace = _run(ConversationalReformulator(LLMClient(llm, cache=False),
                                                    "rewrite_summary"), [TURN])
    assert out.text == "Is throat cancer treatable?"
    assert len(llm.requests) == 2 and trace.stages["rewrite_summary"].counters["llm_calls"] == 2


def test_masked_hyde_searches_the_passage_without_masks():
    passage = "Throat cancer is treated by [MASK] and radiation; about [mask] percent survive."
    llm = Scripted({"(no earlier turns)": "[MASK] is [MASK].",
                    "Last question: Is it treatable?": passage})
    (out, first), trace = _run(ConversationalReformulator(LLMClient(llm, cache=False),
                                                          "hyde_masked"), [TURN, FIRST])
    assert out.text == "Throat cancer is treated by and radiation; about percent survive."
    assert out.derived_of("masked") == [passage] and out.derived_of("hypothetical") == [out.text]
    # HyDE writes a passage for a first turn too; two words left is a counted fallback
    assert len(llm.requests) == 2 and first.text == FIRST.text
    counters = trace.stages["hyde_masked"].counters
    assert counters["fallbacks"] == 1 and counters["fallback.invalid"] == 1


def test_document_methods_name_the_genre():
    llm = Scripted({"scientific abstract": "A study of 200 patients with throat cancer ..."})
    (out,), _ = _run(ConversationalReformulator(LLMClient(llm, cache=False), "hyde_doc",
                                                genre="scientific abstract"), [TURN])
    assert out.text.startswith("A study of 200 patients")


def test_unusable_replies_fall_back_to_the_turn_and_are_counted():
    llm = Scripted({"Last message:": "word " * 100})
    (out,), trace = _run(ConversationalReformulator(LLMClient(llm, cache=False),
                                                    "rewrite_full"), [TURN])
    assert out == TURN
    counters = trace.stages["rewrite_full"].counters
    assert counters["fallbacks"] == 1 and counters["fallback.unparseable"] == 1
    event = trace.events[0]
    assert event.query_id == "c1_3" and "not a query" in event.details["detail"]


def test_an_unchanged_rewrite_is_counted_not_pushed():
    llm = Scripted({"Last message:": "Is  it treatable?"})
    (out,), trace = _run(ConversationalReformulator(LLMClient(llm, cache=False),
                                                    "rewrite_full"), [TURN])
    assert out == TURN and trace.stages["rewrite_full"].counters["unchanged"] == 1


@pytest.mark.parametrize(("reply", "expected"), [
    ("Is throat cancer treatable?", "Is throat cancer treatable?"),
    ("Rewritten question: 'Is throat cancer treatable?'\nBecause ...",
     "Is throat cancer treatable?"),
    ("\n\n  Query: cancer  \n", "cancer"),
])
def test_clean_rewrite(reply, expected):
    assert clean_rewrite(reply) == expected


@pytest.mark.parametrize("reply", ["", "  \n ", "Rewritten:", "x " * 81])
def test_clean_rewrite_refuses(reply):
    with pytest.raises(ParseError):
        clean_rewrite(reply)


def test_unmask():
    assert unmask("Born in [MASK] , he led [ MASK ] and [Masked] troops.") == \
        "Born in, he led and troops."
    with pytest.raises(ParseError, match="fewer than three words"):
        unmask("[MASK] [MASK] ok")


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="unknown reformulation method 'hyd'.*rewrite_full"):
        ConversationalReformulator(LLMClient(Scripted({}), cache=False), "hyd")
    with pytest.raises(ValueError, match="genre"):
        ConversationalReformulator(LLMClient(Scripted({}), cache=False), "hyde_doc", genre=" ")
    with pytest.raises(ValueError, match="max_history_words"):
        ConversationalReformulator(LLMClient(Scripted({}), cache=False), max_history_words=0)


# -- truncation ------------------------------------------------------------------------------

def test_a_long_conversation_keeps_the_first_and_the_latest_turns():
    history = tuple(Turn(f"question {i} about lobular carcinoma", "answer " * 80)
                    for i in range(12))
    dialog = render_dialog(history, max_words=200, max_answer_words=30)
    # each turn: User line (6 words) + Assistant line (1 + 30 words + "...") = 38 words
    assert (dialog.kept, dialog.omitted) == (5, 7)
    lines = dialog.text.splitlines()
    assert lines[0] == "User: question 0 about lobular carcinoma"
    assert lines[2] == "[7 earlier turns left out]"
    assert lines[3] == "User: question 8 about lobular carcinoma"
    assert lines[-2] == "User: question 11 about lobular carcinoma"
    assert lines[-1] == "Assistant: " + "answer " * 29 + "answer ..."
    assert len(dialog.text.split()) <= 200 + 5  # the omission line


def test_the_stage_counts_truncated_turns_and_the_prompt_stays_in_budget():
    history = tuple(Turn(f"question {i}?", "word " * 300) for i in range(14))
    llm = Scripted({"Last message:": "What about question 13?"})
    stage = ConversationalReformulator(LLMClient(llm, cache=False), max_history_words=150,
                                       max_answer_words=20)
    _, trace = _run(stage, [Query("c_15", "And that?", history)])
    # 25 words a turn (3 + 22): the first, the last and the 4 before it fit in 150
    assert trace.stages["rewrite_full"].counters["truncated_turns"] == 8
    sent = llm.requests[0]["messages"][-1]["content"]
    assert "question 0?" in sent and "question 13?" in sent and "question 5?" not in sent
    assert len(sent.split()) < 220


def test_clip_words():
    assert clip_words("a  b c", 3) == "a b c" and clip_words("a b c d", 2) == "a b ..."


# -- baseline and composition ------------------------------------------------------------------

def test_concat_turns_joins_the_most_recent_questions_that_fit():
    stage = ConcatTurns(max_words=9)
    (out,), _ = _run(stage, [TURN])
    assert out.text == "What causes it? Is it treatable?"  # the first question does not fit
    assert out.turn == TURN.text
    (same,), _ = _run(stage, [FIRST])
    assert same == FIRST


@pytest.mark.slow
def test_yaml_pipeline_rewrite_then_bm25_and_the_robust_fusion(cast21):
    """Real CAsT 2021 turns and index: ``rewrite_full >> bm25`` searches the rewrite; fused
    with the raw turn by RRF, the raw turn's hits stay in the list."""
    ds, index = cast21
    queries, _ = ds.split("test")
    turn = next(q for q in queries if q.id == "106_5")
    llm = Scripted({"Last message:": "What are common treatments for lobular carcinoma in situ?"})
    ctx = BuildContext(index=index, resources={"llm": LLMClient(llm, cache=False)})
    plain = build_pipeline([{"rewrite_full": {}}, {"bm25": {"depth": 20}}], ctx)
    result = plain.run([turn])
    assert result.rankings[0].query.text.endswith("lobular carcinoma in situ?")
    robust = build_pipeline({"fuse": {"method": "rrf", "inputs": [
        ["rewrite_full", {"bm25": {"depth": 20}}], {"bm25": {"depth": 20}}]}}, ctx)
    fused = robust.run([turn]).rankings[0]
    raw_top = build_pipeline({"bm25": {"depth": 20}}, ctx).run([turn]).rankings[0].doc_ids[:3]
    assert set(raw_top) <= set(fused.doc_ids)
    assert fused.query.text == result.rankings[0].query.text  # later stages see the rewrite
    assert "rrf/rewrite_full" in robust.run([turn]).trace.stages


def test_every_method_is_a_registered_stage():
    from intentrank.pipelines import known_names

    assert {*METHODS, "concat_turns"} <= set(known_names())


@pytest.mark.slow
def test_real_embedded_model_rewrites_a_cast_turn(data_dir):
    """The embedded 0.5B writes a HyDE passage for CAsT 2021 turn 106_5 ("What are common
    treatments?") that names what the earlier turns were about; no fallback."""
    from intentrank.llm.client import load_llm

    conversation = next(c for c in load_cast(2021, data_dir / "trec-cast") if c.id == "106")
    turn = conversation.queries()[4]
    stage = ConversationalReformulator(load_llm("embedded"), "hyde", max_history_words=300,
                                       max_answer_words=40)
    (out,), trace = _run(stage, [turn])
    assert out.turn == turn.text and out.text != turn.text
    assert "carcinoma" in out.text.lower() or "cancer" in out.text.lower()
    assert trace.stages["hyde"].counters.get("fallbacks", 0) == 0


# -- the command line --------------------------------------------------------------------------

def _cli(args: list[str]):
    from typer.testing import CliRunner

    from intentrank.cli import app

    return CliRunner().invoke(app, args)


def test_cli_reformulates_a_conversation_file(tmp_path, fake_openai):
    import json

    from intentrank.data.conversations import Conversation, ConversationTurn, write_conversations

    write_conversations([Conversation("c1", (
        ConversationTurn("c1_1", "What is throat cancer?", answer="Cancer of the larynx."),
        ConversationTurn("c1_2", "Is it treatable?", rewrite="Is throat cancer treatable?")))],
        tmp_path / "conversations.jsonl")
    url, script = fake_openai("ok", reply="Is throat cancer treatable?")
    out = tmp_path / "rewrites.jsonl"
    r = _cli(["--llm", f"openai:fake@{url}", "--no-llm-cache", "reformulate", str(tmp_path),
              "-m", "rewrite_full", "-m", "concat_turns", "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["turn"], x["method"]) for x in lines] == [
        ("c1_1", "rewrite_full"), ("c1_2", "rewrite_full"),
        ("c1_1", "concat_turns"), ("c1_2", "concat_turns")]
    assert lines[1] == {"conversation": "c1", "turn": "c1_2", "question": "Is it treatable?",
                        "method": "rewrite_full", "reformulation": "Is throat cancer treatable?",
                        "changed": True, "fallback": None, "gold": "Is throat cancer treatable?"}
    assert lines[3]["reformulation"] == "What is throat cancer? Is it treatable?"
    assert script.requests == 1  # the first turn has no history: no call


def test_cli_counts_fallbacks_per_turn(tmp_path, fake_openai):
    import json

    url, _ = fake_openai("ok", reply="")
    out = tmp_path / "r.jsonl"
    r = _cli(["--llm", f"openai:fake@{url}", "--no-llm-cache", "reformulate", "cast2021",
              "--limit", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [x["fallback"] for x in lines] == [None, "empty_reply", "empty_reply"]
    assert [x["reformulation"] for x in lines] == [x["question"] for x in lines]
    assert "fallbacks" in r.output  # the health line


@pytest.mark.parametrize(("args", "message"), [
    (["reformulate", "nope.jsonl"], "no such conversations file"),
    (["reformulate", "cast2021", "-m", "hyd"], "--method: unknown 'hyd'"),
    (["reformulate", "cast2021", "--limit", "-1"], "--limit"),
])
def test_cli_refuses_bad_input(args, message):
    r = _cli(args)
    assert r.exit_code == 2 and message in r.output


def test_cli_names_the_bad_line_of_a_conversation_file(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"id": "c1", "turns": [{"id": "t1", "question": ""}]}\n')
    r = _cli(["reformulate", str(tmp_path / "c.jsonl")])
    assert r.exit_code == 2 and "c.jsonl:1" in r.output and "question" in r.output


@pytest.mark.slow
def test_the_shipped_experiment_runs_on_real_conversations(data_dir, tmp_path):
    """``intentrank cast-passages`` then the shipped ``reformulation`` experiment (no-LLM rows)
    on the real CAsT 2021 passages: a conversational dataset through the harness."""
    import json

    root = tmp_path / "cast2021"
    assert _cli(["cast-passages", str(root), "--cast-root",
                 str(data_dir / "trec-cast")]).exit_code == 0
    r = _cli(["experiment", "reformulation", "--dataset", str(root), "--index",
              str(tmp_path / "idx"), "--without", "llm", "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "rep.json").read_text())
    scores = {c["name"]: c["aggregate"]["nDCG@10"] for c in report["configs"]}
    assert set(scores) == {"raw turn", "concat turns"} and report["n_queries"] == 40
    assert "rewrite (full dialog)" in report["skipped"]
    assert 0.3 < scores["raw turn"] < 0.8 and 0.3 < scores["concat turns"] < 0.8


def test_cli_cast_passages_refuses_a_file_as_output(tmp_path):
    target = tmp_path / "taken"
    target.write_text("x")
    r = _cli(["cast-passages", str(target)])
    assert r.exit_code == 2 and "is a file; give a directory" in r.output
    assert target.read_text() == "x"
