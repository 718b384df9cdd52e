"""Output parsers on well-formed and malformed LLM replies: values or counted fallbacks."""

from __future__ import annotations

import pytest

from intentrank.llm.parsing import (
    ParseError,
    parse_json_array,
    parse_numbered_list,
    parse_yes_no,
    read_json_object,
)


def test_numbered_list_variants_dedupe_and_exclude():
    text = ("Here are some questions:\n1. What is the lift of a wing?\n2) How does drag vary?\n"
            "- What is the lift of a wing?\n* Which Mach numbers?\n\nQ5: The original query")
    got = parse_numbered_list(text, exclude=("the original query",))
    assert got.ok and got.reason == ""
    assert got.value == ["What is the lift of a wing?", "How does drag vary?",
                         "Which Mach numbers?"]
    assert parse_numbered_list(text, limit=2).value == got.value[:2]


def test_numbered_list_fallbacks():
    plain = parse_numbered_list("first question here\nsecond question here")
    assert plain.ok and plain.reason == "no numbered lines" and len(plain.value) == 2
    empty = parse_numbered_list("   \n\n")
    assert not empty.ok and empty.value == []
    tiny = parse_numbered_list("1. a\n2. ??")
    assert not tiny.ok and tiny.reason == "no usable items"


def test_json_array_fenced_inline_and_malformed():
    fenced = parse_json_array('Sure!\n```json\n["a", "b"]\n```\nDone.')
    assert fenced.ok and fenced.value == ["a", "b"]
    inline = parse_json_array('The answer is [1, 2, 3] and [not json')
    assert inline.ok and inline.value == [1, 2, 3]
    nested = parse_json_array('x [["p", 1], ["q", 2]] y')
    assert nested.value == [["p", 1], ["q", 2]]
    bad = parse_json_array('["a", "b"', fallback=["z"])
    assert not bad.ok and bad.value == ["z"] and "no JSON list" in bad.reason
    assert not parse_json_array('{"a": 1}').ok


def test_json_object_inline_nested_and_malformed():
    assert read_json_object('Result: {"score": "3"}') == {"score": "3"}
    with pytest.raises(ParseError, match="no JSON dict found"):
        read_json_object("{score: 3")
    assert read_json_object('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}


def test_yes_no():
    assert parse_yes_no("Yes.").value is True
    assert parse_yes_no(" no, it is not").value is False
    assert parse_yes_no("The answer: YES").value is True
    unsure = parse_yes_no("Maybe, it depends")
    assert not unsure.ok and unsure.value is None
    assert parse_yes_no("yesterday").ok is False


def test_runaway_bracket_replies_are_bounded():
    """A model looping on brackets once built every bracket pair's substring (quadratic
    memory); now each opening bracket costs one linear parse, and deep nesting is no crash."""
    assert not parse_json_array("[" * 20_000 + "]" * 20_000).ok  # RecursionError inside json
    assert not parse_json_array("[ " * 5_000 + "]" * 5_000).ok
    got = parse_json_array("Passage 2 is best. " + "[x] " * 2_000 + "[2, 1, 3]")
    assert got.ok and got.value == [2, 1, 3]
    assert parse_json_array("x [1, [2, 3]] y [4]").value == [1, [2, 3]]
