"""Metadata filters (intentrank.filters): every operator on one record and on columns, the
errors of the grammar, the text round trip, a property test that ``mask`` equals ``matches``
on random records and filters, and filters over the real SciFact corpus."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intentrank.errors import ConfigError, FilterError
from intentrank.filters import (
    And,
    Compare,
    Filter,
    In,
    MetadataColumns,
    Not,
    Or,
    Prefix,
    and_filters,
    parse_filter,
)
from intentrank.types import Document

RECORDS: list[dict[str, Any]] = [
    {"id": "d0", "parent_id": None, "source": "handbook", "year": 2021, "team": "a",
     "acl": ["finance", "all-staff"], "path": "docs/intro.md", "updated": "2024-02-01",
     "draft": False, "meta": {"lang": "en", "pages": 3}},
    {"id": "d1", "parent_id": "p1", "source": "wiki", "year": "2019", "team": "b",
     "acl": ["eng"], "path": "docs/api/x.md", "updated": "2024-01-31T10:00:00+02:00",
     "draft": True, "meta": {"lang": "de"}},
    {"id": "d2", "parent_id": "p1", "source": "handbook", "year": 2024.5, "team": "c",
     "acl": [], "path": "src/main.py", "updated": "2023-12-31T23:59:59Z"},
    {"id": "d3", "parent_id": None, "source": None, "year": "n/a", "acl": "finance",
     "path": "docs", "meta.lang": "fr"},
    {"id": "d4", "parent_id": "p2"},
]


def ids(text: str | Filter, records: list[dict[str, Any]] = RECORDS) -> list[str]:
    """The ids a filter passes, by matches(); checks that mask() agrees."""
    f = parse_filter(text) if isinstance(text, str) else text
    by_record = [r["id"] for r in records if f.matches(r)]
    mask = f.mask(MetadataColumns.from_records(records))
    assert mask.dtype == bool and mask.shape == (len(records),)
    assert [r["id"] for r, m in zip(records, mask, strict=True) if m] == by_record
    return by_record


@pytest.mark.parametrize(("text", "expected"), [
    ('source = "handbook"', ["d0", "d2"]),
    ('source != "handbook"', ["d1"]),  # null and absent fields match no comparison
    ('NOT source = "handbook"', ["d1", "d3", "d4"]),  # ... and NOT of one matches them
    ("year = 2021", ["d0"]),
    ("year >= 2020", ["d0", "d2"]),
    ("year < 2021", ["d1"]),  # "2019" (a string, as CSV fields are) is a number
    ("year <= 2021", ["d0", "d1"]),
    ("year > 2021", ["d2"]),
    ("year = 2024.5", ["d2"]),
    ('year = "2019"', ["d1"]),  # a quoted value compares with strings only
    ('year = "n/a"', ["d3"]),
    ('team < "b"', ["d0"]),  # strings compare by code point
    ('team <= "b"', ["d0", "d1"]),
    ('team > "a"', ["d1", "d2"]),
    ('team >= "c"', ["d2"]),
    ("updated >= 2024-01-31", ["d0", "d1"]),  # 10:00+02:00 is 08:00 UTC, after midnight
    ('updated >= "2024-01-31T09:00:00Z"', ["d0"]),  # dates quoted or bare
    ("updated < 2024-01-01", ["d2"]),
    ("updated = 2024-02-01", ["d0"]),
    ("updated > 2023-12-31T23:59:58Z AND updated < 2024-01-01", ["d2"]),
    ("draft = true", ["d1"]),
    ("draft != true", ["d0"]),
    ("draft = FALSE", ["d0"]),
    ('acl = "finance"', ["d0", "d3"]),  # a list matches when any element does
    ('acl != "finance"', ["d1", "d2"]),  # ... and != when none does (the empty list too)
    ('acl IN ("eng", "all-staff")', ["d0", "d1"]),
    ('acl NOT IN ("eng", "all-staff")', ["d2", "d3", "d4"]),
    ('team IN ("a", "c", 7)', ["d0", "d2"]),
    ("team IN ()", []),
    ('year IN (2019, "n/a")', ["d1", "d3"]),
    ('path PREFIX "docs/"', ["d0", "d1"]),
    ('path PREFIX "docs"', ["d0", "d1", "d3"]),
    ('path NOT PREFIX "docs/"', ["d2", "d3", "d4"]),
    ('acl PREFIX "fin"', ["d0", "d3"]),
    ('meta.lang = "en"', ["d0"]),  # dotted names reach nested mappings
    ('meta.lang = "fr"', ["d3"]),  # ... unless the record has the dotted key itself
    ("meta.pages > 2", ["d0"]),
    ('id IN ("d1", "d4")', ["d1", "d4"]),
    ('parent_id = "p1"', ["d1", "d2"]),
    ('parent_id != "p1"', ["d4"]),
    ("nothing = 1", []),
    ("NOT nothing = 1", ["d0", "d1", "d2", "d3", "d4"]),
    ('source = "handbook" AND year >= 2022 OR team = "b"', ["d1", "d2"]),  # AND before OR
    ('source = "handbook" AND (year >= 2022 OR team = "a")', ["d0", "d2"]),
    ('NOT team = "a" AND source = "handbook"', ["d2"]),  # NOT before AND
    ('NOT (team = "a" OR team = "b")', ["d2", "d3", "d4"]),
    ('not source = "wiki" and not source = "handbook" or id = "d0"', ["d0", "d3", "d4"]),
])
def test_operators(text: str, expected: list[str]) -> None:
    assert ids(text) == expected


def test_field_names_in_backticks_and_keywords_as_fields() -> None:
    records = [{"id": "a", "content type": "pdf", "in": 1, "x`y": "z"}, {"id": "b"}]
    assert ids('`content type` = "pdf"', records) == ["a"]
    assert ids("`in` = 1 AND `x\\`y` = 'z'", records) == ["a"]
    assert str(Compare("in", "=", 1)) == "`in` = 1"
    assert str(Compare("content type", "=", "pdf")) == '`content type` = "pdf"'


@pytest.mark.parametrize(("text", "position", "near", "says"), [
    ("a =", 4, "the end", "expected a value"),
    ('a = "x" b', 9, "'b'", "expected AND, OR or the end"),
    ("a = handbook", 5, "'handbook'", 'quote strings: "handbook"'),
    ("a == 1", 4, "'='", "expected a value"),
    ("(a = 1", 7, "the end", "expected ')'"),
    ("a = 1)", 6, "')'", "expected AND, OR or the end"),
    ("a IN 1", 6, "'1'", "IN takes a list in parentheses"),
    ("a IN (1 2)", 9, "'2'", "expected ',' or ')'"),
    ("a IN (1,)", 9, "')'", "expected a value"),
    ('a PREFIX 1', 10, "'1'", "PREFIX takes a quoted string"),
    ("a ~ 1", 3, None, "unexpected '~ 1'"),
    ("x = 2024-13-01", 5, "'2024-13-01'", "not a valid date"),
    ("and = 1", 1, "'and'", "expected a field name, NOT or '('"),
    ("a NOT = 1", 7, "'='", "expected IN or PREFIX after the field a"),
    ("a 1", 3, "'1'", "expected a comparison (= != < <= > >=), IN or PREFIX"),
    ('a = "unclosed', 5, None, "unexpected"),
    ("flag > true", None, None, "a bool compares only with = and !="),
    ("a = 1 AND", 10, "the end", "expected a field name"),
])
def test_errors_name_the_position_and_token(text: str, position: int | None,
                                            near: str | None, says: str) -> None:
    with pytest.raises(FilterError) as err:
        parse_filter(text)
    message = str(err.value)
    assert says in message
    if position is not None:
        assert f"at position {position}" in message
    if near is not None:
        assert f"({near})" in message
    assert isinstance(err.value, ConfigError) and isinstance(err.value, ValueError)


def test_empty_and_deep_filters_are_refused() -> None:
    for text in ("", "   "):
        with pytest.raises(FilterError, match="it is empty"):
            parse_filter(text)
    with pytest.raises(FilterError, match="nested deeper than 100"):
        parse_filter("NOT " * 101 + "a = 1")
    assert parse_filter("NOT " * 99 + "a = 1") is not None


def test_constructors_check_their_arguments() -> None:
    with pytest.raises(FilterError, match="unknown comparison '=='"):
        Compare("a", "==", 1)
    with pytest.raises(FilterError, match="finite number"):
        Compare("a", "<", math.nan)
    with pytest.raises(FilterError, match="non-empty string"):
        Compare("", "=", 1)
    with pytest.raises(FilterError, match="a list"):
        In("a", "abc")  # type: ignore[arg-type]
    with pytest.raises(FilterError, match="two or more"):
        And((Compare("a", "=", 1),))
    with pytest.raises(FilterError, match="must be a string"):
        Prefix("a", 1)  # type: ignore[arg-type]
    with pytest.raises(FilterError, match="filter text or a Filter"):
        Filter.from_value(3)  # type: ignore[arg-type]


def test_values_are_normalised() -> None:
    day = datetime(2024, 1, 31, tzinfo=UTC)
    assert Compare("d", ">=", "2024-01-31").value == day
    assert Compare("d", ">=", date(2024, 1, 31)).value == day
    assert Compare("d", ">=", datetime(2024, 1, 31)).value == day  # naive: UTC
    plus2 = timezone(timedelta(hours=2))
    assert Compare("d", ">=", datetime(2024, 1, 31, 2, tzinfo=plus2)).value == day
    assert Compare("n", "=", np.int64(3)).value == 3
    assert In("n", [1, "2020-01-01"]).values == (1, datetime(2020, 1, 1, tzinfo=UTC))


def test_combinators_and_round_trip() -> None:
    a, b, c = Compare("a", "=", 1), Prefix("p", 'x"y\\'), In("t", ("u", 2.5, True))
    assert a & b == And((a, b)) and a | b == Or((a, b)) and ~a == Not(a)
    assert (a & b) & c == And((a, b, c)) == a & (b & c)  # nested ANDs are one AND
    assert and_filters(None, a, None) == a
    assert and_filters(None, None) is None
    assert and_filters('a = 1', b) == And((a, b))
    assert Filter.from_value("a = 1") == a and Filter.from_value(a) is a
    assert Filter.from_value(None) is None
    tree = Or((And((a, Or((b, c)))), Not(And((a, b))), Not(Not(c))))
    assert str(tree) == ('a = 1 AND (p PREFIX "x\\"y\\\\" OR t IN ("u", 2.5, true)) OR '
                         'NOT (a = 1 AND p PREFIX "x\\"y\\\\") OR NOT NOT t IN ("u", 2.5, true)')
    assert parse_filter(str(tree)) == tree
    when = Compare("u", "<", datetime(2024, 5, 1, 12, 30, 15, 250, tzinfo=UTC))
    assert str(when) == "u < 2024-05-01T12:30:15.000250Z" and parse_filter(str(when)) == when
    assert {a: 1}[parse_filter("a = 1")] == 1  # hashable: queries group by filter


def test_columns_of_many_distinct_strings() -> None:
    """Past FEW_STRINGS distinct strings the column codes them with numpy's sort; strings
    numpy would hold inexactly (a trailing NUL) take the dict path; both agree with matches."""
    from intentrank.filters.columns import FEW_STRINGS

    base = [{"id": f"d{i:05d}", "k": ["x", "y"][i % 2]} for i in range(FEW_STRINGS + 50)]
    for extra in ([], [{"id": "d00007\x00"}, {"id": "d00007"}]):
        records = base + extra
        for text in ('id = "d00007"', 'id < "d00100"', 'id PREFIX "d0001"', 'id >= "d04000"',
                     'id IN ("d00001", "d04145", "zz") OR k = "x"'):
            f = parse_filter(text)
            want = [f.matches(r) for r in records]
            assert 0 < sum(want) < len(records)
            assert f.mask(MetadataColumns.from_records(records)).tolist() == want, text


def test_fields_a_filter_reads() -> None:
    f = parse_filter('a = 1 AND (NOT b.c IN (1) OR `d e` PREFIX "x") AND a > 0')
    assert f.fields() == {"a", "b.c", "d e"}


def test_the_filter_record_of_a_document() -> None:
    doc = Document("x#1", "text", parent_id="x", metadata={"team": "a", "id": "ignored"})
    assert doc.filter_record() == {"team": "a", "id": "x#1", "parent_id": "x"}
    seen = parse_filter('team = "a" AND parent_id = "x" AND id = "x#1"')
    assert seen.matches(doc.filter_record())


# --- property tests -------------------------------------------------------------------------

FIELDS = ["a", "tags", "n.m", "id"]
STRINGS = st.sampled_from(["", "a", "ab", "b", "é", "10", "-2.5", "2024-01-31",
                           "2024-01-31T12:00:00Z", "2023-12-01", 'x"y', "a\\b"])
NUMBERS = st.one_of(st.integers(-1, 3), st.sampled_from(
    [10, 2.5, -2.5, 1e3, 2**70, math.nan, math.inf, np.float32(2.5), np.int64(3)]))
DATES = st.sampled_from([datetime(2024, 1, 31, tzinfo=UTC), datetime(2024, 1, 31, 12),
                         datetime(2024, 1, 31, 7, tzinfo=timezone(timedelta(hours=-5))),
                         datetime(2023, 12, 1, 0, 0, 1), date(2023, 12, 1), date(2024, 2, 1)])
ELEMENTS = st.one_of(STRINGS, NUMBERS, st.booleans(), st.none(), DATES)
FIELD_VALUES = st.one_of(ELEMENTS, st.lists(ELEMENTS, max_size=3), st.just({"m": 3}))
RECORD = st.fixed_dictionaries({"a": FIELD_VALUES, "tags": st.lists(ELEMENTS, max_size=3)},
                               optional={"id": ELEMENTS, "b": FIELD_VALUES}).map(
    lambda r: {**r, "n": {"m": r.get("b")}} if "b" in r else r)
FILTER_VALUES = st.one_of(STRINGS, st.integers(-1, 3), st.sampled_from([2.5, -2.5, 1e3]),
                          st.booleans(), DATES)


def _compare(field: str, op: str, value: Any) -> Filter:
    return Compare(field, "=" if isinstance(value, bool) else op, value)


def leaves(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Filter]:
    """Random comparisons, IN and PREFIX over FIELDS with values drawn from ``values``."""
    strings = values.filter(lambda v: isinstance(v, str))
    return st.one_of(
        st.builds(_compare, st.sampled_from(FIELDS), st.sampled_from(
            ["=", "!=", "<", "<=", ">", ">="]), values),
        st.builds(In, st.sampled_from(FIELDS), st.lists(values, max_size=3).map(tuple)),
        st.builds(Prefix, st.sampled_from(FIELDS), st.one_of(
            STRINGS, strings.map(lambda s: s[:len(s) // 2]))))


def filters(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Filter]:
    """Random filter trees of :func:`leaves`."""
    return st.recursive(leaves(values), lambda inner: st.one_of(
        st.builds(Not, inner),
        st.lists(inner, min_size=2, max_size=3).map(lambda p: And(tuple(p))),
        st.lists(inner, min_size=2, max_size=3).map(lambda p: Or(tuple(p)))), max_leaves=6)


def _usable_values(records: list[dict[str, Any]]) -> list[Any]:
    """The elements of ``records`` that are valid filter values."""
    out = []
    for r in records:
        for v in list(r.values()) + [r.get("n", {}).get("m")]:
            for x in v if isinstance(v, list) else [v]:
                if isinstance(x, str | bool | date) or isinstance(x, int | float | np.number) \
                        and math.isfinite(x):
                    out.append(x)
    return out


FILTERS = filters(FILTER_VALUES)
PROPERTY = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(records=st.lists(RECORD, min_size=1, max_size=30), data=st.data(),
       tree=st.booleans())
def test_mask_equals_matches(records: list[dict[str, Any]], data: st.DataObject,
                             tree: bool) -> None:
    """On random records, a random comparison (half the time a random tree of them), its
    values mostly drawn from the records' own elements so that it selects some."""
    seen = _usable_values(records)
    values = st.one_of(st.sampled_from(seen), FILTER_VALUES) if seen else FILTER_VALUES
    filt = data.draw(filters(values) if tree else leaves(values))
    mask = filt.mask(MetadataColumns.from_records(records))
    assert mask.tolist() == [filt.matches(r) for r in records]


@PROPERTY
@given(filt=FILTERS)
def test_text_round_trip(filt: Filter) -> None:
    assert parse_filter(str(filt)) == filt


NAMES = st.one_of(st.sampled_from(["a", "in", "x.y", "a-b", "_1"]), st.text(min_size=1))
ANY_LEAVES = st.one_of(
    st.builds(_compare, NAMES, st.sampled_from(["=", "!=", "<", ">="]),
              st.one_of(st.text(), st.integers(), st.floats(allow_nan=False,
                                                            allow_infinity=False))),
    st.builds(In, NAMES, st.lists(st.text(), max_size=2).map(tuple)),
    st.builds(Prefix, NAMES, st.text()))


@PROPERTY
@given(filt=st.recursive(ANY_LEAVES, lambda inner: st.one_of(
    st.builds(Not, inner), st.lists(inner, min_size=2, max_size=3).map(lambda p: And(tuple(p))),
    st.lists(inner, min_size=2, max_size=3).map(lambda p: Or(tuple(p)))), max_leaves=5))
def test_text_round_trip_of_any_names_and_strings(filt: Filter) -> None:
    """Field names and strings of any characters (quotes, backticks, backslashes, newlines)
    survive the text form."""
    assert parse_filter(str(filt)) == filt


@PROPERTY
@given(text=st.text(alphabet=st.sampled_from(list('ab=!<>()," \'`IN AND OR NOT 12.-')),
                    max_size=30))
def test_any_text_parses_or_raises_filter_error(text: str) -> None:
    try:
        filt = parse_filter(text)
    except FilterError as err:
        assert "bad filter" in str(err)
    else:
        assert parse_filter(str(filt)) == filt


# --- the real SciFact corpus, with synthetic metadata ---------------------------------------

def _scifact_records(scifact) -> list[dict[str, Any]]:  # noqa: ANN001 (fixture)
    """SciFact's 5,183 abstracts, each with its real title and metadata derived from its id."""
    out = []
    for doc in scifact.corpus():
        n = int(doc.id)
        meta: dict[str, Any] = {"title": doc.title, "year": 1990 + n % 35,
                                "published": f"{1990 + n % 35}-{1 + n % 12:02d}-{1 + n % 28:02d}",
                                "teams": [f"t{n % 5}", f"t{n % 7}"][: 1 + n % 2]}
        if n % 4:
            meta["venue"] = {"name": ("Nature", "Cell", "PLoS ONE")[n % 3]}
        out.append(Document(doc.id, doc.text, metadata=meta).filter_record())
    return out


def test_filters_over_the_scifact_corpus(scifact) -> None:  # noqa: ANN001 (fixture)
    records = _scifact_records(scifact)
    assert len(records) == 5183
    columns = MetadataColumns.from_records(records)
    cases = {
        'year >= 2015 AND venue.name = "Nature"':
            lambda r: r["year"] >= 2015 and r.get("venue", {}).get("name") == "Nature",
        'teams IN ("t1", "t6") OR title PREFIX "A "':
            lambda r: bool({"t1", "t6"} & set(r["teams"])) or r["title"].startswith("A "),
        "published >= 2010-06-01 AND published < 2011-01-01":
            lambda r: "2010-06-01" <= r["published"] < "2011-01-01",
        'NOT venue.name = "Cell" AND teams != "t0"':
            lambda r: r.get("venue", {}).get("name") != "Cell" and "t0" not in r["teams"],
        'id IN ("4983", "5836") OR title < "B"': lambda r: r["id"] in ("4983", "5836")
            or r["title"] < "B",
    }
    for text, expected in cases.items():
        want = [bool(expected(r)) for r in records]
        filt = parse_filter(text)
        assert 0 < sum(want) < len(records), text  # each case selects some, not all
        assert filt.mask(columns).tolist() == want, text
        assert [filt.matches(r) for r in records] == want, text
    # every real title (quotes, backslashes, unicode) survives the text round trip as a value
    for r in records:
        eq = Compare("title", "=", r["title"])
        assert parse_filter(str(eq)) == eq
    title = records[42]["title"]
    assert np.flatnonzero(Compare("title", "=", title).mask(columns)).tolist() == \
        [i for i, r in enumerate(records) if r["title"] == title]
