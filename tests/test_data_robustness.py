"""Bad input to the data readers: a DataError naming file, line and field, or a warning; never a
silent wrong result and never a bare library exception."""

from __future__ import annotations

import csv
import gzip
import io
import json
import struct
import zipfile
from pathlib import Path

import pytest

from intentrank.data.corpus import iter_corpus, load_queries
from intentrank.data.dataset import Dataset, load_dataset
from intentrank.data.readers import iter_csv, iter_jsonl, iter_lines, read_text
from intentrank.data.trec import load_qrels, load_run, write_run
from intentrank.errors import DataError
from intentrank.types import Query


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return path


def make_dataset(root: Path, qrels: str, queries: tuple[str, ...] = ("q1", "q2")) -> Path:
    write(root / "corpus.jsonl", "".join(json.dumps({"_id": d, "text": "x"}) + "\n"
                                         for d in ("d1", "d2")))
    write(root / "queries.jsonl", "".join(json.dumps({"_id": q, "text": "x"}) + "\n"
                                          for q in queries))
    write(root / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\n" + qrels)
    return root


# --- qrels grades -------------------------------------------------------------------------


def test_non_integer_grade_is_an_error_naming_file_line_field(tmp_path):
    path = write(tmp_path / "q.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0.6\n")
    with pytest.raises(DataError, match=r"q.tsv:3 \(field 'relevance'\): relevance '0.6' is not "
                                        r"an integer grade .*round_grades=True"):
        load_qrels(path)


def test_integral_float_grades_are_accepted(tmp_path):
    path = write(tmp_path / "q.txt", "q1 0 d1 2.0\nq1 0 d2 1e0\nq1 0 d3 -1\nq1 0 d4 +0\n")
    assert load_qrels(path) == {"q1": {"d1": 2, "d2": 1, "d3": -1, "d4": 0}}


def test_round_grades_rounds_halves_away_from_zero_and_counts(tmp_path):
    path = write(tmp_path / "q.txt", "q1 0 d1 0.5\nq1 0 d2 1.5\nq1 0 d3 2.5\nq1 0 d4 -0.5\n"
                                     "q1 0 d5 0.4\nq1 0 d6 2\n")
    notes: list[str] = []
    assert load_qrels(path, round_grades=True, warnings=notes) == {
        "q1": {"d1": 1, "d2": 2, "d3": 3, "d4": -1, "d5": 0, "d6": 2}}
    assert notes == [f"{path}: 5 non-integer grade(s) rounded to the nearest integer, halves "
                     f"away from zero (e.g. line 1: '0.5' -> 1)"]


@pytest.mark.parametrize("grade", ["nan", "NaN", "inf", "-inf", "Infinity"])
@pytest.mark.parametrize("round_grades", [False, True])
def test_non_finite_grades_are_always_an_error(tmp_path, grade, round_grades):
    path = write(tmp_path / "q.txt", f"q1 0 d1 1\nq1 0 d2 {grade}\n")
    with pytest.raises(DataError, match=rf"q.txt:2 \(field 'relevance'\): relevance '{grade}' "
                                        r"is not a finite number"):
        load_qrels(path, round_grades=round_grades)


@pytest.mark.parametrize("grade", ["1_0", "0x1", "\u0661", "1e999999999", "high"])
def test_grades_trec_eval_would_misread_are_errors(tmp_path, grade):
    path = write(tmp_path / "q.txt", f"q1 0 d0 1\nq1 0 d1 {grade}\n")
    with pytest.raises(DataError, match=r"q.txt:2 \(field 'relevance'\)"):
        load_qrels(path)


def test_first_line_with_fractional_grade_is_data_not_a_header(tmp_path):
    # The old header test (last field not all digits) swallowed this line silently.
    path = write(tmp_path / "q.tsv", "q1\td1\t0.6\nq1\td2\t1\n")
    with pytest.raises(DataError, match=r"q.tsv:1 \(field 'relevance'\): relevance '0.6'"):
        load_qrels(path)
    assert load_qrels(path, round_grades=True) == {"q1": {"d1": 1, "d2": 1}}
    nan_first = write(tmp_path / "n.tsv", "q1\td1\tnan\n")
    with pytest.raises(DataError, match="n.tsv:1 .*not a finite number"):
        load_qrels(nan_first)


def test_header_is_recognised_only_by_its_names(tmp_path):
    for header in ("query-id\tcorpus-id\tscore", "qid docid rel", "topic iter doc judgment"):
        path = write(tmp_path / "h.tsv", f"\n{header}\nq1 d1 1\n")
        assert load_qrels(path) == {"q1": {"d1": 1}}, header
    bad = write(tmp_path / "bad.tsv", "q1 d1 high\nq1 d2 1\n")
    with pytest.raises(DataError, match=r"bad.tsv:1 \(field 'relevance'\): relevance 'high' is "
                                        r"not a number \(a header line must name"):
        load_qrels(bad)
    late = write(tmp_path / "late.tsv", "q1 d1 1\nquery-id corpus-id score\n")
    with pytest.raises(DataError, match=r"late.tsv:2 \(field 'relevance'\)"):
        load_qrels(late)


def test_conflicting_duplicate_judgments(tmp_path):
    same = write(tmp_path / "same.txt", "q1 0 d1 1\nq1 0 d1 1\n")
    assert load_qrels(same) == {"q1": {"d1": 1}}
    conflict = write(tmp_path / "c.txt", "q1 0 d1 1\nq2 0 d1 0\nq1 0 d1 2\n")
    with pytest.raises(DataError, match=r"c.txt:3 \(field 'relevance'\): document 'd1' is judged "
                                        r"twice for query 'q1' with different grades \(1 on "
                                        r"line 1, 2 here\)"):
        load_qrels(conflict)


def test_qrels_column_count_and_empty_file(tmp_path):
    with pytest.raises(DataError, match=r"five.txt:1: expected 3 \(BEIR\) or 4 \(TREC\) columns, "
                                        r"got 5"):
        load_qrels(write(tmp_path / "five.txt", "q1 0 d1 1 x\n"))
    with pytest.raises(DataError, match="empty.txt: no judgments found"):
        load_qrels(write(tmp_path / "empty.txt", "\n  \n"))


# --- runs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["nan", "inf", "-inf", "1e999"])
def test_non_finite_run_scores(tmp_path, score):
    path = write(tmp_path / "r.trec", f"q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 {score} t\n")
    with pytest.raises(DataError, match=rf"r.trec:2 \(field 'score'\): score '{score}' is not a "
                                        r"finite number"):
        load_run(path)


def test_run_duplicates_bad_numbers_and_empty(tmp_path):
    dup = write(tmp_path / "dup.trec", "q1 Q0 d1 1 2 t\nq1 Q0 d1 2 1 t\n")
    with pytest.raises(DataError, match=r"dup.trec:2 \(field 'docid'\): document 'd1' is listed "
                                        r"twice for query 'q1' \(first on line 1\)"):
        load_run(dup)
    with pytest.raises(DataError, match=r"u.trec:1 \(field 'score'\): score '1_0'"):
        load_run(write(tmp_path / "u.trec", "q1 Q0 d1 1 1_0 t\n"))
    with pytest.raises(DataError, match=r"empty.trec: no results found"):
        load_run(write(tmp_path / "empty.trec", ""))


def test_write_run_keeps_the_six_columns(tmp_path):
    write_run({"q1": {"d1": 1.0}}, tmp_path / "r.trec", tag="my run")
    assert (tmp_path / "r.trec").read_text() == "q1 Q0 d1 1 1.000000 my_run\n"
    assert load_run(tmp_path / "r.trec") == {"q1": {"d1": 1.0}}


# --- CSV ----------------------------------------------------------------------------------


def test_quoted_multiline_fields_keep_their_newlines(tmp_path):
    path = write(tmp_path / "c.csv", 'id,title,text\r\nd1,T,"line one\r\nline two"\r\n\r\n'
                                     'd2,,"say ""hi""\nbye"\r\nd3,,plain\r\n')
    assert list(iter_csv(path)) == [
        (2, {"id": "d1", "title": "T", "text": "line one\r\nline two"}),
        (5, {"id": "d2", "title": "", "text": 'say "hi"\nbye'}),
        (7, {"id": "d3", "title": "", "text": "plain"}),
    ]
    assert [d.text for d in iter_corpus(path)][1] == 'say "hi"\nbye'


def test_csv_round_trip_through_gzip_and_zip(tmp_path):
    rows = [["id", "text"], ["a", "x,y"], ["b", 'q"uote\nnew\rline'], ["c", " lead"]]
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    data = ("\ufeff" + buf.getvalue()).encode("utf-8")
    write(tmp_path / "c.csv.gz", gzip.compress(data))
    with zipfile.ZipFile(tmp_path / "c.csv.zip", "w") as zf:
        zf.writestr("c.csv", data)
    for name in ("c.csv.gz", "c.csv.zip"):
        got = [list(r.values()) for _, r in iter_csv(tmp_path / name)]
        assert got == rows[1:], name


@pytest.mark.parametrize(("content", "message"), [
    ('id,text\nd1,"alpha\nd2,beta\n', r"c.csv:2: malformed CSV: a quoted field opened in this "
                                      r"record is never closed"),
    ('id,text\nd1,ok\nd2,"al"pha\n', r"c.csv:3: malformed CSV: ',' expected after '\"'"),
    ('id,text,title\nd1,alpha\n', r"c.csv:2: 2 fields, fewer than the 3 the header names"),
    ('id,text\nd1,alpha\nd2,beta,gamma\n', r"c.csv:3: 3 fields, more than the 2 the header"),
    ('id,text,text\nd1,a,b\n', r"c.csv:1: the header names column\(s\) \['text'\] more than "
                               r"once"),
    ('id,text\nd1,"multi\nline"\nd2,"open\n', r"c.csv:4: malformed CSV: a quoted field opened"),
])
def test_malformed_csv_names_the_line_where_the_record_starts(tmp_path, content, message):
    path = write(tmp_path / "c.csv", content)
    with pytest.raises(DataError, match=message):
        list(iter_csv(path))
    with pytest.raises(DataError, match=message):
        list(iter_corpus(path))


def test_csv_decode_error_names_the_physical_line(tmp_path):
    path = write(tmp_path / "c.csv", b'id,text\nd1,"one\ntwo"\nd2,caf\xe9\n')
    with pytest.raises(DataError, match=r"c.csv:4: not valid utf-8 at byte 6 of the line"):
        list(iter_csv(path))
    assert [r["text"] for _, r in iter_csv(path, encoding="latin-1")] == ["one\ntwo", "café"]


def test_tsv_queries(tmp_path):
    path = write(tmp_path / "queries.tsv", "id\ttext\nq1\tfirst, with a comma\n")
    assert load_queries(path)["q1"].text == "first, with a comma"


# --- paths, archives, encodings -----------------------------------------------------------


def test_directory_where_a_file_is_expected(tmp_path):
    for name in ("corpus.jsonl", "queries.jsonl", "qrels.tsv", "run.trec", "c.jsonl.gz",
                 "c.jsonl.zip"):
        (tmp_path / name).mkdir()
    msg = "is a directory, expected a file"
    with pytest.raises(DataError, match=f"corpus.jsonl: {msg}"):
        list(iter_corpus(tmp_path / "corpus.jsonl"))
    with pytest.raises(DataError, match=f"queries.jsonl: {msg}"):
        load_queries(tmp_path / "queries.jsonl")
    with pytest.raises(DataError, match=f"qrels.tsv: {msg}"):
        load_qrels(tmp_path / "qrels.tsv")
    with pytest.raises(DataError, match=f"run.trec: {msg}"):
        load_run(tmp_path / "run.trec")
    for name in ("c.jsonl.gz", "c.jsonl.zip"):
        with pytest.raises(DataError, match=f"{name}: {msg}"):
            list(iter_corpus(tmp_path / name))


def test_directory_inside_a_dataset(tmp_path):
    root = make_dataset(tmp_path / "ds", "q1\td1\t1\n")
    (root / "qrels" / "test.tsv").unlink()
    (root / "qrels" / "test.tsv").mkdir()
    with pytest.raises(DataError, match=r"test.tsv: is a directory, expected a file"):
        load_dataset(root)
    root = make_dataset(tmp_path / "ds2", "q1\td1\t1\n")
    (root / "corpus.jsonl").unlink()
    (root / "corpus.jsonl").mkdir()
    with pytest.raises(DataError, match=r"corpus.jsonl: is a directory, expected a file"):
        load_dataset(root)
    with pytest.raises(DataError, match=r"queries.jsonl: is a file, expected a dataset "
                                        r"directory"):
        load_dataset(root / "queries.jsonl")


def _jsonl_bytes(n: int) -> bytes:
    return b"".join(json.dumps({"_id": str(i), "text": f"doc {i} " * 8}).encode() + b"\n"
                    for i in range(n))


def test_truncated_gzip_names_file_and_line(tmp_path):
    data = gzip.compress(_jsonl_bytes(20000))
    path = write(tmp_path / "c.jsonl.gz", data[: len(data) // 2])
    with pytest.raises(DataError, match=r"c.jsonl.gz:\d+: the gzip data is corrupt or truncated "
                                        r"\(EOFError: Compressed file ended before the "
                                        r"end-of-stream marker was reached\)") as info:
        list(iter_corpus(path))
    assert info.value.line > 1000  # near where it breaks, not at the start
    short = write(tmp_path / "s.jsonl.gz", data[:5])  # inside the gzip header
    with pytest.raises(DataError, match=r"s.jsonl.gz:1: the gzip data is corrupt or truncated"):
        list(iter_corpus(short))


def test_fake_and_corrupt_gzip(tmp_path):
    fake = write(tmp_path / "fake.jsonl.gz", b'{"_id": "1", "text": "x"}\n')
    with pytest.raises(DataError, match=r"fake.jsonl.gz:1: not gzip data \(Not a gzipped file "
                                        r".*\); if the file is plain text, remove the .gz "
                                        r"suffix"):
        list(iter_corpus(fake))
    data = bytearray(gzip.compress(_jsonl_bytes(50)))
    data[-8] ^= 0xFF  # the CRC in the trailer
    with pytest.raises(DataError, match=r"crc.jsonl.gz:\d+: .*CRC check failed"):
        list(iter_corpus(write(tmp_path / "crc.jsonl.gz", bytes(data))))
    data = bytearray(gzip.compress(_jsonl_bytes(50)))
    data[20:30] = b"\xff" * 10  # the deflate stream
    with pytest.raises(DataError, match=r"bad.jsonl.gz:\d+: the gzip data is corrupt"):
        list(iter_corpus(write(tmp_path / "bad.jsonl.gz", bytes(data))))


def test_gzip_without_its_suffix_gets_a_hint(tmp_path):
    path = write(tmp_path / "corpus.jsonl", gzip.compress(_jsonl_bytes(3)))
    with pytest.raises(DataError, match=r"corpus.jsonl:1: not valid utf-8 .* the file looks like "
                                        r"gzip data: name it with a .gz suffix"):
        list(iter_corpus(path))


def _zip(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path.read_bytes()


def test_fake_truncated_and_corrupt_zip(tmp_path):
    with pytest.raises(DataError, match=r"fake.jsonl.zip: not a readable zip archive "
                                        r"\(zipfile.BadZipFile: File is not a zip file\)"):
        list(iter_corpus(write(tmp_path / "fake.jsonl.zip", b"not a zip at all\n")))
    data = _zip(tmp_path / "ok.jsonl.zip", {"c.jsonl": _jsonl_bytes(200)})
    with pytest.raises(DataError, match=r"t.jsonl.zip: not a readable zip archive"):
        list(iter_corpus(write(tmp_path / "t.jsonl.zip", data[: len(data) - 30])))
    stored = bytearray(_zip(tmp_path / "s.jsonl.zip", {"c.jsonl": _jsonl_bytes(200)},
                            zipfile.ZIP_STORED))
    stored[200] ^= 0x01  # a byte of the member's data: the CRC no longer matches
    with pytest.raises(DataError, match=r"crc.jsonl.zip:\d+: the zip data is corrupt or truncated "
                                        r"\(zipfile.BadZipFile: Bad CRC-32"):
        list(iter_corpus(write(tmp_path / "crc.jsonl.zip", bytes(stored))))
    deflated = bytearray(data)
    deflated[60:70] = b"\xff" * 10
    with pytest.raises(DataError, match=r"z.jsonl.zip:\d+: the zip data is corrupt or truncated"):
        list(iter_corpus(write(tmp_path / "z.jsonl.zip", bytes(deflated))))


def test_zip_member_count_and_encrypted_member(tmp_path):
    _zip(tmp_path / "two.jsonl.zip", {"a.jsonl": b"{}\n", "b.jsonl": b"{}\n"})
    with pytest.raises(DataError, match=r"two.jsonl.zip: zip must hold exactly one file, found 2"):
        list(iter_corpus(tmp_path / "two.jsonl.zip"))
    data = bytearray(_zip(tmp_path / "e.jsonl.zip", {"c.jsonl": _jsonl_bytes(3)}))
    # Mark the member encrypted in its local and central headers (flag bit 0).
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature) + offset
        data[at:at + 2] = struct.pack("<H", struct.unpack("<H", data[at:at + 2])[0] | 1)
    with pytest.raises(DataError, match=r"enc.jsonl.zip: the zip member 'c.jsonl' is encrypted; "
                                        r"unzip it with its password first"):
        list(iter_corpus(write(tmp_path / "enc.jsonl.zip", bytes(data))))


@pytest.mark.parametrize("encoding", ["utf-9", "hex", "zlib", ""])
def test_unknown_encoding_fails_before_reading(tmp_path, encoding):
    path = write(tmp_path / "c.jsonl", b'{"_id": "1", "text": "x"}\n')
    with pytest.raises(DataError, match=rf"^unknown encoding '{encoding}'"):
        list(iter_corpus(path, encoding=encoding))
    with pytest.raises(DataError, match=rf"^unknown encoding '{encoding}'"):
        load_qrels(path, encoding=encoding)
    with pytest.raises(DataError, match=rf"^unknown encoding '{encoding}'"):
        list(iter_csv(tmp_path / "missing.csv", encoding=encoding))


def test_utf16_and_decode_errors_far_into_a_file(tmp_path):
    text = "q1 0 d1 1\r\nq2 0 d2 2\r\n"
    path = write(tmp_path / "q.txt", text.encode("utf-16"))
    assert load_qrels(path, encoding="utf-16") == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    big = _jsonl_bytes(3000) + b'{"_id": "x", "text": "caf\xe9"}\n'  # well past one block
    with pytest.raises(DataError, match=r"big.jsonl:3001: not valid utf-8 at byte 25 of the line"):
        list(iter_jsonl(write(tmp_path / "big.jsonl", big)))
    cut = write(tmp_path / "cut.txt", "q1 0 d1 1\n".encode("utf-16") + b"\x00")
    with pytest.raises(DataError, match=r"cut.txt:2: the file ends inside a utf-16 character"):
        load_qrels(cut, encoding="utf-16")


def test_line_endings_and_bom(tmp_path):
    path = write(tmp_path / "t.txt", b"\xef\xbb\xbfa\r\nb\rc\n\nd")
    assert list(iter_lines(path)) == [(1, "a"), (2, "b"), (3, "c"), (4, ""), (5, "d")]
    assert read_text(path) == "a\nb\nc\n\nd"


# --- JSON records -------------------------------------------------------------------------


def test_json_that_python_cannot_parse_is_a_data_error(tmp_path):
    deep = write(tmp_path / "deep.jsonl", "[" * 100000 + "\n")
    with pytest.raises(DataError, match=r"deep.jsonl:1: malformed JSON \(nested too deeply\)"):
        list(iter_jsonl(deep))
    huge = write(tmp_path / "huge.jsonl", '{"_id": ' + "1" * 5000 + "}\n")
    with pytest.raises(DataError, match=r"huge.jsonl:1: malformed JSON"):
        list(iter_jsonl(huge))


def test_field_types(tmp_path):
    rows = [{"_id": 7, "title": ["A", "B"], "abstract": ["One.", "Two."]}]
    path = write(tmp_path / "c.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    doc = next(iter_corpus(path))
    assert (doc.id, doc.title, doc.text) == ("7", "A B", "One. Two.")
    for record, message in [
        ({"_id": 1.5, "text": "x"}, r"c.jsonl:1 \(field '_id'\): document id must be a string or "
                                    r"an integer, got float"),
        ({"_id": True, "text": "x"}, r"document id must be a string or an integer, got bool"),
        ({"_id": "d 1", "text": "x"}, r"c.jsonl:1 \(field '_id'\): document id 'd 1' contains "
                                      r"whitespace"),
        ({"_id": "  ", "text": "x"}, r"c.jsonl:1 \(field '_id'\): empty document id"),
        ({"_id": "a", "text": {"t": 1}}, r"c.jsonl:1 \(field 'text'\): expected a string"),
        ({"_id": "a", "text": "x", "title": 3}, r"c.jsonl:1 \(field 'title'\): expected a "
                                                r"string"),
        ({"_id": "a"}, r"c.jsonl:1: no text field \(looked for text, contents, body, abstract; "
                       r"the record has \['_id'\]\)"),
    ]:
        write(path, json.dumps(record) + "\n")
        with pytest.raises(DataError, match=message):
            list(iter_corpus(path))
    write(path, json.dumps({"_id": "q 1", "text": "x"}) + "\n")
    with pytest.raises(DataError, match=r"query id 'q 1' contains whitespace"):
        load_queries(path)


def test_empty_corpus_and_queries(tmp_path):
    with pytest.raises(DataError, match=r"c.jsonl: no documents found"):
        list(iter_corpus(write(tmp_path / "c.jsonl", "\n\n")))
    with pytest.raises(DataError, match=r"q.csv: no queries found"):
        load_queries(write(tmp_path / "q.csv", "id,text\n"))


# --- datasets: unknown ids warn, strict raises ----------------------------------------------


def test_unknown_query_ids_are_dropped_with_a_warning(tmp_path):
    root = make_dataset(tmp_path / "ds", "q1\td1\t1\nx\td1\t1\ny\td2\t1\nq2\td2\t1\n")
    ds = load_dataset(root)
    queries, qrels = ds.split("test")
    assert [q.id for q in queries] == ["q1", "q2"] and set(qrels) == {"q1", "q2"}
    assert ds.warnings == [f"{root / 'qrels' / 'test.tsv'}: 2 judged query ids are not in "
                           f"queries.jsonl (e.g. ['x', 'y']); they are not evaluated"]
    with pytest.raises(DataError, match=r"test.tsv: 2 judged query ids are not in queries.jsonl "
                                        r"\(e.g. \['x', 'y'\]\); strict mode refuses to drop "
                                        r"their judgments"):
        load_dataset(root, strict=True)


def test_split_whose_queries_are_all_unknown_is_an_error(tmp_path):
    root = make_dataset(tmp_path / "ds", "x\td1\t1\n")
    with pytest.raises(DataError, match=r"test.tsv: none of the 1 judged query ids is in "
                                        r"queries.jsonl \(e.g. \['x'\]\); nothing to evaluate"):
        load_dataset(root)


def test_unknown_document_ids_warn_and_stay_judged(tmp_path):
    root = make_dataset(tmp_path / "ds", "q1\td1\t1\nq1\tgone\t2\nq2\tgone2\t0\n")
    ds = load_dataset(root)
    messages = ds.check_qrels({"d1", "d2"})
    assert messages == [f"{root / 'qrels' / 'test.tsv'}: 2 of 3 judged document ids are not in "
                        f"the index (e.g. ['gone', 'gone2']); their 1 relevant judgment(s) are "
                        f"kept, so they count as relevant documents the system cannot retrieve "
                        f"(as in trec_eval)"]
    assert ds.check_qrels({"d1", "d2"}) == messages and ds.warnings == messages  # no repeats
    assert ds.split("test")[1]["q1"] == {"d1": 1, "gone": 2}
    with pytest.raises(DataError, match=r"test.tsv: 2 of 3 judged document ids are not in the "
                                        r"index \(e.g. \['gone', 'gone2'\]\); strict mode "
                                        r"refuses to evaluate against documents the index "
                                        r"lacks"):
        ds.check_qrels({"d1", "d2"}, strict=True)


def test_split_never_raises_key_error(tmp_path):
    ds = Dataset(tmp_path, tmp_path / "corpus.jsonl", {"q1": Query("q1", "x")},
                 {"test": {"q1": {"d1": 1}, "q9": {"d1": 1}}, "only": {"q9": {"d": 1}}})
    queries, qrels = ds.split("test")
    assert [q.id for q in queries] == ["q1"] and qrels == {"q1": {"d1": 1}}
    assert "1 judged query ids are not in the queries (e.g. ['q9'])" in ds.warnings[0]
    with pytest.raises(DataError, match="nothing to evaluate"):
        ds.split("only")
    with pytest.raises(DataError, match=r"no qrels for split 'dev'; available: \['only', 'test'\]"):
        ds.split("dev")
    assert ds.sample("test", 1)[1] == {"q1": {"d1": 1}}


def test_round_grades_through_load_dataset(tmp_path):
    root = make_dataset(tmp_path / "ds", "q1\td1\t0.6\nq2\td2\t1\n")
    with pytest.raises(DataError, match=r"test.tsv:2 \(field 'relevance'\): relevance '0.6'"):
        load_dataset(root)
    ds = load_dataset(root, round_grades=True)
    assert ds.qrels["test"] == {"q1": {"d1": 1}, "q2": {"d2": 1}}
    assert ds.warnings == [f"{root / 'qrels' / 'test.tsv'}: 1 non-integer grade(s) rounded to "
                           f"the nearest integer, halves away from zero (e.g. line 2: '0.6' -> 1)"]


def test_dataset_layout_problems(tmp_path):
    root = make_dataset(tmp_path / "ds", "q1\td1\t1\n")
    write(root / "qrels" / "test.txt", "q1 0 d1 1\n")
    with pytest.raises(DataError, match=r"test.txt: two qrels files for split 'test' \(test.tsv "
                                        r"and test.txt\); keep one"):
        load_dataset(root)
    (root / "qrels" / "test.txt").unlink()
    write(root / "qrels" / "dev.csv", "q1,d1,1\n")
    write(root / "qrels" / ".DS_Store", b"\x00")
    ds = load_dataset(root)
    assert ds.splits == ["test"]
    assert ds.warnings == [f"{root / 'qrels'}: ignored file(s) ['dev.csv'] (qrels files end in "
                           f".tsv, .tsv.gz, .txt, .txt.gz, .qrels, .qrels.gz)"]
    with pytest.raises(DataError, match="dataset directory not found"):
        load_dataset(tmp_path / "nowhere")
