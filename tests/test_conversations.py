"""Conversations: the plain conversations.jsonl format (every bad input named by file, line and
field), the real TREC CAsT 2019-2021 topic files, and CAsT 2021's canonical passages as a
grounded dataset searched with the real BM25 index."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from intentrank.core.params import ParameterError
from intentrank.data.conversations import (
    Conversation,
    ConversationTurn,
    load_cast,
    load_conversations,
    write_cast2021_passages,
    write_conversations,
)
from intentrank.data.dataset import load_dataset
from intentrank.errors import DataError
from intentrank.types import Turn


@pytest.fixture(scope="session")
def cast(data_dir: Path) -> Path:
    return data_dir / "trec-cast"


@pytest.fixture(scope="session")
def cast2021(cast: Path) -> list[Conversation]:
    return load_cast(2021, cast)


@pytest.fixture(scope="session")
def passages21(cast: Path, tmp_path_factory) -> Path:
    return write_cast2021_passages(tmp_path_factory.mktemp("cast") / "cast2021", cast)


def _turns(conversations: list[Conversation]) -> dict[str, ConversationTurn]:
    return {t.id: t for c in conversations for t in c.turns}


# -- TREC CAsT ------------------------------------------------------------------------------

@pytest.mark.parametrize(("year", "n_conv", "n_turns"),
                         [(2019, 50, 479), (2020, 25, 216), (2021, 26, 239)])
def test_cast_counts(cast, year, n_conv, n_turns):
    conversations = load_cast(year, cast)
    turns = _turns(conversations)
    assert (len(conversations), len(turns)) == (n_conv, n_turns)
    assert all(t.rewrite and t.rewrite.strip() == t.rewrite for t in turns.values())
    assert all(t.question.strip() == t.question for t in turns.values())
    assert all(t.relevant is None for t in turns.values())
    # turn ids are <topic>_<turn>, numbered 1, 2, ... in every conversation
    for c in conversations:
        assert [t.id for t in c.turns] == [f"{c.id}_{n}" for n in range(1, len(c.turns) + 1)]


def test_cast_2019_spot_check(cast):
    turns = _turns(load_cast(2019, cast))
    # the raw file has "What are its symptoms? " (trailing space, stripped)
    assert turns["31_4"].question == "What are its symptoms?"
    assert turns["31_4"].rewrite == "What are lung cancer's symptoms?"
    assert turns["31_1"].rewrite == turns["31_1"].question == "What is throat cancer?"
    assert turns["31_4"].answer is None and turns["31_4"].passage_id is None
    with pytest.raises(ParameterError, match="CAsT 2019 has no automatic rewrites"):
        load_cast(2019, cast, rewrites="automatic")


def test_cast_2020_spot_check(cast):
    turns = _turns(load_cast(2020, cast))
    t = turns["81_2"]
    assert t.question == "Now it stopped working. Why?"
    assert t.rewrite == "Now my garage door opener stopped working. Why?"
    assert (t.passage_id, t.answer) == ("MARCO_3942603", None)
    assert len({t.passage_id for t in turns.values()}) == 209  # 216 turns, 7 ids repeat
    auto = _turns(load_cast(2020, cast, rewrites="automatic"))
    assert auto["81_2"].rewrite == "Why did garage door opener stop working?"
    assert auto["81_2"].passage_id == "MARCO_3942603"  # only the rewrite changes


def test_cast_2021_spot_check_and_history(cast, cast2021):
    turns = _turns(cast2021)
    t = turns["106_3"]
    assert t.question == "How deadly is it?"
    assert t.rewrite == "How deadly is lobular carcinoma in situ?"
    assert t.passage_id == "KILT_1845197-7"
    assert turns["106_1"].passage_id == "MARCO_D59865-7"
    assert turns["106_1"].answer.startswith("More research is needed. Types Breast cancer")
    # one id, two texts in the file: the later passage gets its own id
    assert turns["106_4"].passage_id == "MARCO_D684519-2"
    assert turns["106_5"].passage_id == "MARCO_D684519-2@106_5"
    assert turns["106_4"].answer != turns["106_5"].answer
    assert len({t.passage_id for t in turns.values()}) == 235
    assert len({t.answer for t in turns.values()}) == 235
    auto = _turns(load_cast(2021, cast, rewrites="automatic"))
    assert auto["106_3"].rewrite == "How deadly is LCIS?"
    # a turn's query holds the earlier questions and passages, not its own
    q = {q.id: q for c in cast2021 for q in c.queries()}["106_3"]
    assert q.text == "How deadly is it?"
    assert q.history == (Turn(turns["106_1"].question, turns["106_1"].answer),
                         Turn(turns["106_2"].question, turns["106_2"].answer))


def test_cast_bad_arguments(cast, tmp_path):
    with pytest.raises(ParameterError, match="TREC CAsT years are 2019, 2020, 2021, got 2022"):
        load_cast(2022, cast)
    with pytest.raises(ParameterError, match="one of manual, automatic, got 'gold'"):
        load_cast(2021, cast, rewrites="gold")
    with pytest.raises(DataError, match="TREC CAsT directory not found"):
        load_cast(2021, tmp_path / "nowhere")


def test_cast_default_root_follows_intentrank_data(cast, monkeypatch, tmp_path):
    monkeypatch.setenv("INTENTRANK_DATA", str(cast.parent))
    assert len(load_cast(2020)) == 25
    monkeypatch.setenv("INTENTRANK_DATA", str(tmp_path))
    with pytest.raises(DataError, match=f"{tmp_path / 'trec-cast'}: TREC CAsT directory"):
        load_cast(2020)


def test_cast_damaged_file_is_named(cast, tmp_path):
    root = tmp_path / "trec-cast"
    (root / "2021").mkdir(parents=True)
    topics = json.loads((cast / "2021" / "2021_manual_evaluation_topics_v1.0.json").read_text())
    del topics[1]["turn"][2]["passage"]
    path = root / "2021" / "2021_manual_evaluation_topics_v1.0.json"
    path.write_text(json.dumps(topics))
    with pytest.raises(DataError) as err:
        load_cast(2021, root)
    assert str(err.value) == (f"{path} (field 'passage'): topic 107 turn 107_3: missing or "
                              f"not a str (got None)")
    path.write_text('[{"number": 106,\n "turn": [x]}]\n')
    with pytest.raises(DataError, match=rf"{path}:2: malformed JSON \(Expecting value at "
                                        r"column 11\)"):
        load_cast(2021, root)


# -- the CAsT 2021 passages dataset ---------------------------------------------------------

def test_cast2021_passages_dataset(passages21, cast2021):
    lines = (passages21 / "corpus.jsonl").read_text().splitlines()
    assert len(lines) == 235
    assert json.loads(lines[0])["_id"] == "MARCO_D59865-7"
    qrels_lines = (passages21 / "qrels" / "test.tsv").read_text().splitlines()
    assert qrels_lines[:2] == ["query-id\tcorpus-id\tscore", "106_1\tMARCO_D59865-7\t1"]
    assert len(qrels_lines) == 1 + 239

    ds = load_dataset(passages21)
    assert ds.warnings == []
    assert len(ds.queries) == 239 and ds.splits == ["test"]
    assert ds.qrels_paths["test"] == passages21 / "qrels" / "test.tsv"
    assert len(ds.conversations) == 26
    q = ds.queries["106_3"]
    assert [h.question for h in q.history] == ["I just had a breast biopsy for cancer. What "
                                               "are the most common types?",
                                               "Once it breaks out, how likely is it to spread?"]
    corpus = {d.id: d.text for d in ds.corpus()}
    assert [h.answer for h in q.history] == [corpus["MARCO_D59865-7"],
                                             corpus["MARCO_D684514-1"]]
    queries, qrels = ds.split("test")
    assert qrels["106_3"] == {"KILT_1845197-7": 1}
    # the own passage is never in a turn's history, except where the file repeats a passage
    # in a later turn of the same conversation (4 turns)
    repeats = [q.id for q in queries
               if corpus[next(iter(qrels[q.id]))] in {h.answer for h in q.history}]
    assert repeats == ["111_11", "113_13", "122_4", "130_4"]
    gold = ds.gold_rewrites()
    assert len(gold) == 239 and gold["106_3"] == "How deadly is lobular carcinoma in situ?"
    assert gold == {t.id: t.rewrite for c in cast2021 for t in c.turns}


def test_cast2021_passages_without_qrels_dir(passages21, tmp_path):
    """Without qrels/ the turns' ``relevant`` fields are the test split."""
    root = tmp_path / "noqrels"
    root.mkdir()
    for name in ("corpus.jsonl", "conversations.jsonl"):
        (root / name).symlink_to(passages21 / name)
    ds = load_dataset(root)
    with_dir = load_dataset(passages21)
    assert ds.splits == ["test"] and ds.qrels == with_dir.qrels
    assert ds.qrels_paths["test"] == root / "conversations.jsonl"


@pytest.mark.slow
def test_cast2021_bm25_finds_gold_passages(passages21, tmp_path):
    """The real BM25 index over the 235 passages: gold rewrites find the turn's passage in the
    top 10 for 224 of 239 turns (R@10 0.937), the raw turns for 175 (BM25 ties ordered by row,
    and evaluated in that order: trec_eval alone orders tied scores by doc id and counts 174)."""
    from intentrank.index import IndexSettings, build_index
    from intentrank.measures.metrics import evaluate
    from intentrank.retrieve.retrievers import BM25Retriever

    ds = load_dataset(passages21)
    index = build_index(ds.corpus(), tmp_path / "idx", IndexSettings(legs=("bm25",)))
    queries, qrels = ds.split("test")
    gold = ds.gold_rewrites()
    bm25 = BM25Retriever(index, 100)
    raw = bm25.run(queries)
    rewritten = bm25.run([dataclasses.replace(q, text=gold[q.id]) for q in queries])

    def hits(result) -> int:
        return sum(any(d.doc_id in qrels[r.query.id] for d in r.docs[:10])
                   for r in result.rankings)

    assert (hits(raw), hits(rewritten)) == (175, 224)  # ties broken by row (was 174)
    ev_raw = evaluate(raw.to_run(), qrels, ["R@10", "nDCG@10"]).aggregate
    ev_gold = evaluate(rewritten.to_run(), qrels, ["R@10", "nDCG@10"]).aggregate
    assert ev_raw["R@10"] == pytest.approx(175 / 239)  # the ranking's order, ties included
    assert ev_gold["R@10"] == pytest.approx(224 / 239)
    assert ev_raw["nDCG@10"] == pytest.approx(0.5667, abs=5e-4)  # 0.5655 in trec_eval's order
    assert ev_gold["nDCG@10"] == pytest.approx(0.6668, abs=5e-4)
    print(f"CAsT 2021 passages, BM25 R@10 raw {ev_raw['R@10']:.4f} gold "
          f"{ev_gold['R@10']:.4f}; nDCG@10 raw {ev_raw['nDCG@10']:.4f} gold "
          f"{ev_gold['nDCG@10']:.4f}")


# -- the plain format -----------------------------------------------------------------------

def test_round_trip(cast2021, tmp_path):
    path = write_conversations(cast2021, tmp_path / "c" / "conversations.jsonl")
    assert load_conversations(path) == cast2021
    judged = [Conversation("c1", (ConversationTurn("t1", "q?", relevant={"d1": 2, "d2": 0}),
                                  ConversationTurn(7, "next?", "rewritten", "", "p1")))]
    again = load_conversations(write_conversations(judged, tmp_path / "j.jsonl"))
    # an integer id is read back as a string; everything else as written
    assert again == [Conversation("c1", (judged[0].turns[0],
                                         dataclasses.replace(judged[0].turns[1], id="7")))]


def test_rewriting_the_same_conversations_keeps_the_file_and_its_mtime(tmp_path):
    """`intentrank bench` decides what is stale by mtime: a rerun of cast-passages (or of a
    benchmark that writes the dataset again) must not make its readers look stale."""
    convs = [Conversation("c1", (ConversationTurn("a", "Q"),))]
    path = write_conversations(convs, tmp_path / "c.jsonl")
    os.utime(path, (1_000_000, 1_000_000))
    write_conversations(convs, path)
    assert path.stat().st_mtime == 1_000_000 and not list(tmp_path.glob(".*.tmp"))
    write_conversations([Conversation("c2", (ConversationTurn("a", "Q"),))], path)
    assert path.stat().st_mtime > 1_000_000 and load_conversations(path)[0].id == "c2"


def test_minimal_file_and_nulls(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('\n{"id": 3, "turns": [{"id": "a", "question": "Q", "rewrite": null, '
                    '"answer": null, "relevant": null}]}\n\n')
    assert load_conversations(path) == [Conversation("3", (ConversationTurn("a", "Q"),))]


def _line(conv: dict) -> str:
    return json.dumps(conv)


OK_TURN = {"id": "t0", "question": "what?"}
BAD = [
    # (conversation object on line 2, field, message fragment)
    ({"turns": [OK_TURN]}, "id", "missing conversation id"),
    ({"id": " ", "turns": [OK_TURN]}, "id", "empty conversation id"),
    ({"id": "c1", "turns": [OK_TURN]}, "id", "duplicate conversation id 'c1' (first seen on "
                                             "line 1)"),
    ({"id": "c2"}, "turns", "conversation 'c2' has no turns"),
    ({"id": "c2", "turns": {"id": "t"}}, "turns", "'turns' must be a list of turns, got dict"),
    ({"id": "c2", "turns": []}, "turns", "conversation 'c2' has an empty list of turns"),
    ({"id": "c2", "turns": ["hi"]}, "turns[0]", "a turn must be a JSON object, got str"),
    ({"id": "c2", "turns": [{"question": "q"}]}, "turns[0].id", "missing turn id"),
    ({"id": "c2", "turns": [{"id": "a b", "question": "q"}]}, "turns[0].id",
     "turn id 'a b' contains whitespace"),
    ({"id": "c2", "turns": [{"id": "t2"}, OK_TURN]}, "turns[0].question",
     "turn 't2' has no question"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "x"}, OK_TURN]}, "turns[1].id",
     "duplicate turn id 't0' (first seen on line 1)"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "x"}, {"id": "t2", "question": "y"}]},
     "turns[1].id", "duplicate turn id 't2' (first seen on line 2)"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "  "}]}, "turns[0].question",
     "empty question"),
    ({"id": "c2", "turns": [{"id": "t2", "question": 5}]}, "turns[0].question",
     "question must be a string, got int 5"),
    ({"id": "c2", "rewrite": "x", "turns": [{"id": "t2", "question": "q"}]}, "rewrite",
     "'rewrite' is on the conversation, so it rewrites no turn"),
    ({"id": "c2", "title": "x", "turns": [{"id": "t2", "question": "q"}]}, "title",
     "unknown key 'title' on a conversation (known: id, turns)"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "rewrtie": "x"}]},
     "turns[0].rewrtie", "unknown key 'rewrtie' on a turn (known: id, question, rewrite, "
                         "answer, passage_id, relevant); did you mean 'rewrite'?"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "rewrite": ""}]},
     "turns[0].rewrite", "empty rewrite"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "rewrite": ["a"]}]},
     "turns[0].rewrite", "rewrite must be a string, got list"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "answer": 1}]},
     "turns[0].answer", "answer must be a string, got int"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "passage_id": ""}]},
     "turns[0].passage_id", "empty passage id"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "relevant": ["d1"]}]},
     "turns[0].relevant", "'relevant' must be an object {doc-id: grade}, got list"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "relevant": {"d1": 1.5}}]},
     "turns[0].relevant['d1']", "grade of 'd1' must be an integer >= 0, got float 1.5"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "relevant": {"d1": "1"}}]},
     "turns[0].relevant['d1']", "grade of 'd1' must be an integer >= 0, got str '1'"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "relevant": {"d1": True}}]},
     "turns[0].relevant['d1']", "grade of 'd1' must be an integer >= 0, got bool True"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "relevant": {"d1": -1}}]},
     "turns[0].relevant['d1']", "grade of 'd1' must be >= 0, got -1"),
    ({"id": "c2", "turns": [{"id": "t2", "question": "q", "relevant": {"d 1": 1}}]},
     "turns[0].relevant['d 1']", "document id 'd 1' must be a non-empty string without "
                                 "whitespace"),
]


@pytest.mark.parametrize(("conv", "field", "message"), BAD,
                         ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_bad_input_names_file_line_field(tmp_path, conv, field, message):
    path = tmp_path / "conversations.jsonl"
    path.write_text(_line({"id": "c1", "turns": [OK_TURN]}) + "\n" + _line(conv) + "\n")
    with pytest.raises(DataError) as err:
        load_conversations(path)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), 2, field)
    assert str(err.value).startswith(f"{path}:2 (field {field!r}): {message}")


@pytest.mark.parametrize(("text", "line", "message"), [
    ("", None, "no conversations found"),
    ("\n  \n", None, "no conversations found"),
    ('{"id": "c1", "turns": [{"id": "t", "question": "q"}]}\n{"id": \n', 2, "malformed JSON"),
    ('["c1"]\n', 1, "expected a JSON object, got list"),
])
def test_bad_files(tmp_path, text, line, message):
    path = tmp_path / "conversations.jsonl"
    path.write_text(text)
    with pytest.raises(DataError, match=message) as err:
        load_conversations(path)
    assert (err.value.path, err.value.line) == (str(path), line)


def test_dataset_refuses_queries_and_conversations(tmp_path):
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "t1", "text": "x"}\n')
    (tmp_path / "conversations.jsonl").write_text(
        '{"id": "c", "turns": [{"id": "t1", "question": "x"}]}\n')
    with pytest.raises(DataError, match="both queries.jsonl and conversations.jsonl: the "
                                        "queries come from one of them; keep one"):
        load_dataset(tmp_path)
    (tmp_path / "queries.jsonl").unlink()
    ds = load_dataset(tmp_path)  # no qrels dir, no judgments on the turns: no splits
    assert ds.splits == [] and ds.gold_rewrites() == {} and list(ds.queries) == ["t1"]


def test_dataset_conversations_with_unknown_judged_turns(tmp_path):
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    (tmp_path / "conversations.jsonl").write_text(
        '{"id": "c", "turns": [{"id": "t1", "question": "x", "rewrite": "y"}]}\n')
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nt1\td1\t1\n"
                                                 "t9\td1\t1\n")
    ds = load_dataset(tmp_path)
    assert ds.qrels == {"test": {"t1": {"d1": 1}}}
    assert ds.gold_rewrites() == {"t1": "y"}
    assert ds.warnings == [f"{tmp_path / 'qrels' / 'test.tsv'}: 1 judged query ids are not "
                           f"in conversations.jsonl (e.g. ['t9']); they are not evaluated"]
