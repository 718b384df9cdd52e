"""Generated question sets: the taxonomy file, the filters, the generator (scripted LLM on the
real Cranfield index), resume after a kill, bad input, and one real embedded-model run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import ir_measures
import pytest
import yaml
from fakes import GenerationLLM

from intentrank.data.dataset import load_dataset
from intentrank.errors import ConfigError, DataError
from intentrank.generate.categories import load_taxonomy, parse_taxonomy
from intentrank.generate.filters import (
    DuplicateFilter,
    copies_wording,
    malformed,
    one_document_only,
    unsupported,
)
from intentrank.generate.generator import GenerationSettings, generate_questions
from intentrank.generate.runlog import ATTEMPTS, GENERATION_JSON
from intentrank.llm.client import LLMClient
from intentrank.types import Trace

TESTS = Path(__file__).resolve().parent

# --- the taxonomy ------------------------------------------------------------------------


def test_shipped_taxonomy_is_the_papers():
    t = load_taxonomy()
    assert len(t.question) == 8
    assert sum(len(c.categories) for c in t.question) == 21
    pair_types = {c.name: c.probability for c in t.two_document.categories}
    assert pair_types == {"comparison": 0.3, "multi-aspect": 0.3, "cause-effect": 0.05,
                          "conflicting-views": 0.05, "definition-combination": 0.1,
                          "temporal-change": 0.1, "multi-hop": 0.1}
    phrasing = {c.name: c.probability for c in t.question if c.name == "phrasing"
                for c in c.categories}
    # published .25/.75/.05/.05 (sum 1.1), normalised
    assert phrasing["verbose-natural"] == pytest.approx(0.75 / 1.1, abs=1e-4)
    assert [c.name for c in t.for_pairs()] == ["phrasing", "linguistic-variation"]


def test_knowledge_bench_taxonomy_keeps_the_papers_pair_types_without_length_bounds():
    """bench/knowledge_taxonomy.yaml (the issue-16 generated sets): the default's users and
    seven two-document types with their probabilities, and no `words` bound anywhere."""
    bench = load_taxonomy(TESTS.parent / "bench" / "knowledge_taxonomy.yaml")
    default = load_taxonomy()
    assert bench.two_document == default.two_document
    assert bench.users == default.users
    assert all(c.words is None for cat in bench.question for c in cat.categories)
    assert [c.name for c in bench.for_pairs()] == ["phrasing", "linguistic-variation"]


def _shipped() -> dict:
    from importlib import resources

    return yaml.safe_load(resources.files("intentrank.generate")
                          .joinpath("default_categories.yaml").read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["question"]["premise"]["direct"].update(probability=0.5),
     "field 'question.premise': probabilities sum to 0.55, not 1"),
    (lambda d: d.update(colour={}), "field 'colour': unknown field"),
    (lambda d: d["users"]["expert"].pop("description"),
     "field 'users.expert.description': is required"),
    (lambda d: d["users"]["expert"].update(weight=2), "field 'users.expert.weight': unknown"),
    (lambda d: d["users"]["expert"].update(probability=1.5),
     "field 'users.expert.probability': must be a number in [0, 1]"),
    (lambda d: d["question"]["scope"]["narrow"].update(checks=["spelling"]),
     "field 'question.scope.narrow.checks'"),
    (lambda d: d.update(two_document_categorisations=["mood"]),
     "field 'two_document_categorisations'"),
    (lambda d: d.pop("two_document"), "field 'two_document': is required"),
])
def test_bad_taxonomy_names_the_field(edit, message):
    data = _shipped()
    edit(data)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_taxonomy(data, "cats.yaml")


def test_taxonomy_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such categorisation file"):
        load_taxonomy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("users: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: line 2 is not valid YAML"):
        load_taxonomy(bad)


# --- the filters -------------------------------------------------------------------------

DOC = ("The boundary layer thickness grows with the square root of the distance from the "
       "leading edge of a flat plate in laminar flow.")


@pytest.mark.parametrize("reply, problem", [
    ({"question": "How thick is a laminar boundary layer far downstream?",
      "answer": "It grows with the square root of the distance."}, None),
    ("not a dict", "not a JSON object"),
    ({"question": "Why?", "answer": "Because."}, "fewer than 3"),
    ({"question": "How thick is the layer?", "answer": "  "}, "the answer is empty"),
    ({"question": "How thick is the layer?"}, "must both be text"),
    ({"question": " ".join(["word"] * 61), "answer": "x"}, "more than 60"),
    ({"question": "What do the two documents say about drag?", "answer": "x"},
     "refers to its source ('two documents')"),
    ({"question": "What is the speed of the multiplier described in Document 1?", "answer": "x"},
     "refers to its source ('Document 1')"),
    ({"question": "Which document provides a direct amplifier for low voltages?", "answer": "x"},
     "refers to its source ('Which document')"),
    ({"question": "How is the second passage's result applied?", "answer": "x"},
     "refers to its source ('second passage')"),
    ({"question": "How do documentary films on study habits differ?", "answer": "x"}, None),
])
def test_malformed_replies(reply, problem):
    got = malformed(reply)
    assert (got is None) if problem is None else (problem in got)


def test_copied_wording_flags_lifted_phrases_only():
    assert copies_wording("boundary layer thickness grows with square root of distance?",
                          [DOC]) is not None
    assert copies_wording("How does the viscous region near a plate widen downstream?",
                          [DOC]) is None


def test_lexical_support_and_both_documents():
    assert unsupported("It grows with the square root of the distance.", [DOC]) is None
    assert "occur in the source" in unsupported("Mars has two moons named Phobos and Deimos.",
                                                [DOC])
    other = "Shock waves form ahead of a blunt body in supersonic flow around the nose."
    both = "How does laminar boundary thickness compare with shock waves ahead of blunt bodies?"
    assert one_document_only(both, "It grows; shocks form ahead of the nose.", DOC, other) \
        is None
    assert "found only in the second" in one_document_only(
        "Where do shock waves form?", "Ahead of a blunt body nose.", DOC, other)


def test_near_duplicates():
    f = DuplicateFilter()
    f.add("g1", "How thick is a laminar boundary layer on a flat plate?")
    assert "near-duplicate of g1" in f.check("How thick is the laminar boundary layer on flat "
                                             "plates?")
    assert f.check("What drag does a cylinder have at high Mach number?") is None


def test_recall_counts_half_for_one_of_two_gold_documents():
    """Recall@k of gold documents: a two-document question with one found scores 0.5."""
    qrels = [ir_measures.Qrel("q1", "a", 1), ir_measures.Qrel("q1", "b", 1),
             ir_measures.Qrel("q2", "c", 1)]
    run = [ir_measures.ScoredDoc("q1", "a", 2.0), ir_measures.ScoredDoc("q1", "x", 1.0),
           ir_measures.ScoredDoc("q2", "c", 1.0)]
    per_query = {m.query_id: m.value for m in
                 ir_measures.iter_calc([ir_measures.R @ 10], qrels, run)}
    assert per_query == {"q1": 0.5, "q2": 1.0}


# --- the generator on the real Cranfield index -------------------------------------------


def _client(llm: GenerationLLM) -> LLMClient:
    return LLMClient(llm, cache=False, retries=0)


def _run(index, data_dir, out, llm=None, **settings):
    settings = {"n": 6, "multi_doc": 0.5, "seed": 3, **settings}
    return generate_questions(index, data_dir / "cranfield" / "corpus.jsonl", out,
                              _client(llm or GenerationLLM()),
                              settings=GenerationSettings(**settings), progress=False)


def test_generates_a_loadable_beir_set(cranfield_index, data_dir, tmp_path):
    report = _run(cranfield_index, data_dir, tmp_path / "gen")
    assert report.kept == 6
    ds = load_dataset(tmp_path / "gen")
    queries, qrels = ds.split("test")
    assert len(queries) == 6 and set(qrels) == {q.id for q in queries}
    ids = set(cranfield_index.ids)
    assert all(set(judged) <= ids for judged in qrels.values())
    rows = [json.loads(line) for line in (tmp_path / "gen" / "queries.jsonl").open()]
    kinds = {r["metadata"]["kind"] for r in rows}
    assert kinds == {"single", "pair"}
    for r in rows:
        meta = r["metadata"]
        assert len(meta["documents"]) == (2 if meta["kind"] == "pair" else 1)
        assert set(qrels[r["_id"]]) == set(meta["documents"])
        assert meta["answer"] and meta["user"] in {"expert", "novice"}
        if meta["kind"] == "single":
            assert len(meta["categories"]) == 8
        else:
            assert meta["two_document_type"] and set(meta["categories"]) == {
                "phrasing", "linguistic-variation"}
    info = json.loads((tmp_path / "gen" / GENERATION_JSON).read_text())
    assert info["kept"] == 6 and info["identity"]["model"] == "fake-generation"
    assert sum(r["kept"] for r in info["yield"]["kind"].values()) == 6


def test_same_settings_same_questions(cranfield_index, data_dir, tmp_path):
    _run(cranfield_index, data_dir, tmp_path / "a")
    info = json.loads((tmp_path / "a" / GENERATION_JSON).read_text())
    _run(cranfield_index, data_dir, tmp_path / "b", **{
        k: v for k, v in info["settings"].items() if k in GenerationSettings.__dataclass_fields__})
    assert (tmp_path / "a" / "queries.jsonl").read_text() == \
        (tmp_path / "b" / "queries.jsonl").read_text()
    assert (tmp_path / "a" / ATTEMPTS).read_text().count("\n") == \
        (tmp_path / "b" / ATTEMPTS).read_text().count("\n")


def test_filters_are_counted(cranfield_index, data_dir, tmp_path):
    trace = Trace()
    report = generate_questions(
        cranfield_index, data_dir / "cranfield" / "corpus.jsonl", tmp_path / "gen",
        _client(GenerationLLM(bad={1: "no json here", 2: '{"question": "Why?"'})),
        settings=GenerationSettings(n=3, multi_doc=0.0, seed=1), trace=trace, progress=False)
    assert report.info["rejected"]["malformed"] == 2
    assert trace.stages["generate"].counters["fallbacks"] == 2
    assert trace.stages["generate"].queries == report.info["attempts"]  # health line: attempts
    unsupported = generate_questions(
        cranfield_index, data_dir / "cranfield" / "corpus.jsonl", tmp_path / "uns",
        _client(GenerationLLM(supported=False)),
        settings=GenerationSettings(n=2, multi_doc=0.0, max_attempts=3, llm_checks=True),
        progress=False)
    assert unsupported.kept == 0 and unsupported.info["rejected"] == {"unsupported": 3}
    one_doc = generate_questions(
        cranfield_index, data_dir / "cranfield" / "corpus.jsonl", tmp_path / "one",
        _client(GenerationLLM(answerable=True)),
        settings=GenerationSettings(n=2, multi_doc=1.0, max_attempts=3, llm_checks=True),
        progress=False)
    assert one_doc.info["rejected"] == {"one_doc_suffices": 3}


def test_llm_checks_ask_the_checker(cranfield_index, data_dir, tmp_path):
    """With a ``checker`` (the CLI's: role ``support``, the 1.5B), the support and
    one-document checks are its verdicts, not the question writer's."""
    corpus = data_dir / "cranfield" / "corpus.jsonl"
    settings = GenerationSettings(n=2, multi_doc=0.0, max_attempts=3, llm_checks=True)
    rejected = generate_questions(cranfield_index, corpus, tmp_path / "a", _client(
        GenerationLLM()), checker=_client(GenerationLLM(supported=False)),
        settings=settings, progress=False)
    assert rejected.info["rejected"] == {"unsupported": 3}
    assert rejected.info["identity"]["checker_model"] != ""
    kept = generate_questions(cranfield_index, corpus, tmp_path / "b", _client(
        GenerationLLM(supported=False)), checker=_client(GenerationLLM()),
        settings=settings, progress=False)
    assert kept.kept == 2


def test_resume_after_kill_gives_the_uninterrupted_set(cranfield_index, data_dir, tmp_path):
    settings = {"n": 8, "multi_doc": 0.5, "seed": 5}
    _run(cranfield_index, data_dir, tmp_path / "whole", **settings)
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(TESTS)!r})
        from pathlib import Path
        from fakes import GenerationLLM
        from intentrank.generate.generator import GenerationSettings, generate_questions
        from intentrank.index import Index
        from intentrank.llm.client import LLMClient
        generate_questions(Index({str(cranfield_index.path)!r}),
                           Path({str(data_dir / "cranfield" / "corpus.jsonl")!r}),
                           {str(tmp_path / "killed")!r},
                           LLMClient(GenerationLLM(delay=0.2), cache=False),
                           settings=GenerationSettings(**{settings!r}), progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    attempts = tmp_path / "killed" / ATTEMPTS
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if attempts.exists() and attempts.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = attempts.read_text().count("\n")
    assert 3 <= done_before < 8, "the kill came too late to test a resume"
    with attempts.open("a") as fh:
        fh.write('{"attempt": 99, "kind": "sin')  # a torn last line
    report = _run(cranfield_index, data_dir, tmp_path / "killed", **settings)
    assert report.kept == 8
    assert (tmp_path / "killed" / "queries.jsonl").read_text() == \
        (tmp_path / "whole" / "queries.jsonl").read_text()
    # the killed run left no ``runs`` entry; its attempts' time still counts in the cost
    info = json.loads((tmp_path / "killed" / GENERATION_JSON).read_text())
    spent = sum(json.loads(line)["seconds"] for line in attempts.read_text().splitlines())
    killed = sum(json.loads(line)["seconds"]
                 for line in attempts.read_text().splitlines()[:done_before])
    assert len(info["runs"]) == 1 and killed >= 0.2 * done_before
    assert info["questions_per_minute"] == pytest.approx(8 / (spent / 60), rel=0.01)


def test_resume_refuses_other_settings(cranfield_index, data_dir, tmp_path):
    _run(cranfield_index, data_dir, tmp_path / "gen", n=2)
    with pytest.raises(ConfigError, match="seed: 3 then, 4 now"):
        _run(cranfield_index, data_dir, tmp_path / "gen", n=2, seed=4)
    report = _run(cranfield_index, data_dir, tmp_path / "gen", n=3)  # a bigger budget is fine
    assert report.kept == 3
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not a generated question set"):
        _run(cranfield_index, data_dir, tmp_path / "other", n=2)


def test_a_damaged_attempts_log_is_named(cranfield_index, data_dir, tmp_path):
    _run(cranfield_index, data_dir, tmp_path / "gen", n=2)
    log = tmp_path / "gen" / ATTEMPTS
    lines = log.read_text().splitlines(keepends=True)
    log.write_text(lines[0] + "not json\n" + "".join(lines[1:]))
    with pytest.raises(DataError, match=r"attempts.jsonl:2: unreadable attempt record"):
        _run(cranfield_index, data_dir, tmp_path / "gen", n=3)
    log.write_text(lines[1])  # attempt 1 without attempt 0
    with pytest.raises(DataError, match="attempt numbers are not 0, 1, 2"):
        _run(cranfield_index, data_dir, tmp_path / "gen", n=3)


def test_bad_settings():
    with pytest.raises(ConfigError, match="--multi-doc must be in"):
        GenerationSettings(multi_doc=1.5)
    with pytest.raises(ConfigError, match="--n must be"):
        GenerationSettings(n=0)
    with pytest.raises(ConfigError, match="--split must be a plain name"):
        GenerationSettings(split="../x")


def _tiny_index(tmp_path, docs):
    from intentrank.index import build_index
    from intentrank.types import Document

    return build_index([Document(id=str(i), text=t) for i, t in enumerate(docs)],
                       tmp_path / "idx")


def test_corpus_too_small_for_pairs_writes_nothing(tmp_path):
    text = "words " * 30
    idx = _tiny_index(tmp_path, [text + "alpha", "short one"])
    out = tmp_path / "gen"
    with pytest.raises(DataError, match="too small for two-document questions"):
        generate_questions(idx, tmp_path / "corpus.jsonl", out, _client(GenerationLLM()),
                           settings=GenerationSettings(n=1, multi_doc=0.5), progress=False)
    assert not out.exists()
    with pytest.raises(DataError, match="no document has 20 words or more"):
        generate_questions(_tiny_index(tmp_path / "b", ["too short", "also short"]),
                           tmp_path / "corpus.jsonl", out, _client(GenerationLLM()),
                           settings=GenerationSettings(n=1, multi_doc=0.0), progress=False)
    assert not out.exists()


def test_cli_rejects_bad_input_before_writing(tmp_path, data_dir):
    from typer.testing import CliRunner

    from intentrank.cli import app

    cats = tmp_path / "cats.yaml"
    data = _shipped()
    data["users"]["novice"]["probability"] = 0.7
    cats.write_text(yaml.safe_dump(data))
    out = tmp_path / "gen"
    r = CliRunner().invoke(app, ["generate", str(data_dir / "cranfield"), str(out),
                                 "--config", str(cats)])
    assert r.exit_code == 2 and "field 'users': probabilities sum to 1.2" in r.output
    for option, value in (("--multi-doc", "2"), ("--minutes", "-1"), ("--max-attempts", "-1"),
                          ("--n", "0")):
        r = CliRunner().invoke(app, ["generate", str(data_dir / "cranfield"), str(out),
                                     option, value])
        assert r.exit_code == 2 and f"error: {option} must be" in r.output, r.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = CliRunner().invoke(app, ["generate", str(empty), str(out), "--index",
                                 str(tmp_path / "idx")])
    assert r.exit_code == 2 and "empty.jsonl" in r.output
    assert not out.exists()


# --- a real generation through the embedded model -----------------------------------------


@pytest.mark.slow
def test_real_generation_with_the_embedded_model(cranfield_index, data_dir, tmp_path):
    pytest.importorskip("xllamacpp")
    from intentrank.llm.client import load_llm

    trace = Trace()
    report = generate_questions(
        cranfield_index, data_dir / "cranfield" / "corpus.jsonl", tmp_path / "gen",
        load_llm("embedded", cache=tmp_path / "cache.sqlite"),
        settings=GenerationSettings(n=1, multi_doc=0.0, seed=0, max_attempts=4), trace=trace,
        progress=False)
    attempts = [json.loads(x) for x in (tmp_path / "gen" / ATTEMPTS).open()]
    assert 1 <= len(attempts) <= 4
    assert trace.stages["generate"].counters["llm_calls"] >= 1
    first = attempts[0]  # the model replied with a readable question (constrained decoding)
    assert first["status"] != "malformed", first
    assert len(first["question"].split()) >= 3 and first["answer"]
    if report.kept:
        ds = load_dataset(tmp_path / "gen")
        queries, qrels = ds.split("test")
        assert qrels[queries[0].id] == {first["documents"][0]: 1}
    assert asdict(GenerationSettings(**report.info["settings"])) == report.info["settings"]
