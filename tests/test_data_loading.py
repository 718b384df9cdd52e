"""Loading corpora, queries, qrels and runs; bad input gets a message naming file and line."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import pytest

from intentrank.data.corpus import chunk_documents, iter_corpus, load_queries
from intentrank.data.dataset import load_dataset
from intentrank.data.trec import load_qrels, load_run, write_run
from intentrank.errors import DataError
from intentrank.types import Document


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# The counts each collection's SOURCE.md states (/work/shared/data/<name>/SOURCE.md):
# {name: (documents, queries, {split: (judged queries, judgment lines)})}
SOURCE_COUNTS = {
    "scifact": (5183, 1109, {"test": (300, 339), "train": (809, 919)}),
    "cranfield": (1400, 225, {"test": (225, 1837)}),
    "vaswani": (11429, 93, {"test": (93, 2083)}),
}


@pytest.mark.parametrize("name", sorted(SOURCE_COUNTS))
def test_real_collections_load_without_warnings_and_match_source_md(data_dir, name):
    docs, n_queries, splits = SOURCE_COUNTS[name]
    source = (data_dir / name / "SOURCE.md").read_text(encoding="utf-8")
    for count in (docs, n_queries, *(c for s in splits.values() for c in s)):
        assert f"{count:,}" in source or str(count) in source, (name, count)
    ds = load_dataset(data_dir / name, strict=True)
    assert ds.warnings == []
    assert len(ds.queries) == n_queries
    assert {s: (len(q), sum(len(j) for j in q.values())) for s, q in ds.qrels.items()} == splits
    ids = {d.id for d in ds.corpus()}
    assert len(ids) == docs
    assert ds.check_qrels(ids, strict=True) == [] and ds.warnings == []
    for split in splits:
        queries, qrels = ds.split(split)
        assert len(queries) == splits[split][0] and set(qrels) == {q.id for q in queries}


def test_real_beir_datasets_load(data_dir):
    scifact = load_dataset(data_dir / "scifact")
    assert sum(1 for _ in scifact.corpus()) == 5183
    assert len(scifact.queries) == 1109
    queries, qrels = scifact.split("test")
    assert len(queries) == 300 and sum(len(v) for v in qrels.values()) == 339
    assert sum(len(v) for v in scifact.qrels["train"].values()) == 919
    vaswani = load_dataset(data_dir / "vaswani")
    assert len(vaswani.split("test")[0]) == 93


def test_gz_zip_and_csv_corpora(tmp_path):
    rows = [{"_id": "d1", "title": "T", "text": "alpha"}, {"_id": "d2", "text": "beta"}]
    plain = write_jsonl(tmp_path / "c.jsonl", rows)
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as fh:
        fh.write(plain.read_text())
    with zipfile.ZipFile(tmp_path / "c.jsonl.zip", "w") as zf:
        zf.write(plain, "c.jsonl")
    (tmp_path / "c.csv").write_text('id,title,text\nd1,T,alpha\nd2,,"beta"\n')
    for name in ("c.jsonl", "c.jsonl.gz", "c.jsonl.zip", "c.csv"):
        docs = list(iter_corpus(tmp_path / name))
        assert [d.id for d in docs] == ["d1", "d2"], name
        assert docs[0].title == "T" and docs[1].text == "beta"


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": \n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: malformed JSON"):
        list(iter_corpus(path))


def test_duplicate_ids_and_missing_fields(tmp_path):
    dup = write_jsonl(tmp_path / "dup.jsonl", [{"_id": "a", "text": "x"}, {"_id": "a",
                                                                           "text": "y"}])
    with pytest.raises(DataError, match=r"dup.jsonl:2 \(field '_id'\): duplicate document id "
                                        r"'a' \(first seen on line 1\)"):
        list(iter_corpus(dup))
    noid = write_jsonl(tmp_path / "noid.jsonl", [{"text": "x"}])
    with pytest.raises(DataError, match="noid.jsonl:1: no id field"):
        list(iter_corpus(noid))


def test_non_utf8_file_gets_a_clear_message(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "caf\xe9"}\n'
                     .encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1.jsonl:2: not valid utf-8 at byte"):
        list(iter_corpus(path))
    assert [d.text for d in iter_corpus(path, encoding="latin-1")][1] == "café"


def test_empty_query_is_rejected(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"_id": "1", "text": "fine"},
                                              {"_id": "2", "text": "  "}])
    with pytest.raises(DataError, match=r"q.jsonl:2 \(field 'text'\): query '2' is empty"):
        load_queries(path)


def test_qrels_with_unknown_ids(tmp_path, data_dir):
    """Unknown ids warn and the rest is evaluated; an error only with strict=True."""
    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "text": "x"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "x"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\n")
    ds = load_dataset(root)
    assert ds.warnings == []
    warnings = ds.check_qrels({d.id for d in ds.corpus()})
    assert len(warnings) == 1 and ds.warnings == warnings
    assert "test.tsv: 1 of 2 judged document ids are not in the index (e.g. ['d9'])" in warnings[0]
    assert "kept" in warnings[0]
    assert ds.qrels["test"]["q1"] == {"d1": 1, "d9": 1}  # still counts against recall
    with pytest.raises(DataError, match=r"test.tsv: 1 of 2 judged document ids are not in the "
                                        r"index \(e.g. \['d9'\]\)"):
        ds.check_qrels({"d1"}, strict=True)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq7\td1\t1\nq1\td1\t1\n")
    ds = load_dataset(root)
    assert ds.split("test")[1] == {"q1": {"d1": 1}}
    assert len(ds.warnings) == 1 and ds.warnings[0].endswith(
        "test.tsv: 1 judged query ids are not in queries.jsonl (e.g. ['q7']); they are not "
        "evaluated")
    with pytest.raises(DataError, match=r"test.tsv: 1 judged query ids are not in queries.jsonl"):
        load_dataset(root, strict=True)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq7\td1\t1\n")
    with pytest.raises(DataError, match="none of the 1 judged query ids is in queries.jsonl "
                                        r"\(e.g. \['q7'\]\); nothing to evaluate"):
        load_dataset(root)


def test_qrels_and_runs_round_trip(tmp_path, data_dir):
    trec = tmp_path / "qrels.txt"
    trec.write_text("1 0 d1 2\n1 0 d2 0\n2 0 d3 1\n")
    assert load_qrels(trec) == {"1": {"d1": 2, "d2": 0}, "2": {"d3": 1}}
    assert load_qrels(data_dir / "cranfield" / "qrels" / "test.tsv")["1"]["184"] == 3
    run = {"1": {"d1": 0.5, "d2": 1.5}, "2": {"d3": 0.1}}
    write_run(run, tmp_path / "run.trec")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines[0] == "1 Q0 d2 1 1.500000 intentrank"
    assert load_run(tmp_path / "run.trec") == run
    (tmp_path / "bad.trec").write_text("1 Q0 d1 1 high tag\n")
    with pytest.raises(DataError, match=r"bad.trec:1 \(field 'score'\)"):
        load_run(tmp_path / "bad.trec")


def test_chunking_keeps_parent_ids():
    doc = Document("p", " ".join(f"w{i}" for i in range(25)), title="T")
    chunks = list(chunk_documents([doc, Document("s", "short")], size=10, overlap=2))
    assert [c.id for c in chunks] == ["p#0", "p#1", "p#2", "s"]
    assert all(c.parent_id == "p" and c.title == "T" for c in chunks[:3])
    assert chunks[1].text.split()[0] == "w8" and chunks[2].text.split()[-1] == "w24"
