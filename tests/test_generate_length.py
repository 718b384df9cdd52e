"""The ``length`` filter of question generation: ``words: [min, max]`` in a categorisation
file, the word count, the count in a scripted generation run on real Cranfield abstracts,
the offline audit of old sets, and the refusal to resume a set made with other bounds."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest
import yaml
from fakes import GenerationLLM

from intentrank.errors import ConfigError, DataError
from intentrank.generate.categories import load_taxonomy, parse_taxonomy
from intentrank.generate.filters import written_words, wrong_length
from intentrank.generate.generator import GenerationSettings, generate_questions
from intentrank.generate.length_audit import length_audit, render_markdown
from intentrank.generate.runlog import ATTEMPTS, GENERATION_JSON
from intentrank.llm.client import LLMClient


def _shipped() -> dict:
    return yaml.safe_load(resources.files("intentrank.generate")
                          .joinpath("default_categories.yaml").read_text())


# --- the bounds in the categorisation file ------------------------------------------------


def test_shipped_bounds_are_the_phrasing_descriptions():
    t = load_taxonomy()
    bounds = {c.name: c.words for c in t["phrasing"].categories}
    assert bounds == {"concise-natural": (3, 9), "verbose-natural": (10, 20),
                      "short-search-query": (1, 6), "long-search-query": (7, 22)}
    descriptions = {c.name: c.description for c in t["phrasing"].categories}
    assert "fewer than 10 words" in descriptions["concise-natural"]
    assert "10 to 20 words" in descriptions["verbose-natural"]
    assert "fewer than 7 words" in descriptions["short-search-query"]
    assert "7 to 22 words" in descriptions["long-search-query"]
    others = [c for cz in t.question if cz.name != "phrasing" for c in cz.categories]
    assert others and all(c.words is None for c in others)
    assert all(c.words is None for c in t.users.categories + t.two_document.categories)


@pytest.mark.parametrize("value", [[5, 2], [0, 3], [1.5, 3], "3-9", [3], [3, 9, 12],
                                   [True, 4], [3, "9"], {"min": 3, "max": 9}])
def test_bad_bounds_name_the_file_and_category(value):
    data = _shipped()
    data["question"]["phrasing"]["concise-natural"]["words"] = value
    with pytest.raises(ConfigError, match=r"^cats\.yaml: field 'question\.phrasing\."
                                          r"concise-natural\.words': must be \[min, max\]"):
        parse_taxonomy(data, "cats.yaml")


def test_bounds_from_a_file(tmp_path):
    data = _shipped()
    data["users"]["expert"]["words"] = [4, 4]  # min == max is allowed; any category may
    data["question"]["scope"]["narrow"]["words"] = [2, 30]
    good = tmp_path / "mine.yaml"
    good.write_text(yaml.safe_dump(data))
    t = load_taxonomy(good)
    assert t.users["expert"].words == (4, 4) and t["scope"]["narrow"].words == (2, 30)
    assert t.sha256 != load_taxonomy().sha256
    data["two_document"]["comparison"]["words"] = [9, 8]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=f"{bad}: field 'two_document.comparison.words': "
                                          r"must be \[min, max\].*got \[9, 8\]"):
        load_taxonomy(bad)


# --- the filter on hand-made questions ----------------------------------------------------


@pytest.mark.parametrize("text, n", [
    ("What limits the lift of a delta wing?", 8),
    ("shock-tube wind-tunnel nitrogen", 3),  # hyphenated: one word each
    ("Is a Mach 2.5 ( inviscid ) flow - steady ?", 7),  # lone punctuation is no word
    ("  ", 0),
])
def test_words_are_counted_as_written(text, n):
    assert written_words(text) == n


def test_wrong_length_names_the_category():
    phrasing = {c.name: c.words for c in load_taxonomy()["phrasing"].categories}
    short = "heat transfer blunt body hypersonic"  # 5 words
    sentence = "How does the heat transfer to a blunt body change at hypersonic speeds?"  # 13
    assert wrong_length(short, "short-search-query", phrasing["short-search-query"]) is None
    assert wrong_length(sentence, "short-search-query", phrasing["short-search-query"]) \
        == "the question has 13 words; short-search-query asks for 1 to 6"
    assert wrong_length(sentence, "verbose-natural", phrasing["verbose-natural"]) is None
    assert "concise-natural asks for 3 to 9" in wrong_length(
        sentence, "concise-natural", phrasing["concise-natural"])
    assert wrong_length(short, "long-search-query", phrasing["long-search-query"]) \
        == "the question has 5 words; long-search-query asks for 7 to 22"
    twenty = " ".join(["word"] * 20)
    assert wrong_length(twenty, "verbose-natural", (10, 20)) is None  # bounds inclusive
    assert wrong_length(twenty + " more", "verbose-natural", (10, 20)) is not None
    assert wrong_length(sentence, "verbose-natural", None) is None  # no bounds, no check


# --- a scripted generation run on real abstracts ------------------------------------------


@pytest.fixture(scope="module")
def small_index(cranfield, tmp_path_factory):
    """A real index of the first 80 Cranfield abstracts (pairs have neighbours)."""
    from intentrank.index import build_index

    docs = list(cranfield.corpus())[:80]
    return build_index(docs, tmp_path_factory.mktemp("idx") / "cran80")


def _generate(index, data_dir, out, llm, taxonomy=None, **settings):
    settings = {"n": 8, "multi_doc": 0.5, "seed": 2, "max_attempts": 16, **settings}
    return generate_questions(index, data_dir / "cranfield" / "corpus.jsonl", out,
                              LLMClient(llm, cache=False, retries=0), taxonomy=taxonomy,
                              settings=GenerationSettings(**settings), progress=False)


def test_length_rejections_are_counted_per_category(small_index, data_dir, tmp_path):
    # the scripted model always writes 8 words: too many for a short search query (1-6),
    # too few for a verbose question (10-20), right for the two others
    report = _generate(small_index, data_dir, tmp_path / "gen",
                       GenerationLLM(follow_length=False))
    attempts = [json.loads(line) for line in (tmp_path / "gen" / ATTEMPTS).open()]
    wrong = {"verbose-natural", "short-search-query"}
    expected = [a for a in attempts if a["status"] not in ("malformed", "no_partner")
                and a["categories"]["phrasing"] in wrong]
    assert len(expected) >= 3, "the draw gave too few wrong-length attempts to test"
    assert [a["status"] for a in expected] == ["length"] * len(expected)
    assert all(written_words(a["question"]) == 8 for a in expected)
    assert all(" asks for " in a["detail"] and a["categories"]["phrasing"] in a["detail"]
               for a in expected)
    info = json.loads((tmp_path / "gen" / GENERATION_JSON).read_text())
    assert info == report.info
    assert info["rejected"]["length"] == len(expected)
    phrasing = info["yield"]["phrasing"]
    for name, row in phrasing.items():
        mine = sum(a["categories"]["phrasing"] == name for a in expected)
        assert row["rejected"].get("length", 0) == mine, name
        assert row["attempts"] == row["kept"] + sum(row["rejected"].values())
    assert sum(r["rejected"].get("length", 0) for r in info["yield"]["kind"].values()) \
        == len(expected)
    assert report.kept >= 1
    kept = [json.loads(line) for line in (tmp_path / "gen" / "queries.jsonl").open()]
    assert {q["metadata"]["categories"]["phrasing"] for q in kept}.isdisjoint(wrong)


def test_fitting_questions_are_not_rejected(small_index, data_dir, tmp_path):
    report = _generate(small_index, data_dir, tmp_path / "gen", GenerationLLM())
    assert "length" not in report.info["rejected"]
    attempts = [json.loads(line) for line in (tmp_path / "gen" / ATTEMPTS).open()]
    phrasings = {a["categories"]["phrasing"] for a in attempts if a["status"] == "kept"}
    assert "verbose-natural" in phrasings  # lengthened to 10 words by the scripted model


def test_length_runs_before_the_llm_checks(small_index, data_dir, tmp_path):
    llm = GenerationLLM(follow_length=False, supported=False)
    report = _generate(small_index, data_dir, tmp_path / "gen", llm, multi_doc=0.0,
                       llm_checks=True, max_attempts=8)
    attempts = [json.loads(line) for line in (tmp_path / "gen" / ATTEMPTS).open()]
    rejected_by_length = sum(a["status"] == "length" for a in attempts)
    assert rejected_by_length >= 1
    assert report.info["rejected"] == {"length": rejected_by_length,
                                       "unsupported": 8 - rejected_by_length}
    assert llm.calls == 8 + (8 - rejected_by_length)  # no support check after a length one


def test_categories_named_alike_in_two_categorisations_keep_their_own_bounds(
        small_index, data_dir, tmp_path):
    # a user and a phrasing category both called "plain": the user's 1-5 words must still
    # be checked although the phrasing's 1-30 accepts the scripted model's 8 words
    data = _shipped()
    data["users"] = {"plain": {"probability": 1.0, "words": [1, 5],
                               "description": "a reader who asks in few words"}}
    data["question"]["phrasing"] = {"plain": {"probability": 1.0, "words": [1, 30],
                                              "description": "a natural-language question"}}
    path = tmp_path / "alike.yaml"
    path.write_text(yaml.safe_dump(data))
    report = _generate(small_index, data_dir, tmp_path / "gen",
                       GenerationLLM(follow_length=False), taxonomy=path, max_attempts=4)
    attempts = [json.loads(line) for line in (tmp_path / "gen" / ATTEMPTS).open()]
    parsed = [a for a in attempts if a["status"] not in ("malformed", "no_partner")]
    assert parsed and report.kept == 0
    assert {a["detail"] for a in parsed} == {"the question has 8 words; plain asks for 1 to 5"}


def test_a_set_made_with_other_bounds_is_not_resumed(small_index, data_dir, tmp_path):
    old = _shipped()  # the taxonomy before the length filter: no words
    for cat in old["question"]["phrasing"].values():
        cat.pop("words")
    old_file = tmp_path / "old.yaml"
    old_file.write_text(yaml.safe_dump(old))
    _generate(small_index, data_dir, tmp_path / "gen", GenerationLLM(), taxonomy=old_file, n=2)
    recorded = json.loads((tmp_path / "gen" / GENERATION_JSON).read_text())
    with pytest.raises(ConfigError, match="was generated with other settings "
                                          r"\(taxonomy_sha256: '[0-9a-f]{64}' then, "
                                          r"'[0-9a-f]{64}' now\); resume with the same"):
        _generate(small_index, data_dir, tmp_path / "gen", GenerationLLM(), n=3)
    assert json.loads((tmp_path / "gen" / GENERATION_JSON).read_text()) == recorded
    report = _generate(small_index, data_dir, tmp_path / "gen", GenerationLLM(),
                       taxonomy=old_file, n=3)  # its own file resumes it
    assert report.kept == 3


# --- the offline audit --------------------------------------------------------------------


def test_audit_counts_what_the_filter_would_reject(small_index, data_dir, tmp_path):
    _generate(small_index, data_dir, tmp_path / "gen", GenerationLLM(follow_length=False),
              taxonomy=_without_words(tmp_path))
    attempts = [json.loads(line) for line in (tmp_path / "gen" / ATTEMPTS).open()]
    rows = {(r.set_name, r.category): r for r in length_audit([tmp_path / "gen"])}
    for name in ("concise-natural", "verbose-natural", "short-search-query"):
        parsed = [a for a in attempts if a["question"]
                  and a["categories"].get("phrasing") == name]
        row = rows[("gen", name)]
        assert row.parsed == len(parsed) and row.lengths == [8] * len(parsed)
        assert row.rejected == (len(parsed) if name != "concise-natural" else 0)
        assert row.kept == sum(a["status"] == "kept" for a in parsed)
        assert row.kept_lost == (row.kept if name != "concise-natural" else 0)
        assert rows[("all sets", name)].rejected == row.rejected
    assert rows[("gen", "verbose-natural")].rejected >= 1
    table = render_markdown(list(rows.values()))
    assert "| gen | verbose-natural | 10-20 |" in table
    wide = {(r.set_name, r.category): r for r in length_audit([tmp_path / "gen"], slack=2)}
    assert wide[("gen", "verbose-natural")].bounds == (8, 22)
    assert wide[("gen", "verbose-natural")].rejected == 0
    with pytest.raises(DataError, match="not a generated question set"):
        length_audit([tmp_path])


def _without_words(tmp_path):
    data = _shipped()
    for cat in data["question"]["phrasing"].values():
        cat.pop("words")
    path = tmp_path / "nowords.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --- the command line ---------------------------------------------------------------------


def test_cli_yield_table_shows_each_categorys_length_rejections(small_index, data_dir, tmp_path,
                                                               monkeypatch):
    from typer.testing import CliRunner

    import intentrank.cli.generate as generate_commands
    import intentrank.llm.client as client
    from intentrank.cli import app
    from intentrank.cli.common import console

    monkeypatch.setattr(generate_commands, "open_or_build", lambda *a, **k: small_index)
    monkeypatch.setattr(client, "load_llm", lambda *a, **k: LLMClient(
        GenerationLLM(follow_length=False), cache=False, retries=0))
    monkeypatch.setattr(console, "width", 200)  # one line per table row
    out = tmp_path / "gen"
    r = CliRunner().invoke(app, ["generate", str(data_dir / "cranfield"), str(out),
                                 "--n", "8", "--seed", "2", "--max-attempts", "16"])
    assert r.exit_code == 0, r.output
    info = json.loads((out / GENERATION_JSON).read_text())
    assert info["rejected"]["length"] >= 1
    assert "too long/short" in r.output
    for name, row in info["yield"]["phrasing"].items():
        line = next(ln for ln in r.output.splitlines() if f" {name} " in ln)
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        assert cells[-1] == str(row["rejected"].get("length", 0)), line


def test_shipped_taxonomies_load_by_name_and_a_missing_file_lists_them(tmp_path):
    assert load_taxonomy("default").sha256 == load_taxonomy().sha256
    training = load_taxonomy("search-queries")
    assert training.source == "<shipped search_queries.yaml>"
    assert [c.name for c in training.users.categories] == ["searcher"]
    assert training["phrasing"]["question"].words == (4, 32)
    with pytest.raises(ConfigError, match="shipped taxonomies: default, search-queries"):
        load_taxonomy(tmp_path / "search-queries.yaml")
