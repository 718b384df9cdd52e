"""Property tests: whatever bytes or structures the readers get, they give a valid result or a
DataError, never another exception (and never a wrong value for well-formed input)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intentrank.data import readers
from intentrank.data.corpus import iter_corpus, load_queries
from intentrank.data.dataset import load_dataset
from intentrank.data.readers import iter_csv, iter_jsonl, iter_lines, iter_physical_lines
from intentrank.data.trec import load_qrels, load_run
from intentrank.errors import DataError

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def outcome(fn: Callable[[], Any]) -> Any:
    """The result of ``fn``, or the DataError it raised; any other exception fails the test."""
    try:
        return fn()
    except DataError as exc:
        assert str(exc)  # a message, always
        return exc


def in_tmp(name: str, data: bytes, fn: Callable[[Path], Any]) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        return outcome(lambda: fn(path))


# Text made of the characters that matter to the formats, plus anything else.
SPECIAL = st.sampled_from(list(',"\t\n\r \\{}[]:\x00\ufeff\u2028é') + ["\r\n"])
TEXTISH = st.lists(st.one_of(SPECIAL, st.text(max_size=4)), max_size=60).map("".join)
ENCODINGS = st.sampled_from(["utf-8", "latin-1", "utf-16", "utf-8-sig", "cp1252", "ascii"])


def encoded(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="replace")


RAW = st.one_of(st.binary(max_size=400), st.builds(encoded, TEXTISH, ENCODINGS))

JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                        st.text(max_size=8))
JSON = st.recursive(JSON_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)
FIELD = st.sampled_from(["_id", "id", "text", "title", "abstract", "query", "metadata", "x"])
RECORD = st.dictionaries(FIELD, JSON, max_size=4)


def jsonl(records: list[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")


# --- line splitting and decoding ---------------------------------------------------------


@SETTINGS
@given(text=TEXTISH, encoding=st.sampled_from(["utf-8", "utf-16", "utf-16-le", "latin-1"]),
       block=st.integers(1, 9), bom=st.booleans())
def test_lines_equal_python_universal_newlines_at_any_block_size(text, encoding, block, bom):
    data = encoded(("\ufeff" if bom else "") + text, encoding)
    expected = io.TextIOWrapper(io.BytesIO(data), encoding=encoding, errors="strict",
                                newline="").readlines()
    if expected:
        expected[0] = expected[0].removeprefix("\ufeff")
        expected = [x for x in expected if x]
    saved = readers._BLOCK
    readers._BLOCK = block  # tiny blocks: characters and "\r\n" split between reads
    try:
        got = in_tmp("t.txt", data, lambda p: list(iter_physical_lines(p, encoding)))
    finally:
        readers._BLOCK = saved
    assert [t for _, t in got] == expected
    assert [n for n, _ in got] == list(range(1, len(got) + 1))


@SETTINGS
@given(lines=st.lists(st.text(alphabet="ab\u00e9\u4e2d", max_size=6), min_size=1, max_size=6),
       bad_line=st.integers(0, 5), block=st.integers(1, 9))
def test_decode_error_names_the_right_line_at_any_block_size(lines, bad_line, block):
    bad_line %= len(lines)
    data = b"".join(line.encode("utf-8") + (b"\xff" if i == bad_line else b"") + b"\n"
                    for i, line in enumerate(lines))
    saved = readers._BLOCK
    readers._BLOCK = block
    try:
        got = in_tmp("t.txt", data, lambda p: list(iter_lines(p)))
    finally:
        readers._BLOCK = saved
    assert isinstance(got, DataError) and got.line == bad_line + 1, got
    assert f"at byte {len(lines[bad_line].encode())} of the line" in str(got)


# --- JSONL --------------------------------------------------------------------------------


@SETTINGS
@given(data=RAW, encoding=ENCODINGS)
def test_jsonl_reader_on_arbitrary_bytes(data, encoding):
    in_tmp("c.jsonl", data, lambda p: list(iter_jsonl(p, encoding)))
    in_tmp("c.jsonl", data, lambda p: list(iter_corpus(p, encoding)))
    in_tmp("q.jsonl", data, lambda p: load_queries(p, encoding))


@SETTINGS
@given(records=st.lists(st.one_of(RECORD, JSON), max_size=6))
def test_corpus_and_queries_on_arbitrary_json_records(records):
    data = jsonl(records)
    docs = in_tmp("c.jsonl", data, lambda p: list(iter_corpus(p)))
    if not isinstance(docs, DataError):
        assert docs and all(isinstance(d.text, str) and d.id and d.id.split() == [d.id]
                            for d in docs)
        assert len({d.id for d in docs}) == len(docs)
    queries = in_tmp("q.jsonl", data, lambda p: load_queries(p))
    if not isinstance(queries, DataError):
        assert queries and all(q.text.strip() for q in queries.values())


# --- CSV ----------------------------------------------------------------------------------


@SETTINGS
@given(data=RAW, name=st.sampled_from(["c.csv", "c.tsv", "q.csv"]))
def test_csv_reader_on_arbitrary_bytes(data, name):
    rows = in_tmp(name, data, lambda p: list(iter_csv(p)))
    if not isinstance(rows, DataError):
        assert all(None not in r and None not in r.values() for _, r in rows)
        lines = [n for n, _ in rows]
        assert lines == sorted(set(lines)) and all(n >= 2 for n in lines)
    in_tmp(name, data, lambda p: list(iter_corpus(p)))
    in_tmp(name, data, lambda p: load_queries(p))


CELL = st.text(alphabet=st.sampled_from(list('ab ,"\n\r\t\'é')), max_size=8)


@SETTINGS
@given(header=st.lists(st.text(alphabet="abcxyz_", min_size=1, max_size=5), min_size=1,
                       max_size=4, unique=True),
       body=st.lists(st.lists(CELL, min_size=4, max_size=4), max_size=6),
       delimiter=st.sampled_from([",", "\t"]), crlf=st.booleans(), bom=st.booleans())
def test_csv_written_by_the_csv_module_reads_back_exactly(header, body, delimiter, crlf, bom):
    rows = [r[: len(header)] for r in body]
    rows = [r for r in rows if any(c.strip() for c in r) and r != [""]]  # blank lines skip
    buf = io.StringIO()
    # Python 3.11's writer leaves a lone "\r" unquoted when the line terminator is "\n"; such
    # a file is ambiguous (any reader with universal newlines ends the record there), so quote
    # every field then.
    carriage = any("\r" in c for r in rows for c in r)
    csv.writer(buf, delimiter=delimiter, lineterminator="\r\n" if crlf else "\n",
               quoting=csv.QUOTE_ALL if carriage else csv.QUOTE_MINIMAL
               ).writerows([header, *rows])
    data = (("\ufeff" if bom else "") + buf.getvalue()).encode("utf-8")
    name = "c.tsv" if delimiter == "\t" else "c.csv"
    got = in_tmp(name, data, lambda p: list(iter_csv(p)))
    assert not isinstance(got, DataError), got
    assert [list(r.values()) for _, r in got] == rows
    assert [list(r) for _, r in got] == [header] * len(rows)


# --- TREC qrels and runs --------------------------------------------------------------------

TOKEN = st.one_of(
    st.sampled_from(["q1", "q2", "d1", "d2", "0", "Q0", "1", "2", "-1", "0.5", "1.0", "2e0",
                     "nan", "inf", "-inf", "1e999", "1_0", "score", "query-id", "tag", "x"]),
    st.from_regex(r"-?[0-9]{1,3}(\.[0-9]{1,2})?([eE]-?[0-9]{1,3})?", fullmatch=True),
    st.text(min_size=1, max_size=4).filter(lambda t: not any(c.isspace() for c in t)))
LINE = st.lists(TOKEN, max_size=7).map(" ".join)
TREC_TEXT = st.lists(st.one_of(LINE, st.just(""), st.sampled_from(["\t", " \r"])),
                     max_size=8).map("\n".join)


@SETTINGS
@given(text=TREC_TEXT, raw=RAW, round_grades=st.booleans(), use_raw=st.booleans())
def test_qrels_and_run_readers(text, raw, round_grades, use_raw):
    data = raw if use_raw else text.encode("utf-8")
    notes: list[str] = []
    qrels = in_tmp("q.txt", data, lambda p: load_qrels(p, round_grades=round_grades,
                                                      warnings=notes))
    if not isinstance(qrels, DataError):
        assert qrels and all(type(g) is int for judged in qrels.values()
                             for g in judged.values())
    run = in_tmp("r.trec", data, lambda p: load_run(p))
    if not isinstance(run, DataError):
        assert run and all(isinstance(s, float) and s == s and abs(s) != float("inf")
                           for ranked in run.values() for s in ranked.values())


@SETTINGS
@given(qrels=st.dictionaries(st.from_regex(r"[a-z0-9_-]{1,6}", fullmatch=True),
                             st.dictionaries(st.from_regex(r"[A-Za-z0-9#:]{1,6}",
                                                           fullmatch=True),
                                             st.integers(-5, 2**31 - 1), min_size=1,
                                             max_size=4), min_size=1, max_size=4),
       trec=st.booleans(), header=st.booleans())
def test_qrels_round_trip(qrels, trec, header):
    lines = ["query-id\tcorpus-id\tscore"] if header and not trec else []
    for q, judged in qrels.items():
        for d, g in judged.items():
            lines.append(f"{q} 0 {d} {g}" if trec else f"{q}\t{d}\t{g}")
    got = in_tmp("q.tsv", ("\n".join(lines) + "\n").encode(), lambda p: load_qrels(p))
    assert got == qrels


# --- BEIR dataset directories ------------------------------------------------------------------

IDS = st.sampled_from(["q1", "q2", "d1", "d2", "x", "1"])
QREL_LINE = st.tuples(IDS, IDS, st.sampled_from(["0", "1", "2", "0.6", "nan", "2.0", "a"])
                      ).map("\t".join)
FILE = st.one_of(
    st.builds(jsonl, st.lists(st.fixed_dictionaries({"_id": IDS, "text": st.text(max_size=5)}),
                              max_size=4)),
    st.builds(lambda lines: ("query-id\tcorpus-id\tscore\n" + "\n".join(lines)).encode(),
              st.lists(QREL_LINE, max_size=5)),
    RAW,
    st.just(None),  # a directory in place of the file
)
LAYOUT_NAMES = ["corpus.jsonl", "corpus.jsonl.gz", "corpus.csv", "queries.jsonl", "queries.tsv",
                "qrels/test.tsv", "qrels/train.tsv", "qrels/test.tsv.gz", "qrels/dev.txt"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(files=st.dictionaries(st.sampled_from(LAYOUT_NAMES), FILE, max_size=6),
       strict=st.booleans(), round_grades=st.booleans(), gz=st.booleans(),
       doc_ids=st.sets(IDS, max_size=3))
def test_beir_directories(files, strict, round_grades, gz, doc_ids):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ds"
        root.mkdir()
        for name, data in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if data is None:
                path.mkdir()
            else:
                path.write_bytes(gzip.compress(data) if gz and name.endswith(".gz") else data)
        ds = outcome(lambda: load_dataset(root, strict=strict, round_grades=round_grades))
        if isinstance(ds, DataError):
            return
        assert all(isinstance(w, str) for w in ds.warnings)
        for split in ds.splits:
            queries, qrels = outcome(lambda s=split: ds.split(s))
            assert [q.id for q in queries] == list(qrels)
            assert all(q in ds.queries for q in qrels)
        outcome(lambda: ds.check_qrels(doc_ids, strict=strict))
        outcome(lambda: list(ds.corpus()))
        outcome(lambda: ds.split("nope"))


# --- .gz and .zip wrappers ----------------------------------------------------------------


def zipped(data: bytes, method: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        zf.writestr("c.jsonl", data)
    return buf.getvalue()


PAYLOAD = st.one_of(st.binary(max_size=300), st.builds(jsonl, st.lists(RECORD, max_size=5)))


@SETTINGS
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".jsonl.gz", ".jsonl.zip",
                                                             ".csv.gz", ".csv.zip"]))
def test_random_bytes_named_as_archives(data, suffix):
    for prefix in (b"", b"\x1f\x8b\x08\x00", b"PK\x03\x04"):
        in_tmp("c" + suffix, prefix + data, lambda p: list(iter_lines(p)))
        in_tmp("c" + suffix, prefix + data, lambda p: list(iter_corpus(p)))


@SETTINGS
@given(payload=PAYLOAD, kind=st.sampled_from(["gz", "zip-deflate", "zip-stored"]),
       cut=st.floats(0, 1, exclude_max=True), flips=st.lists(
           st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), max_size=3))
def test_truncated_and_damaged_real_archives(payload, kind, cut, flips):
    if kind == "gz":
        whole = gzip.compress(payload)
    else:
        whole = zipped(payload, zipfile.ZIP_DEFLATED if kind == "zip-deflate"
                       else zipfile.ZIP_STORED)
    suffix = ".jsonl.gz" if kind == "gz" else ".jsonl.zip"
    # Intact: reads back exactly what was written (as lines).
    lines = in_tmp("c" + suffix, whole, lambda p: [t for _, t in iter_lines(p)])
    expected = in_tmp("c.jsonl", payload, lambda p: [t for _, t in iter_lines(p)])
    assert type(lines) is type(expected)
    if not isinstance(expected, DataError):
        assert lines == expected
    # Truncated: a gzip always fails; a zip fails or (rarely) still finds its directory.
    short = whole[: int(cut * len(whole))]
    got = in_tmp("c" + suffix, short, lambda p: list(iter_lines(p)))
    if kind == "gz":
        assert isinstance(got, DataError)
    # Damaged bytes anywhere.
    damaged = bytearray(whole)
    for where, xor in flips:
        damaged[int(where * len(damaged))] ^= xor
    in_tmp("c" + suffix, bytes(damaged), lambda p: list(iter_corpus(p)))
