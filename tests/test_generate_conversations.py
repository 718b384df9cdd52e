"""Generated conversational test sets: the lexical filters on hand-made cases, the round
schedule, a scripted LLM end to end (a hand-made collection and the real Cranfield one),
resume from an interrupted log, bad settings, and one real embedded-model generation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakes import write_collection

from intentrank.data.conversations import load_conversations
from intentrank.data.dataset import load_dataset
from intentrank.errors import ConfigError, DataError
from intentrank.generate.conversation_filters import (
    contextual_problem,
    dropped_phrases,
    faithful_share,
    history_problem,
    key_terms,
    link_kind,
    lost_terms,
    missing_terms,
)
from intentrank.generate.conversations import (
    REASONS,
    ConversationSettings,
    generate_conversations,
)
from intentrank.generate.runlog import ATTEMPTS, GENERATION_JSON
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.types import Trace

# --- the filters on hand-made cases --------------------------------------------------------

Q = "what similarity laws must be obeyed when constructing aeroelastic models of heated " \
    "high speed aircraft ."
DOC = ("Similarity laws for aeroelastic models of heated high speed aircraft are derived. "
       "Constructing such models requires scaling the heat conduction and the structure.")


def test_key_terms_drop_function_words_and_stem():
    assert key_terms(Q) == {"similar", "law", "obey", "construct", "aeroelast", "model",
                            "heat", "high", "speed", "aircraft"}
    assert key_terms("What are they and is it there?") == set()
    assert key_terms("Does vitamin D lower p53?") == {"vitamin", "lower", "p53"}


@pytest.mark.parametrize("question, reason", [
    ("What similarity laws must be obeyed when constructing aeroelastic models of heated "
     "high-speed aircraft?", "identical"),
    ("When constructing them, what similarity laws must aeroelastic models of heated high "
     "speed aircraft obey?", "self_contained"),  # a pronoun, but every key term is kept
    ("What methods are used to measure their impact?", "drifted"),  # no key term kept
    ("Which scaling rules and tunnel tests and materials apply to those models?",
     "drifted"),  # 1 of 6 key terms is the query's
    ("What similarity laws must they obey?", None),
    ("What similarity laws must be obeyed?", None),  # ellipsis
])
def test_contextual_question_rules(question, reason):
    got = contextual_problem(question, Q)
    assert (got is None) if reason is None else (got[0] == reason), got


def test_dropped_phrases_are_the_query_spans_left_out():
    assert dropped_phrases("What similarity laws must be obeyed?", Q) == [
        "constructing aeroelastic models of heated high speed aircraft"]
    assert dropped_phrases("What effect does rapamycin have on its concentration?",
                           "Rapamycin decreases the concentration of triacylglycerols in "
                           "fruit flies.") == ["decreases", "triacylglycerols in fruit flies"]


def test_faithful_share_and_link_kind():
    # question terms: similar, law, appli, model, tunnel -> 3 of 5 are the query's
    assert faithful_share("Which similarity laws apply to models in tunnels?", Q) == 0.6
    assert link_kind("What similarity laws must they obey?", Q) == "pronoun"
    assert link_kind("What similarity laws must be obeyed?", Q) == "ellipsis"
    # a reference word the query has itself is no link
    assert link_kind("is it possible to relate pressures?",
                     "is it possible to relate pressures on ogives .") == "ellipsis"


def _turns(*pairs):
    return [{"question": q, "answer": a} for q, a in pairs]


def test_history_rules():
    c = "What similarity laws must they obey?"
    assert missing_terms(c, Q) == {"construct", "aeroelast", "model", "heat", "high", "speed",
                                   "aircraft"}
    good = _turns(("How are aeroelastic models of heated high speed aircraft built?",
                   "Similarity laws for aeroelastic models of heated aircraft are derived."),
                  ("Is constructing them hard?", "Constructing such models requires scaling."))
    assert history_problem(c, Q, good, DOC) is None
    half = _turns(("How are aeroelastic models built?", "Similarity laws are derived."),
                  ("Is constructing them hard?", "Constructing such models requires scaling."))
    reason, detail = history_problem(c, Q, half, DOC)
    assert reason == "unrecoverable" and "4 key term(s)" in detail and "aircraft" in detail
    assert lost_terms(c, Q, half) == {"heat", "high", "speed", "aircraft"}
    assert history_problem(c, Q, half, DOC, max_lost=3)[0] == "unrecoverable"
    assert history_problem(c, Q, half, DOC, max_lost=4) is None
    assert history_problem(c, Q, half, DOC, recoverable=False) is None
    asked = _turns((Q, "Similarity laws are derived."))
    assert history_problem(c, Q, asked, DOC)[0] == "repeats_query"
    again = _turns(("What similarity laws must they obey?", "Similarity laws are derived."))
    assert "is the contextual question" in history_problem(c, Q, again, DOC)[1]
    invented = _turns(("How are aeroelastic models of heated high speed aircraft built?",
                       "Engineers in Toulouse glue balsa wood with epoxy overnight."),
                      ("Is constructing them hard?", "Yes, very."))
    reason, detail = history_problem(c, Q, invented, DOC)
    # answer content words: engineers toulouse glue balsa wood epoxy overnight yes very:
    # none of the 9 occurs in DOC
    assert reason == "unsupported" and detail.startswith("only 0%")


@pytest.mark.parametrize("reply, problem", [
    ({"turns": [{"question": "What is flutter?", "answer": "A panel vibration."}]}, None),
    ("not json", "no list of turns in the reply"),
    ({"turns": []}, "0 turns, asked for 1"),
    ({"turns": [{"question": "What is flutter?", "answer": " "}]},
     "turn 1 lacks a question or an answer"),
    ({"turns": [{"question": "What is " + "very " * 40 + "flutter?", "answer": "x"}]},
     "turn 1's question has more than 40 words"),
    ({"turns": [{"question": "What is high-speed飞行?", "answer": "x"}]},
     "turn 1 has a character of another script ('飞')"),
])
def test_malformed_turns(reply, problem):
    from intentrank.generate.conversations import _turns_problem

    assert _turns_problem(reply, 1) == problem


def test_rounds_grow_through_the_papers_lengths():
    assert [ConversationSettings(turns=t).rounds for t in (2, 3, 4, 6, 8, 11)] == [
        [1], [2], [2, 1], [2, 3], [2, 3, 2], [2, 3, 5]]
    assert ConversationSettings(turns=16, round_turns=4).rounds == [2, 3, 4, 1, 4, 1]


@pytest.mark.parametrize("kwargs, message", [
    ({"turns": 1}, "--turns must be a whole number in [2, 31]"),
    ({"turns": 40}, "--turns must be"),
    ({"n": 0}, "--n must be"),
    ({"max_minutes": -1}, "--minutes must be > 0"),
    ({"max_attempts": 0}, "--max-attempts must be >= 1"),
    ({"split": "../x"}, "--split must be a plain name"),
    ({"round_turns": 1}, "round_turns must be in [2, 10]"),
    ({"min_faithful": 2}, "min_faithful must be in [0, 1]"),
    ({"max_lost": -1}, "max_lost must be a whole number >= 0"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        ConversationSettings(**kwargs)


# --- a scripted LLM ------------------------------------------------------------------------


class ConversationLLM:
    """Replies like a good generator: the topic is the query's last two words, the follow-up
    the query with them replaced by "them", the earlier turns use the words asked for with
    answers copied from the document. ``script`` maps a query to replies to send instead,
    by contract ("contextualize", "history", "extend")."""

    name, model = "fake:conversation", "fake-conversation"

    def __init__(self, script: dict[str, dict[str, str]] | None = None) -> None:
        self.script = script or {}
        self.calls = 0
        self.query = ""
        self.extend_prompts: list[str] = []

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        self.calls += 1
        prompt = messages[-1]["content"]
        if prompt.startswith("Search query:"):
            self.query = prompt.split("\n", 1)[0].removeprefix("Search query: ")
            kind = "contextualize"
            ws = re.findall(r"[\w-]+", self.query)
            reply = {"topic": " ".join(ws[-2:]),
                     "follow_up": " ".join(ws[:-2]) + " for them?"}
        else:
            doc = prompt.split("Document:\n", 1)[1].split("\n\n", 1)[0]
            k = int(re.search(r"(?:first|the) (\d+) turns", prompt).group(1))
            if "Phrases for the first question:" in prompt:
                kind = "history"
                asked = prompt.rsplit("question: ", 1)[1].split(".\n", 1)[0].replace('"', "")
                turns = [{"question": f"Tell me about {asked}?", "answer": doc[:60]}]
            else:
                kind = "extend"
                self.extend_prompts.append(prompt)
                turns = []
            turns += [{"question": f"Background question {len(turns) + j}?",
                       "answer": doc[:40]} for j in range(k - len(turns))]
            reply = {"turns": turns}
        text = self.script.get(self.query, {}).get(kind, json.dumps(reply))
        return LLMReply(text, 50, 20, raw={"finish_reason": "stop"})


def _client(llm) -> LLMClient:
    return LLMClient(llm, cache=False, retries=0)


DOCS = {
    "d1": "Laminar boundary layers on flat plates grow with the square root of distance.",
    "d2": "Shock waves stand ahead of blunt bodies in supersonic flow at high Mach number.",
    "d3": "Heat transfer to a cone in hypersonic flow rises with the wall temperature ratio.",
    "d4": "Panel flutter of thin plates appears above a critical dynamic pressure value.",
    "d5": "Unrelated text about nothing in particular that no query asks for at all today.",
    # unjudged neighbours that name the topics (the fake's topic: a query's last two words)
    "d6": "Flat plates in a wind tunnel were painted to show transition on flat plates.",
    "d7": "Blunt bodies entering the atmosphere glow as blunt bodies heat up quickly.",
    "d8": "The wall temperature of a cooled rocket nozzle sets its wall temperature limit.",
    "d9": "Thin plates buckle under compression loads: waves appear on the plates.",
}
QUERIES = {
    "1": "how thick are laminar boundary layers on flat plates",
    "2": "where do shock waves stand near blunt bodies",
    "3": "how does heat transfer to a cone depend on wall temperature",
    "4": "when does panel flutter of thin plates appear",
}
QRELS = [("1", "d1", 2), ("1", "d5", 0), ("2", "d2", 1), ("3", "d3", 3), ("3", "d1", 1),
         ("4", "d4", 1)]


@pytest.fixture()
def tiny(tmp_path) -> Path:
    return write_collection(tmp_path / "tiny", DOCS, QUERIES, QRELS)


def _gen(data, out, llm=None, **kw):
    kw.setdefault("n", 4)
    return generate_conversations(data, out, llm=_client(llm or ConversationLLM()),
                                  progress=False, **kw)


def test_layout_qrels_and_record(tiny, tmp_path):
    out = tmp_path / "out"
    trace = Trace()
    report = _gen(tiny, out, trace=trace)
    assert report.kept == 4 and report.attempts == 4
    assert (out / "corpus.jsonl").is_symlink()
    assert (out / "corpus.jsonl").resolve() == (tiny / "corpus.jsonl").resolve()
    # the collection's judgments of the kept queries, grade 0 included, in qrels order
    rows = (out / "qrels" / "test.tsv").read_text().splitlines()
    assert rows[0] == "query-id\tcorpus-id\tscore"
    assert sorted(rows[1:]) == sorted(f"{q}\t{d}\t{g}" for q, d, g in QRELS)
    convs = {c.id: c for c in load_conversations(out / "conversations.jsonl")}
    assert set(convs) == {"c1", "c2", "c3", "c4"}
    c3 = convs["c3"]
    assert [t.id for t in c3.turns] == ["c3_1", "c3_2", "3"]
    last = c3.turns[-1]
    assert last.rewrite == QUERIES["3"] and last.relevant == {"d3": 3, "d1": 1}
    assert last.question == "how does heat transfer to a cone depend on for them?"
    # the earlier turns come from the gold document's (d3's) nearest BM25 neighbour that
    # names the dropped topic ("wall temperature") and is not judged relevant to the query;
    # they carry no label
    assert all(t.relevant is None and t.rewrite is None and t.passage_id == "d8"
               for t in c3.turns[:-1])
    assert c3.turns[0].question == "Tell me about wall temperature?"
    assert c3.turns[0].answer == DOCS["d8"][:60]
    for c in convs.values():
        last = c.turns[-1]
        assert c.turns[0].passage_id not in last.relevant or \
            last.relevant[c.turns[0].passage_id] <= 0
    # the loader sees the last turns as the judged queries, with their history
    queries, qrels = load_dataset(out).split("test")
    assert {q.id for q in queries} == {"1", "2", "3", "4"}
    q3 = next(q for q in queries if q.id == "3")
    assert [t.question for t in q3.history] == ["Tell me about wall temperature?",
                                                "Background question 1?"]
    assert qrels["1"] == {"d1": 2, "d5": 0}
    info = json.loads((out / GENERATION_JSON).read_text())
    assert info["kept"] == 4 and info["kept_share"] == 1.0
    assert info["rejected"] == dict.fromkeys(REASONS, 0)
    assert info["links"] == {"pronoun": 4} and info["llm_calls"] == 8
    assert info["kept_with_a_lost_term"] == 0
    assert info["identity"]["model"] == "fake-conversation"
    assert info["identity"]["history_from"] == "neighbour" == info["history_from"]
    assert set(info["identity"]["prompts"]) == {"contextualize_query", "generate_history"}
    assert info["runs"][0]["stopped_by"] == "n" and info["usable_queries"] == 4
    assert trace.stages["generate_conversations"].counters["llm_calls"] == 8
    assert trace.stages["generate_conversations"].queries == 4  # the health line counts attempts
    assert len((out / ATTEMPTS).read_text().splitlines()) == 4


def test_gold_history_is_the_most_relevant_document(tiny, tmp_path):
    """``history_from="gold"`` (the sets before issue 34): the answers come from the gold
    document, so the history holds the words that find it."""
    _gen(tiny, tmp_path / "gold", history_from="gold")
    convs = {c.id: c for c in load_conversations(tmp_path / "gold" / "conversations.jsonl")}
    assert all(t.passage_id == "d3" for t in convs["c3"].turns[:-1])
    assert convs["c3"].turns[0].answer == DOCS["d3"][:60]
    with pytest.raises(ConfigError, match="--history-from must be one of neighbour, gold"):
        _gen(tiny, tmp_path / "bad", history_from="nosuch")


def test_a_query_without_an_unjudged_neighbour_is_rejected(tmp_path):
    docs = {"a": "laminar boundary layers on flat plates", "b": "boundary layers on plates",
            "c": "nothing shared whatsoever here"}
    data = write_collection(tmp_path / "all", docs, {"1": "laminar boundary layers on plates"},
                            [("1", "a", 2), ("1", "b", 1)])
    llm = ConversationLLM()
    report = _gen(data, tmp_path / "out", llm, n=1)
    assert report.kept == 0 and report.info["rejected"]["no_neighbour"] == 1
    assert llm.calls == 1  # rejected before the history is written


def test_neighbours_skip_the_document_and_its_relevant_ones():
    from intentrank.generate.conversations import Neighbours

    nb = Neighbours(DOCS, 1500)
    assert nb.of("d3", {}, ["wall temperature"]) == "d8"  # d3 is never its own neighbour
    assert nb.of("d3", {"d8": 0}, ["wall temperature"]) == "d8"  # judged not relevant
    assert nb.of("d3", {"d8": 1}, ["wall temperature"]) is None  # none else names it
    assert nb.of("d3", {"d8": 1}, []) not in ("d3", "d8", None)  # no phrases: the nearest
    assert nb.of("d2", {}, ["shock waves"]) is None  # only d2 itself says it


def test_long_conversations_extend_the_short_ones(tiny, tmp_path):
    _gen(tiny, tmp_path / "3t")
    llm = ConversationLLM()
    _gen(tiny, tmp_path / "11t", llm, turns=11)
    short = {c.id: c for c in load_conversations(tmp_path / "3t" / "conversations.jsonl")}
    long = {c.id: c for c in load_conversations(tmp_path / "11t" / "conversations.jsonl")}
    for cid, c in long.items():
        assert len(c.turns) == 11
        # rounds [2, 3, 5]: 5 then 3 turns are put before the 3-turn conversation
        assert [(t.question, t.answer) for t in c.turns[-3:]] == \
            [(t.question, t.answer) for t in short[cid].turns]
        assert len({t.id for t in c.turns}) == 11
    info = json.loads((tmp_path / "11t" / GENERATION_JSON).read_text())
    assert info["rounds"] == [2, 3, 5] and info["llm_calls"] == 4 * 4
    assert "extend_conversation" in info["identity"]["prompts"]
    # the extension sees the earlier turns, not the last question (the 0.5B copied it)
    assert llm.extend_prompts and not any("for them?" in p for p in llm.extend_prompts)


def test_every_rejection_is_counted(tiny, tmp_path):
    history = json.dumps({"turns": [
        {"question": "Tell me about laminar boundary layers?", "answer": DOCS["d1"][:50]},
        {"question": "Tell me about laminar boundary layers?", "answer": DOCS["d1"][:50]}]})
    script = {
        QUERIES["1"]: {"history": history},  # two turns ask the same: malformed
        QUERIES["2"]: {"contextualize": json.dumps(
            {"topic": "bodies", "follow_up": "Where do shock waves stand near blunt bodies?"})},
        QUERIES["3"]: {"contextualize": '{"topic": "cones", "follow_up": '},  # torn JSON
        QUERIES["4"]: {"history": json.dumps({"turns": [
            {"question": "What is flutter?", "answer": "A musical instrument from Peru."},
            {"question": "Is it loud?", "answer": "Yes."}]})},
    }
    report = _gen(tiny, tmp_path / "out", ConversationLLM(script))
    assert report.kept == 0
    assert {k: v for k, v in report.info["rejected"].items() if v} == {
        "malformed": 2, "identical": 1, "unrecoverable": 1}
    attempts = {a["query_id"]: a for a in map(json.loads,
                                              (tmp_path / "out" / ATTEMPTS).open())}
    assert attempts["1"]["detail"] == "earlier turns: two earlier turns ask the same question"
    assert attempts["3"]["detail"] == "no topic and follow-up question in the reply"
    assert attempts["3"]["calls"] == 1  # calls stop at the first rejection
    assert "plate" in attempts["4"]["detail"]  # "thin plates" was dropped, never said
    assert report.info["kept_share"] == 0.0 and report.info["runs"][0]["stopped_by"] == \
        "queries"


def test_one_lost_term_is_let_go_by_default_and_recorded(tiny, tmp_path):
    # query 4's follow-up drops "thin plates"; the turns bring back "thin" only
    script = {QUERIES["4"]: {"history": json.dumps({"turns": [
        {"question": "Why do thin panels flutter?",
         "answer": "Panel flutter appears above a critical dynamic pressure value."},
        {"question": "Is it common?", "answer": "Yes, above a critical pressure."}]})}}
    # (answers from the gold document d4: the scripted answers are its words)
    report = _gen(tiny, tmp_path / "one", ConversationLLM(script), history_from="gold")
    assert report.kept == 4 and report.info["kept_with_a_lost_term"] == 1
    attempts = {a["query_id"]: a for a in map(json.loads,
                                              (tmp_path / "one" / ATTEMPTS).open())}
    assert attempts["4"]["lost"] == ["plate"] and attempts["3"]["lost"] == []
    strict = _gen(tiny, tmp_path / "strict", ConversationLLM(script),
                  settings=ConversationSettings(n=4, max_lost=0, history_from="gold"))
    assert strict.kept == 3 and strict.info["rejected"]["unrecoverable"] == 1


def test_resume_after_an_interrupted_log(tiny, tmp_path):
    whole = tmp_path / "whole"
    _gen(tiny, whole, n=3, seed=7)
    part = tmp_path / "part"
    part.mkdir()
    (part / GENERATION_JSON).write_text(
        json.dumps({"identity": json.loads((whole / GENERATION_JSON).read_text())["identity"]}))
    first = (whole / ATTEMPTS).read_text().splitlines(keepends=True)[0]
    (part / ATTEMPTS).write_text(first + '{"attempt": 1, "query_id": "')  # torn by a kill
    llm = ConversationLLM()
    report = _gen(tiny, part, llm, n=3, seed=7)
    assert report.kept == 3 and llm.calls == 2 * 2  # attempts 1 and 2 only
    assert (part / "conversations.jsonl").read_text() == \
        (whole / "conversations.jsonl").read_text()
    assert (part / "qrels" / "test.tsv").read_text() == \
        (whole / "qrels" / "test.tsv").read_text()
    with pytest.raises(ConfigError, match="seed: 7 then, 8 now"):
        _gen(tiny, part, n=3, seed=8)
    assert _gen(tiny, part, n=4, seed=7).kept == 4  # a bigger budget extends the set


def test_bad_input_is_refused_before_writing(tiny, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(DataError, match=r"no judgments for split 'dev' \(splits: test\)"):
        _gen(tiny, out, split="dev")
    with pytest.raises(ConfigError, match="--turns must be"):
        _gen(tiny, out, turns=1)
    (tiny / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t0\n")
    with pytest.raises(DataError, match="no query of split 'test' has a relevant document"):
        _gen(tiny, out)
    assert not out.exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    (tiny / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n")
    with pytest.raises(ConfigError, match="is not a generated conversation set"):
        _gen(tiny, tmp_path / "mine")


def test_scripted_generation_on_real_cranfield(data_dir, tmp_path):
    """The real collection: 225 judged queries, the most relevant document per query."""
    report = _gen(data_dir / "cranfield", tmp_path / "out", n=5, seed=0)
    assert report.kept == 5 and report.info["usable_queries"] == 225
    queries, qrels = load_dataset(tmp_path / "out").split("test")
    real_queries, real_qrels = load_dataset(data_dir / "cranfield").split("test")
    real = {q.id: q.text for q in real_queries}
    convs = load_conversations(tmp_path / "out" / "conversations.jsonl")
    for c in convs:
        last = c.turns[-1]
        assert last.rewrite == real[last.id] and qrels[last.id] == real_qrels[last.id]
        # the history's document is a neighbour the query's judgments do not grade relevant
        assert real_qrels[last.id].get(c.turns[0].passage_id, 0) <= 0
        assert report.info["history_from"] == "neighbour"
    gold = _gen(data_dir / "cranfield", tmp_path / "gold", n=2, seed=0, history_from="gold")
    for c in load_conversations(gold.out_dir / "conversations.jsonl"):
        judged = real_qrels[c.turns[-1].id]
        assert judged[c.turns[0].passage_id] == max(judged.values())


# --- a real generation with the embedded model ----------------------------------------------


@pytest.mark.slow
def test_real_generation_with_the_embedded_model(data_dir, tmp_path):
    pytest.importorskip("xllamacpp")
    from intentrank.llm.client import load_llm

    out = tmp_path / "gen"
    report = generate_conversations(data_dir / "scifact", out, n=1, max_attempts=1, seed=0,
                                    llm=load_llm("embedded", cache=tmp_path / "c.sqlite"),
                                    progress=False)
    attempts = [json.loads(x) for x in (out / ATTEMPTS).open()]
    assert len(attempts) == 1 and report.info["llm_calls"] >= 1
    first = attempts[0]  # constrained decoding: a readable topic and follow-up
    assert first["detail"] != "no topic and follow-up question in the reply", first
    assert first["question"] and first["topic"]
    assert sum(report.info["rejected"].values()) + report.kept == len(attempts)
    if report.kept:
        queries, qrels = load_dataset(out).split("test")
        assert len(queries) == 1 and len(queries[0].history) == 2


@pytest.mark.slow
def test_real_neighbour_histories_on_cranfield(data_dir, tmp_path):
    """The embedded 0.5B on two Cranfield queries (the default, neighbour histories): every
    kept conversation's earlier turns come from a document the query's judgments do not grade
    relevant, and its last turn is labelled by the query's judgments."""
    pytest.importorskip("xllamacpp")
    from intentrank.llm.client import load_llm

    out = tmp_path / "gen"
    report = generate_conversations(data_dir / "cranfield", out, n=1, max_attempts=2, seed=0,
                                    llm=load_llm("embedded", cache=tmp_path / "c.sqlite"),
                                    progress=False)
    assert report.info["history_from"] == "neighbour" and report.attempts <= 2
    assert sum(report.info["rejected"].values()) + report.kept == report.attempts
    _, real_qrels = load_dataset(data_dir / "cranfield").split("test")
    for a in map(json.loads, (out / ATTEMPTS).open()):
        if not a["turns"]:  # rejected before a history was written
            continue
        assert a["history_doc"] != a["document"]
        assert real_qrels[a["query_id"]].get(a["history_doc"], 0) <= 0
    for c in load_conversations(out / "conversations.jsonl"):
        last = c.turns[-1]
        assert last.relevant == real_qrels[last.id] and last.question != last.rewrite
        assert all(real_qrels[last.id].get(t.passage_id, 0) <= 0 for t in c.turns[:-1])


@pytest.mark.parametrize(("args", "message"), [
    (["--turns", "1"], "--turns must be >= 2"),
    (["--n", "0"], "--n must be >= 1"),
    (["--split", "nosuch"], "no judgments for split 'nosuch'"),
    (["--minutes", "-1"], "--minutes"),
    (["--follow-up", "nosuch"], "--follow-up must be one of llm, rule, llm_or_rule"),
    (["--history-from", "nosuch"], "--history-from must be one of neighbour, gold"),
])
def test_cli_refuses_bad_input_before_writing(args, message, data_dir, tmp_path):
    from typer.testing import CliRunner

    from intentrank.cli import app

    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["generate-conversations", str(data_dir / "cranfield"),
                                 str(out), *args])
    assert r.exit_code == 2 and message in r.output, r.output
    assert not out.exists() or not any(out.iterdir())
