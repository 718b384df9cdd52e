"""The rule-built contextual follow-up (the topic span replaced by a pronoun) on hand-made
queries, the llm / rule / llm_or_rule settings with a scripted LLM (who wrote each follow-up,
the replacements counted), and the history prompts' character restriction."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakes import write_collection

from intentrank.errors import ConfigError
from intentrank.generate.conversation_filters import (
    contextual_problem,
    key_terms,
    missing_terms,
)
from intentrank.generate.conversations import (
    REASONS,
    ConversationSettings,
    generate_conversations,
)
from intentrank.generate.follow_up_rule import UnusableTopic, rule_follow_up, topic_is_plural
from intentrank.generate.runlog import ATTEMPTS, GENERATION_JSON
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.llm.prompts import load_contract

# --- the rule on hand-made queries -----------------------------------------------------------

RAPA = "Rapamycin decreases the concentration of triacylglycerols in fruit flies."


@pytest.mark.parametrize("query, topic, follow_up", [
    # object position, singular and plural
    ("The PRR MDA5 is a sensor of RNA virus infection.", "RNA virus infection",
     "The PRR MDA5 is a sensor of it."),
    (RAPA, "fruit flies", "Rapamycin decreases the concentration of triacylglycerols in them."),
    ("what methods are used to measure the drag of supersonic wings .", "supersonic wings",
     "what methods are used to measure the drag of them ."),
    # a statement's subject: a demonstrative, the determiner taken with the topic
    ("The one-child policy has been successful in lowering population growth.",
     "one-child policy", "This has been successful in lowering population growth."),
    ("Mesenchymal stem cells lower rates of rejection.", "mesenchymal stem cells",
     "These lower rates of rejection."),
    # a question's subject, after the auxiliary
    ("Does vitamin D deficiency increase the risk of multiple sclerosis?",
     "Vitamin D deficiency", "Does it increase the risk of multiple sclerosis?"),
    ("how do shock waves stand near blunt bodies", "shock waves",
     "how do they stand near blunt bodies"),
    # possessive, a topic said twice, a head before "of", an irregular plural
    ("what is vitamin D's effect on bone density", "vitamin D",
     "what is its effect on bone density"),
    ("heat transfer to cones and the drag of cones", "cones",
     "heat transfer to them and the drag of them"),
    ("PKG-la plays a role in the expression of pain hypersensitivity in knockout mice.",
     "the expression of pain hypersensitivity in knockout mice", "PKG-la plays a role in it."),
    ("Statins protect knockout mice from stroke.", "knockout mice",
     "Statins protect them from stroke."),
    # "that" before the topic is a conjunction: kept, the topic a clause's subject
    ("Evidence shows that statins lower the risk of stroke.", "statins",
     "Evidence shows that they lower the risk of stroke."),
    ("whether insulin resistance causes fatty liver", "insulin resistance",
     "whether it causes fatty liver"),
    # a plural possessive with a bare apostrophe
    ("T cells' response to vaccines declines with age.", "T cells",
     "Their response to vaccines declines with age."),
])
def test_the_topic_span_becomes_a_pronoun(query, topic, follow_up):
    got = rule_follow_up(query, topic)
    assert got == follow_up
    # every key term outside the topic is kept: the query minus the topic's terms is missing
    assert contextual_problem(got, query) is None
    assert missing_terms(got, query) <= key_terms(topic)


@pytest.mark.parametrize("topic, plural", [
    ("fruit flies", True), ("OPMLs", True), ("knockout mice", True), ("bacteria", True),
    ("cervical cancer", False), ("sepsis", False), ("AIDS", False), ("RNA virus", False),
    ("the drag of supersonic wings", False), ("genetics", False), ("diabetes", False),
    ("stroke and dementia", True), ("process", False),
])
def test_number_follows_the_head_word(topic, plural):
    assert topic_is_plural(topic) is plural


@pytest.mark.parametrize("query, topic, message", [
    (RAPA, "triglycerides", "the topic 'triglycerides' is not a span of the query"),
    ("Cervical cancer.", "cervical cancer", "is the whole query"),
    ("the one-child policy", "One-child policy.", "is the whole query"),
    ("Risk of Oral Potentially Malignant Lesions (OPMLs).", "OPMLs",
     "is an abbreviation in parentheses"),
    (RAPA, " . ", "has no words"),
    (RAPA, "fruit fly", "is not a span"),  # whole words only: "fly" is not "flies"
    (RAPA, "flie", "is not a span"),
])
def test_unusable_topics(query, topic, message):
    with pytest.raises(UnusableTopic, match=re.escape(message)):
        rule_follow_up(query, topic)


# --- llm / rule / llm_or_rule with a scripted LLM -------------------------------------------

DOCS = {
    "d1": "Rapamycin decreases the concentration of triacylglycerols in fruit flies fed fat.",
    "d2": "Mesenchymal stem cells lower rejection rates after kidney transplantation.",
    "d3": "Panel flutter of thin plates appears above a critical dynamic pressure value.",
    "d4": "Cervical cancer incidence rates decreased after screening was introduced widely.",
}
QUERIES = {
    "1": RAPA,
    "2": "Mesenchymal stem cells lower rejection rates after transplantation.",
    "3": "when does panel flutter of thin plates appear",
    "4": "Incidence rates of cervical cancer have decreased.",
}
# what the LLM says per query: its topic and its follow-up
LLM_SAYS = {
    "1": ("fruit flies", "What effect does rapamycin have on its concentration?"),  # loses 2
    "2": ("Mesenchymal stem cells",
          "Do mesenchymal stem cells lower rejection rates after transplantation?"),  # self-c.
    "3": ("thin plates", "When does panel flutter of them appear?"),  # good: kept as it is
    "4": ("cancer screening", "Have they decreased?"),  # drops terms, topic not in the query
}


class ScriptedLLM:
    """Topic and follow-up from ``LLM_SAYS``; a history that, like the 0.5B's, asks about
    the topic only (not the other phrases asked for), its answers the document's last
    words."""

    name, model = "fake:scripted", "fake-scripted"

    def __init__(self) -> None:
        self.history_prompts: list[str] = []

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        prompt = messages[-1]["content"]
        if prompt.startswith("Search query:"):
            query = prompt.split("\n", 1)[0].removeprefix("Search query: ")
            topic, follow_up = LLM_SAYS[next(k for k, v in QUERIES.items() if v == query)]
            reply = {"topic": topic, "follow_up": follow_up}
        else:
            self.history_prompts.append(prompt)
            doc = prompt.split("Document:\n", 1)[1].split("\n\n", 1)[0]
            topic = prompt.rsplit("Topic: ", 1)[1].split(". Phrases", 1)[0]
            end = " ".join(doc.split()[-4:])
            reply = {"turns": [{"question": f"What about {topic}?", "answer": end},
                               {"question": "Is that well known?", "answer": end}]}
        return LLMReply(json.dumps(reply), 50, 20, raw={"finish_reason": "stop"})


@pytest.fixture()
def collection(tmp_path) -> Path:
    return write_collection(tmp_path / "c", DOCS, QUERIES, [(k, f"d{k}", 1) for k in QUERIES])


def _run(collection, out, follow_up, llm=None):
    # histories from the gold document: the follow-up rule is what is tested here (the
    # neighbour histories, the default, in test_generate_conversations.py)
    report = generate_conversations(
        collection, out, n=4, follow_up=follow_up, progress=False, history_from="gold",
        llm=LLMClient(llm or ScriptedLLM(), cache=False, retries=0))
    attempts = {a["query_id"]: a for a in map(json.loads, (out / ATTEMPTS).open())}
    return report, attempts


def test_llm_or_rule_replaces_the_rejected_follow_ups_and_counts_them(collection, tmp_path):
    llm = ScriptedLLM()
    report, at = _run(collection, tmp_path / "mix", "llm_or_rule", llm)
    info = report.info
    assert report.kept == 3 and info["rejected"] == {**dict.fromkeys(REASONS, 0),
                                                     "unusable_topic": 1}
    # 1: the LLM's loses "decreases" and "triacylglycerols" (beyond the topic): replaced
    assert at["1"]["follow_up_by"] == "rule" and at["1"]["replaced"] == "unrecoverable"
    assert at["1"]["question"] == \
        "Rapamycin decreases the concentration of triacylglycerols in them."
    assert at["1"]["llm_follow_up"] == LLM_SAYS["1"][1]
    # 2: self-contained: replaced by the rule (a statement's plural subject)
    assert at["2"]["replaced"] == "self_contained"
    assert at["2"]["question"] == "These lower rejection rates after transplantation."
    # 3: a good LLM follow-up is kept as it is, its history asked for the dropped phrase
    assert at["3"]["follow_up_by"] == "llm" and at["3"]["replaced"] == ""
    assert at["3"]["question"] == LLM_SAYS["3"][1] and at["3"]["status"] == "kept"
    # 4: rejected by the rule too: its topic is not in the query
    assert at["4"]["status"] == "unusable_topic" and at["4"]["calls"] == 1
    assert at["4"]["detail"].startswith("the LLM's follow-up was ")
    assert "the topic 'cancer screening' is not a span of the query" in at["4"]["detail"]
    assert info["rule_follow_ups"] == 2 and info["follow_up"] == "llm_or_rule"
    assert info["rule_replaced"] == {"unrecoverable": 1, "self_contained": 1}
    assert info["kept_follow_ups"] == {"rule": 2, "llm": 1}
    assert info["identity"]["follow_up"] == "llm_or_rule"
    # a rule follow-up's history is asked for the topic, verbatim
    asked = [p.rsplit("question: ", 1)[1].split(".\n", 1)[0] for p in llm.history_prompts]
    assert sorted(asked) == ['"Mesenchymal stem cells"', '"fruit flies"', '"thin plates"']
    convs = [json.loads(x) for x in (tmp_path / "mix" / "conversations.jsonl").open()]
    assert {c["turns"][-1]["rewrite"] for c in convs} == {QUERIES[k] for k in "123"}


def test_llm_and_rule_settings(collection, tmp_path):
    report, at = _run(collection, tmp_path / "llm", "llm")
    assert report.kept == 1 and report.info["rule_follow_ups"] == 0
    assert {k: v for k, v in report.info["rejected"].items() if v} == {
        "unrecoverable": 2, "self_contained": 1}
    assert all(a["follow_up_by"] == "llm" and not a["replaced"] for a in at.values())
    report, at = _run(collection, tmp_path / "rule", "rule")
    assert report.kept == 3 and report.info["rule_follow_ups"] == 3
    assert report.info["rejected"]["unusable_topic"] == 1
    assert at["3"]["question"] == "when does panel flutter of them appear"
    assert not any(a["replaced"] or a["llm_follow_up"] for a in at.values())
    # the setting is part of the identity: a set is resumed only with the same one
    with pytest.raises(ConfigError, match="follow_up: 'rule' then, 'llm' now"):
        _run(collection, tmp_path / "rule", "llm")
    assert json.loads((tmp_path / "rule" / GENERATION_JSON).read_text())["identity"][
        "follow_up"] == "rule"


def test_bad_follow_up_setting():
    with pytest.raises(ConfigError, match=re.escape(
            "--follow-up must be one of llm, rule, llm_or_rule, got 'rules'")):
        ConversationSettings(follow_up="rules")


# --- the history prompts keep to Latin and Greek ---------------------------------------------


@pytest.mark.parametrize("name", ["generate_history", "extend_conversation"])
def test_history_schemas_allow_latin_greek_and_punctuation_only(name):
    item = load_contract(name).schema["properties"]["turns"]["items"]["properties"]
    for field in ("question", "answer"):
        pattern = re.compile(item[field]["pattern"])
        assert pattern.fullmatch("Does TNF-α’s level rise ≥ 2-fold at 5 µm – 10 °C (p<0.05)?")
        assert pattern.fullmatch("Les études de Müller; naïve T cells [CD4+] & IL-2.")
        for bad in ("What is high-speed飞行?", "控制", "한국", 'say "hi"', "a\\b", "tab\t"):
            assert not pattern.fullmatch(bad), bad
        # the length is in the pattern: llama.cpp's JSON-schema-to-GBNF converter ignores
        # maxLength beside a pattern (the embedded server's answers ran to max_tokens)
        limit = item[field]["maxLength"]
        assert pattern.fullmatch("a" * limit) and not pattern.fullmatch("a" * (limit + 1))


def test_history_schema_compiles_to_a_llamacpp_grammar():
    xllamacpp = pytest.importorskip("xllamacpp")
    for name in ("generate_history", "extend_conversation"):
        grammar = xllamacpp.json_schema_to_grammar(json.dumps(load_contract(name).schema))
        # xllamacpp's converter hands the schema to llguidance (the pattern's syntax is
        # common to llguidance and llama.cpp's GBNF converter: ^, $, [ranges], \\uXXXX, {m,n})
        assert grammar.startswith("%llguidance") and "u0370-" in grammar


def test_history_schema_compiles_with_llguidance():
    """Constrained decoding accepts Greek and refuses a Chinese character in a turn (run
    where the llguidance package is installed; checked with llguidance 1.9.1)."""
    llguidance = pytest.importorskip("llguidance")

    class ByteTokenizer:  # one token per byte: the grammar is checked byte by byte
        eos_token_id, bos_token_id = 256, None
        tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        special_token_ids = [256]

        def __call__(self, s):
            return list(s.encode() if isinstance(s, str) else s)

    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTokenizer()))
    schema = dict(load_contract("generate_history").schema)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
    assert llguidance.LLMatcher.validate_grammar_with_warnings(grammar) == (False, [])

    def accepted(question):
        m = llguidance.LLMatcher(tok, grammar)
        text = json.dumps({"turns": [{"question": question, "answer": "Yes."}]},
                          ensure_ascii=False)
        m.consume_tokens(list(text.encode()))
        return not m.is_error() and m.is_accepting()

    assert accepted("Does TNF-α rise ≥ 2-fold – at 5 µm?")
    assert not accepted("a" * 121)
    assert not accepted("What is high-speed飞行?")


def test_cli_counts_the_rule_follow_ups(collection, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import intentrank.llm.client as client
    from intentrank.cli import app
    from intentrank.cli.common import console

    monkeypatch.setattr(client, "load_llm", lambda *a, **k: LLMClient(
        ScriptedLLM(), cache=False, retries=0))
    monkeypatch.setattr(console, "width", 300)
    for mode, rule_made in (("llm_or_rule", 2), ("rule", 3), ("llm", 0)):
        out = tmp_path / mode
        r = CliRunner().invoke(app, ["generate-conversations", str(collection), str(out),
                                     "--n", "4", "--follow-up", mode])
        assert r.exit_code == 0, r.output
        info = json.loads((out / GENERATION_JSON).read_text())
        assert info["follow_up"] == mode and info["rule_follow_ups"] == rule_made
        assert f"; follow-ups by rule: {rule_made}" in r.output, r.output
