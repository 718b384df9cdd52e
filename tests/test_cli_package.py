"""The command-line package's layout, and the library functions its commands call (the
reformulation loop, gold texts for the judge, ``--set``/``--without``, search results as
JSON rows, a corpus's file)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.data.conversations import Conversation, ConversationTurn
from intentrank.data.dataset import corpus_file
from intentrank.errors import ConfigError, DataError
from intentrank.eval.answer_judge import gold_texts
from intentrank.eval.spec import check_without, parse_assignment
from intentrank.query.reformulate import ConcatTurns, conversation_turns, reformulate_turns
from intentrank.report.search import result_rows
from intentrank.types import Document, Query, Ranking, ScoredDoc, Trace

CLI = Path(__file__).resolve().parents[1] / "src" / "intentrank" / "cli"


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_cli_modules_are_small_and_import_no_private_names(path):
    assert len(path.read_text().splitlines()) <= 500
    private = [f"{node.module}.{alias.name}" for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ImportFrom) for alias in node.names
               if alias.name.startswith("_") and alias.name != "__future__"]
    assert not private


def test_set_and_without_are_parsed_and_checked():
    assert parse_assignment("cross_encoder.top_k=30") == ("cross_encoder", "top_k", 30)
    assert parse_assignment("listwise.model=[a, b]")[2] == ["a", "b"]
    for bad in ("bm25=3", "bm25.=3", ".depth=3", "bm25.depth"):
        with pytest.raises(ConfigError, match=r"--set .*expected STAGE.PARAM=VALUE"):
            parse_assignment(bad)
    with pytest.raises(ConfigError, match=r"--set 'bm25.depth=\[': VALUE is not YAML"):
        parse_assignment("bm25.depth=[")
    assert check_without(["llm", "cross_encoder", "rrf"]) == ["llm", "cross_encoder", "rrf"]
    with pytest.raises(ConfigError, match=r"--without \['bm52'\]: not a stage name"):
        check_without(["bm25", "bm52"])


class _Docs:
    def __init__(self, docs: list[Document]) -> None:
        self.docs = {d.id: d for d in docs}
        self.row_of = {d.id: i for i, d in enumerate(docs)}

    def doc(self, doc_id: str) -> Document:
        return self.docs[doc_id]

    def doc_text(self, doc_id: str) -> str:
        return self.docs[doc_id].text


DOCS = _Docs([Document("a", "alpha text", "A"), Document("b", "beta text", "B"),
              Document("c", "gamma text")])


def test_gold_texts_are_the_relevant_documents_the_index_holds():
    qrels = {"q1": {"a": 2, "b": 0, "zz": 1}, "q2": {"c": 1}, "q3": {}}
    assert gold_texts(DOCS, qrels) == {"q1": ["alpha text"], "q2": ["gamma text"], "q3": []}


def test_result_rows_rank_score_and_stage_ranks_and_the_aspect_when_aspects_ran():
    docs = [ScoredDoc("b", 2.0, {"bm25": 1.0, "ce": 9.0}), ScoredDoc("a", 1.0, {"bm25": 5.0}),
            ScoredDoc("c", 0.5, {})]
    rows = result_rows(Ranking(Query("q", "x"), docs), DOCS, 2)
    assert [r["rank"] for r in rows] == [1, 2] and [r["doc_id"] for r in rows] == ["b", "a"]
    assert rows[0]["stage_ranks"] == {"bm25": 2, "ce": 1} and rows[1]["title"] == "A"
    assert "text" not in rows[0] and "aspect" not in rows[0]
    assert result_rows(Ranking(Query("q", "x"), docs), DOCS, 1, True)[0]["text"] == "beta text"
    query = Query("q", "x").with_derived("aspect", ["first", "second"], "aspects")
    covered = [ScoredDoc("a", 1.0, {"coverage.covers": 1.0}), ScoredDoc("b", 0.5, {})]
    assert [r["aspect"] for r in result_rows(Ranking(query, covered), DOCS, 5)] == \
        ["second", ""]


def test_turns_are_reformulated_in_batches_with_one_record_each():
    conv = Conversation("c1", (ConversationTurn("c1_1", "What is BM25?"),
                               ConversationTurn("c1_2", "Is it fast?", rewrite="Is BM25 fast?")))
    other = Conversation("c2", (ConversationTurn("c2_1", "Hello"),))
    turns = conversation_turns([conv, other])
    assert [t.id for _, t, _ in turns] == ["c1_1", "c1_2", "c2_1"]
    assert len(conversation_turns([conv, other], limit=2)) == 2
    batches = list(reformulate_turns(ConcatTurns(), turns, Trace(), batch_size=2))
    assert [len(b) for b in batches] == [2, 1]
    second = batches[0][1]
    assert second == {"conversation": "c1", "turn": "c1_2", "question": "Is it fast?",
                      "method": "concat_turns", "reformulation": "What is BM25? Is it fast?",
                      "changed": True, "fallback": None, "gold": "Is BM25 fast?"}
    assert batches[0][0]["changed"] is False and "gold" not in batches[0][0]


def test_corpus_file_of_a_directory_or_a_file(tmp_path):
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n')
    assert corpus_file(tmp_path) == tmp_path / "corpus.jsonl"
    assert corpus_file(tmp_path / "other.csv") == tmp_path / "other.csv"
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no corpus file"):
        corpus_file(tmp_path / "empty")


def test_cli_search_json_rows_are_the_shared_rows_with_id_kept(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in
                              [("1", "Wings", "lift on wings"), ("2", "Heat", "heat flux"),
                               ("3", "", "wings and heat")]))
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(corpus), str(tmp_path / "idx"), "--legs", "bm25"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["search", str(tmp_path / "idx"), "wings", "-p", "bm25", "-k", "5",
                            "--json"])
    assert r.exit_code == 0, r.output
    (hits,) = json.loads(r.stdout)
    assert hits["query"] == "wings" and "aspects" not in hits
    assert [h["id"] for h in hits["results"]] == [h["doc_id"] for h in hits["results"]]
    assert [h["rank"] for h in hits["results"]] == list(range(1, len(hits["results"]) + 1))
    assert {h["doc_id"] for h in hits["results"]} == {"1", "3"}
    assert all(set(h["stage_ranks"]) == set(h["stage_scores"]) for h in hits["results"])
