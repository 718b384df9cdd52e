"""Relevance judgments (qrels) and runs in TREC and BEIR TSV formats.

Grades follow trec_eval: integers. A grade written as an exact integral number ("2", "2.0",
"2e0") is accepted; any other value ("0.6", "1.5") is a :class:`DataError` unless
``round_grades=True``, which rounds it to the nearest integer, halves away from zero
(0.5 -> 1, 1.5 -> 2, 2.5 -> 3, -0.5 -> -1), and reports how many were rounded. Non-finite
grades (nan, inf) and run scores are always an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from intentrank.data.readers import atomic_write, iter_lines, open_text_writer
from intentrank.errors import DataError

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]

MAX_GRADE = 2**31 - 1  # trec_eval reads grades into a C long; anything larger is a typo
# A first line is a header only when its last column has a header-like name or its first
# column names the query id; "q1 d1 high" is bad data, not a header.
_HEADER_LAST = {"score", "scores", "relevance", "rel", "label", "grade", "judgment",
                "judgement", "relevancy", "qrel", "qrels"}
_HEADER_FIRST = {"query-id", "query_id", "queryid", "qid", "query", "topic", "topic-id",
                 "topic_id", "topicid", "q-id"}
_WS = re.compile(r"\s")


# Plain ASCII decimal notation (what trec_eval's atoi/atof read correctly): no "1_0", no
# non-ASCII digits, which Python's float() and Decimal() would otherwise accept.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
                     re.IGNORECASE | re.ASCII)


def _decimal(text: str) -> Decimal | None:
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return Decimal(text)
    except (InvalidOperation, ValueError, ArithmeticError):
        return None


def _is_header(parts: list[str]) -> bool:
    return _decimal(parts[-1]) is None and (
        parts[-1].lower() in _HEADER_LAST or parts[0].lower() in _HEADER_FIRST)


def parse_grade(text: str, path: str | Path | None = None, line: int | None = None,
                round_grades: bool = False) -> tuple[int, bool]:
    """``(grade, rounded)`` for one relevance value, or a DataError naming path and line."""
    value = _decimal(text)
    if value is None:
        raise DataError(f"relevance {text!r} is not a number", path, line, "relevance")
    if not value.is_finite():
        raise DataError(f"relevance {text!r} is not a finite number", path, line, "relevance")
    if value.copy_abs() > MAX_GRADE:  # copy_abs: exact, no context to overflow
        raise DataError(f"relevance {text!r} is out of range (grades are integers up to "
                        f"{MAX_GRADE})", path, line, "relevance")
    try:
        integral = value.to_integral_value(rounding=ROUND_HALF_UP)
    except ArithmeticError:
        raise DataError(f"relevance {text!r} is not a number", path, line,
                        "relevance") from None
    if integral == value:
        return int(integral), False
    if not round_grades:
        raise DataError(
            f"relevance {text!r} is not an integer grade (trec_eval grades are integers, and "
            f"truncating would change the judgments); fix the file, or round explicitly with "
            f"round_grades=True (CLI: --round-grades), which rounds halves away from zero",
            path, line, "relevance")
    return int(integral), True


def load_qrels(path: str | Path, encoding: str = "utf-8", round_grades: bool = False, *,
               warnings: list[str] | None = None) -> Qrels:
    """Read qrels: BEIR TSV (``query-id corpus-id score`` with a header) or TREC
    (``qid iter docid rel``), plain or compressed.

    A header is recognised only on the first non-blank line, and only when its last column is
    not a number and is named like a grade column (score, relevance, rel, label, grade) or its
    first column like a query id (query-id, qid, topic). Grades must be integers (see the
    module docstring); ``round_grades=True`` rounds other finite values, halves away from zero,
    and appends a note with the count to ``warnings`` when given. The same (query, document)
    pair judged twice with different grades is an error; repeated identical lines are merged.
    """
    path = Path(path)
    qrels: Qrels = {}
    first_line: dict[tuple[str, str], int] = {}
    rounded: list[tuple[int, str, int]] = []
    seen_content = False
    for lineno, line in iter_lines(path, encoding):
        parts = line.split()
        if not parts:
            continue
        first = not seen_content
        seen_content = True
        if first and _is_header(parts):
            continue
        if len(parts) == 3:
            qid, docid, rel = parts
        elif len(parts) == 4:
            qid, _, docid, rel = parts
        else:
            raise DataError(f"expected 3 (BEIR) or 4 (TREC) columns, got {len(parts)}", path,
                            lineno)
        if first and _decimal(rel) is None and not any(c.isdigit() for c in rel):
            raise DataError(f"relevance {rel!r} is not a number (a header line must name its "
                            f"last column 'score')", path, lineno, "relevance")
        grade, was_rounded = parse_grade(rel, path, lineno, round_grades)
        if was_rounded:
            rounded.append((lineno, rel, grade))
        judged = qrels.setdefault(qid, {})
        if docid in judged and judged[docid] != grade:
            raise DataError(f"document {docid!r} is judged twice for query {qid!r} with "
                            f"different grades ({judged[docid]} on line "
                            f"{first_line[qid, docid]}, {grade} here)", path, lineno,
                            "relevance")
        first_line.setdefault((qid, docid), lineno)
        judged[docid] = grade
    if not qrels:
        raise DataError("no judgments found", path)
    if rounded and warnings is not None:
        ln, rel, grade = rounded[0]
        warnings.append(f"{path}: {len(rounded)} non-integer grade(s) rounded to the nearest "
                        f"integer, halves away from zero (e.g. line {ln}: {rel!r} -> {grade})")
    return qrels


def load_run(path: str | Path, encoding: str = "utf-8") -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``).

    A score that is not a finite number, a document listed twice for one query and a file with
    no results raise a :class:`DataError` naming the file and line.
    """
    path = Path(path)
    run: Run = {}
    first_line: dict[tuple[str, str], int] = {}
    for lineno, line in iter_lines(path, encoding):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise DataError(f"expected 6 columns (qid Q0 docid rank score tag), got {len(parts)}",
                            path, lineno)
        if not _NUMBER.fullmatch(parts[4]):
            raise DataError(f"score {parts[4]!r} is not a number", path, lineno, "score")
        score = float(parts[4])
        if not math.isfinite(score):
            raise DataError(f"score {parts[4]!r} is not a finite number", path, lineno, "score")
        qid, docid = parts[0], parts[2]
        ranked = run.setdefault(qid, {})
        if docid in ranked:
            raise DataError(f"document {docid!r} is listed twice for query {qid!r} (first on "
                            f"line {first_line[qid, docid]})", path, lineno, "docid")
        first_line[qid, docid] = lineno
        ranked[docid] = score
    if not run:
        raise DataError("no results found (the run file is empty)", path)
    return run


def ranked_scores(ranked: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``{doc_id: score}`` in the given (ranking) order with strictly decreasing scores.

    trec_eval (and ir-measures through it) re-sorts a run by score, ties by doc id, so a
    ranking with tied (or rising) scores would be evaluated in another order than the one
    returned. Each score is kept unless it is not below the one before it; then it becomes
    the next value below that one, so the order is the given one and scores move by the
    least amount. trec_eval holds scores as single-precision floats, so "below" is compared
    and stepped in float32 (a double a hair below would read as a tie). Rankings keep their
    own scores; only runs (what is evaluated or written) use these.
    """
    out: dict[str, float] = {}
    prev: np.float32 | None = None
    for doc_id, score in ranked:
        value = float(score)
        single = np.float32(value)
        if prev is not None and not single < prev:
            single = np.nextafter(prev, np.float32(-np.inf))
            value = float(single)
        out[doc_id], prev = value, single
    return out


def write_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "intentrank"
              ) -> None:
    """Write a TREC run file: per query, documents by score, ties in the run's own order
    (a run from :func:`ranked_scores` is written in its ranking's order).

    Scores are written with six decimals, strictly decreasing as trec_eval reads them
    (single-precision floats): one that would read equal to (or above) the one before it is
    written just below it. Scores must be finite (DataError otherwise). Whitespace in ``tag``
    becomes ``_`` (a TREC run's columns are whitespace-separated).
    """
    tag = _WS.sub("_", tag) or "intentrank"
    with open_text_writer(path) as fh:
        for qid in run:
            ordered = sorted(run[qid].items(), key=lambda kv: -kv[1])  # stable: ties as given
            prev: int | None = None
            for rank, (docid, score) in enumerate(ordered, start=1):
                if not math.isfinite(score):
                    raise DataError(f"query {qid!r}: document {docid!r} has score {score}; a "
                                    f"run file needs finite scores", Path(path))
                micro = _below(round(float(score) * _MICRO), prev)
                prev = micro
                fh.write(f"{qid} Q0 {docid} {rank} {micro / _MICRO:.6f} {tag}\n")


_MICRO = 1_000_000  # write_run's six decimals


def _below(micro: int, prev: int | None) -> int:
    """``micro`` (millionths), lowered to read strictly below ``prev`` as a float32."""
    if prev is None:
        return micro
    micro = min(micro, prev - 1)
    top = np.float32(prev / _MICRO)
    if np.float32(micro / _MICRO) < top:
        return micro
    return math.floor(float(np.nextafter(top, np.float32(-np.inf))) * _MICRO)


def write_qrels(rows: Iterable[tuple[str, str, int]], path: Path, *,
                keep_unchanged: bool = False) -> None:
    """BEIR qrels TSV: the header ``query-id corpus-id score``, then a line per ``(query id,
    doc id, grade)``; its folder made, written by :func:`~intentrank.data.readers.atomic_write`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [("query-id", "corpus-id", "score"), *rows]
    atomic_write(path, "".join(f"{q}\t{d}\t{g}\n" for q, d, g in lines),
                 keep_unchanged=keep_unchanged)
