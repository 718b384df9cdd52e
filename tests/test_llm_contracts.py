"""Prompt contracts: every shipped prompt loads, renders exactly the text the old ``.txt``
templates rendered (captured below, so cached replies and published numbers stay valid), and
a bad contract file raises a ConfigError naming the file and the field."""

from __future__ import annotations

from importlib import resources

import pytest

from intentrank.errors import ConfigError
from intentrank.llm.parsing import PARSERS, ParseError, Repaired
from intentrank.llm.prompts import fill, load_contract, shipped_contracts

# What the old intentrank/prompts/<name>.txt templates rendered for these values (captured
# from the .txt files before they were deleted). The {m} and {n} inside values check that
# filling is one pass (the old one filled values in an order where these stayed as text).
EXPECTED = [
    ('followups', {'m': 2, 'query': 'What causes {m} tides?'},
     (
        'You predict the follow-up questions a user will ask after their search query.\n'
        'Think step by step, briefly:\n'
        '1. Break the query down into its parts.\n'
        '2. Identify the perspectives the query leaves out that the user will want next.\n'
        '3. Write 2 short follow-up questions, each one self-contained (no "it" or '
        '"this").\n'
        '\n'
        'Example\n'
        'Query: What are the effects of climate change?\n'
        'Breakdown: climate change; its effects on people and on economies.\n'
        'Missing perspectives: the health impact; the economic consequences.\n'
        'Follow-up questions:\n'
        '1. How does climate change affect human health?\n'
        '2. What are the economic consequences of climate change?\n'
        '\n'
        'Example\n'
        'Query: How do vaccines train the immune system?\n'
        'Breakdown: vaccines; the immune response they trigger.\n'
        'Missing perspectives: how long protection lasts; why some people need boosters.\n'
        'Follow-up questions:\n'
        '1. How long does immunity from vaccines last?\n'
        '2. Why do some vaccines need booster doses?\n'
        '\n'
        'Now the real query. Answer in exactly the same format, with 2 numbered '
        'follow-up questions.\n'
        'Query: What causes {m} tides?\n'
     )),
    ('multi_query', {'n': 3, 'query': 'ALDH1 expression and breast cancer prognosis'},
     (
        'You are helping a search engine. Write 3 different versions of the search '
        'query below, each looking at the question from another angle or with other '
        'words, so that together they find more relevant documents.\n'
        'Answer with 3 numbered lines and nothing else.\n'
        '\n'
        'Query: ALDH1 expression and breast cancer prognosis\n'
     )),
    ('compress', {'query': 'What is lift?', 'passage': 'Lift is a force. Drag {n} is another.'},
     (
        'Given the question and the passage below, copy out, word for word, the '
        'sentences of the passage that help answer the question. If no part of the '
        'passage is relevant, answer exactly NO_OUTPUT.\n'
        '\n'
        'Question: What is lift?\n'
        '\n'
        'Passage: Lift is a force. Drag {n} is another.\n'
        '\n'
        'Relevant sentences:\n'
     )),
    ('listwise', {'n': 2, 'query': 'wing lift',
                  'passages': '[1] First passage.\n[2] Second passage.'},
     (
        'Rank the 2 passages below by how well they answer the search query.\n'
        '\n'
        'Query: wing lift\n'
        '\n'
        '[1] First passage.\n'
        '[2] Second passage.\n'
        '\n'
        'In one short sentence say which passage answers the query best, then give all '
        '2 passage numbers as a JSON array, most relevant first.\n'
        'Answer:\n'
     )),
    ('modality_weights', {'query': "What was Tesla's Q2 revenue?"},
     (
        'You set the weights of three search methods for one query. The weights are '
        'numbers between 0 and 1 that sum to 1.\n'
        '- dense: semantic embeddings; best for natural-language questions, '
        'paraphrases and concepts.\n'
        '- sparse: keyword matching (BM25 + TF-IDF); best for exact terms, numbers, '
        'codes, rare names, finance and statistics.\n'
        '- graph: shared named entities; best when the query names specific people, '
        'organisations, places or products.\n'
        '\n'
        'Example\n'
        "Query: What was Apple's net revenue growth in Q3 2021?\n"
        '{"dense": 0.30, "sparse": 0.55, "graph": 0.15}\n'
        '\n'
        'Example\n'
        'Query: why do people feel tired after eating a big meal\n'
        '{"dense": 0.60, "sparse": 0.30, "graph": 0.10}\n'
        '\n'
        'Answer with one JSON object in the same form and nothing else.\n'
        "Query: What was Tesla's Q2 revenue?\n"
     )),
]


@pytest.mark.parametrize(("name", "values", "expected"), EXPECTED,
                         ids=[e[0] for e in EXPECTED])
def test_contract_renders_the_old_template_text_byte_for_byte(name, values, expected):
    contract = load_contract(name)
    assert contract.messages(**values) == [{"role": "user", "content": "".join(expected)}]


def test_judge_contract_is_the_old_in_python_prompt():
    messages = load_contract("judge").messages(query="wing lift {passage}", passage="Lift.")
    assert messages == [
        {"role": "system", "content": "You judge search results. Answer with one word: yes or no."},
        {"role": "user", "content": "Query: wing lift {passage}\n\nPassage: Lift.\n\n"
                                    "Is this passage relevant to the query? Answer yes or no."}]
    assert load_contract("judge").params() == {"max_tokens": 2, "temperature": 0.0,
                                               "stop": None, "logprobs": 10}


def test_every_shipped_contract_is_complete():
    names = shipped_contracts()
    folder = resources.files("intentrank").joinpath("prompts")
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt")) == []
    assert {"followups", "multi_query", "listwise", "compress", "modality_weights",
            "judge"} <= set(names)
    for name in names:
        c = load_contract(name)
        assert c.fallback.strip() and c.description.strip(), name
        assert c.parser in PARSERS and c.max_tokens >= 1 and c.temperature == 0.0
    # the decoding parameters the stages used before the contracts (cache keys unchanged)
    before = ("followups", "multi_query", "listwise", "compress", "modality_weights", "judge")
    assert {n: load_contract(n).max_tokens for n in before} == {
        "followups": 160, "multi_query": 120, "listwise": 96, "compress": 96,
        "modality_weights": 48, "judge": 2}


def test_params_overrides_and_structured_output():
    c = load_contract("modality_weights")
    assert c.params(max_tokens=None)["max_tokens"] == 48
    assert c.params(max_tokens=64)["max_tokens"] == 64
    assert "json_schema" not in c.params()
    schema = c.params(structured=True)["json_schema"]
    assert schema["title"] == "modality_weights" and schema["required"] == [
        "dense", "sparse", "graph"] and schema["additionalProperties"] is False
    assert all(p == {"type": "number", "minimum": 0, "maximum": 1}
               for p in schema["properties"].values())
    with pytest.raises(ConfigError, match="no schema"):
        load_contract("compress").params(structured=True)


def test_missing_slot_is_named_and_extra_values_are_ignored():
    c = load_contract("multi_query")
    with pytest.raises(KeyError, match=r"\{n\}"):
        c.messages(query="q")
    assert c.messages(n=2, query="q", query_id="x") == c.messages(n=2, query="q")
    assert fill('{"a": 1} {x}', {"x": "{x}"}) == '{"a": 1} {x}'


def test_examples_as_chat_turns(tmp_path):
    path = tmp_path / "capital.yaml"
    path.write_text(
        "system: Answer with one word.\n"
        "template: 'Capital of {country}?'\n"
        "examples_as: turns\n"
        "examples:\n"
        "  - vars: {country: France}\n"
        "    reply: Paris\n"
        "  - user: 'And of Italy?'\n"
        "    reply: Rome\n"
        "parser: text\n"
        "fallback: none\n")
    c = load_contract(path)
    assert c.name == "capital" and c.source == str(path)
    assert c.messages(country="Spain") == [
        {"role": "system", "content": "Answer with one word."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome"},
        {"role": "user", "content": "Capital of Spain?"}]


GOOD = "template: 'Q: {query}'\nparser: text\n"


@pytest.mark.parametrize(("body", "field", "message"), [
    ("- a list\n", None, "must be a mapping of fields"),
    ("parser: text\n", "template", "is required"),
    ("template: ''\n", "template", "must not be empty"),
    ("template: [1]\n", "template", "must be text"),
    (GOOD + "max_token: 5\n", "max_token", "unknown field"),
    (GOOD + "max_tokens: 0\n", "max_tokens", r"must be in \[1, 32768\]"),
    (GOOD + "max_tokens: many\n", "max_tokens", "must be a whole number"),
    (GOOD + "temperature: 3\n", "temperature", r"must be a number in \[0, 2\]"),
    (GOOD + "stop: [1]\n", "stop", "list of non-empty texts"),
    (GOOD + "logprobs: 50\n", "logprobs", r"must be in \[0, 20\]"),
    ("template: 'Q: {query}'\nparser: xml\n", "parser", "unknown parser 'xml'"),
    (GOOD + "schema: {type: dict}\n", "schema.type", "must be one of"),
    (GOOD + "schema: {type: object, properties: {a: {type: number}}, required: [b]}\n",
     "schema.required", "must list names among the properties"),
    (GOOD + "schema: {type: object, properties: {a: {type: number, minimum: low}}}\n",
     "schema.properties.a.minimum", "must be a number"),
    (GOOD + "examples: {a: 1}\n", "examples", "must be a list"),
    (GOOD + "examples: [{vars: {query: x}}]\n", "examples[0].reply", "is required"),
    (GOOD + "examples: [{reply: y}]\n", "examples[0]", "exactly one of"),
    (GOOD + "examples: [{vars: {query: x}, reply: y, note: z}]\n", "examples[0].note",
     "unknown field"),
    (GOOD + "examples: [{vars: {query: x}, reply: y}]\n", "example_template",
     "is required for inline examples"),
    (GOOD + "example_template: '{query} {reply}'\nexamples: [{vars: {query: x}, reply: y}]\n",
     "template", r"no \{examples\} slot"),
    ("template: '{examples} {query}'\nexample_template: '{query} {lang} {reply}'\n"
     "examples: [{vars: {query: x}, reply: y}]\n", "examples[0].vars", r"\{lang\}"),
    ("template: '{examples} {query}'\nexamples_as: turns\n"
     "examples: [{vars: {query: x}, reply: y}]\n", "template", "examples_as is 'turns'"),
    (GOOD + "examples: [{user: x, reply: y}]\nexample_template: '{reply}'\n",
     "examples[0].user", "use examples_as: turns"),
    (GOOD + "examples_as: chat\n", "examples_as", "must be 'inline' or 'turns'"),
])
def test_a_bad_contract_names_file_and_field(tmp_path, body, field, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message) as info:
        load_contract(path)
    assert str(path) in str(info.value)
    if field is not None:
        assert f"field {field!r}" in str(info.value)


def test_unknown_names_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError,
                       match="no prompt named 'nope'.*shipped: .*check_answerable, check_support"):
        load_contract("nope")
    with pytest.raises(ConfigError, match="bad prompt name"):
        load_contract("no such?")
    with pytest.raises(ConfigError, match="cannot read prompt file"):
        load_contract(tmp_path / "missing.yaml")
    bad = tmp_path / "broken.yaml"
    bad.write_text("template: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        load_contract(bad)


def test_named_parsers():
    assert PARSERS["text"]("  x \n") == "x"
    assert PARSERS["numbered_list"]("1. one thing\n2. two things", limit=1) == ["one thing"]
    with pytest.raises(ParseError, match="no usable items"):
        PARSERS["numbered_list"]("1. a")
    assert PARSERS["json_object"]('ok {"a": 1} tail') == {"a": 1}
    with pytest.raises(ParseError, match="no JSON dict"):
        PARSERS["json_object"]("[1]")
    assert PARSERS["json_array"]("best: [2, 1]") == [2, 1]
    assert PARSERS["yes_no"]("Yes.") is True and PARSERS["yes_no"]("no") is False
    with pytest.raises(ParseError):
        PARSERS["yes_no"]("maybe")
    assert PARSERS["permutation"]("[2, 1, 3]", n=3) == [1, 0, 2]
    assert PARSERS["permutation"]('{"ranking": [3, 1, 2]}', n=3) == [2, 0, 1]
    part = PARSERS["permutation"]("[2]", n=3)
    assert isinstance(part, Repaired) and part.value == [1, 0, 2]
    with pytest.raises(ParseError, match="no passage number"):
        PARSERS["permutation"]("[7, 9]", n=3)
    with pytest.raises(ParseError):
        PARSERS["permutation"]("the first one", n=3)
