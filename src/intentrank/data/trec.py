"""Relevance judgments (qrels) and runs in TREC and BEIR TSV formats."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from intentrank.data.readers import iter_lines, open_text_writer
from intentrank.errors import DataError

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


def load_qrels(path: str | Path, encoding: str = "utf-8") -> Qrels:
    """Read qrels: BEIR TSV (``query-id corpus-id score`` with a header) or TREC
    (``qid iter docid rel``), plain or compressed."""
    path = Path(path)
    qrels: Qrels = {}
    for lineno, line in iter_lines(path, encoding):
        parts = line.split()
        if not parts:
            continue
        if lineno == 1 and not parts[-1].lstrip("-").isdigit():
            continue  # header line
        if len(parts) == 3:
            qid, docid, rel = parts
        elif len(parts) == 4:
            qid, _, docid, rel = parts
        else:
            raise DataError(f"expected 3 (BEIR) or 4 (TREC) columns, got {len(parts)}", path,
                            lineno)
        try:
            grade = int(float(rel))
        except ValueError:
            raise DataError(f"relevance {rel!r} is not a number", path, lineno,
                            "relevance") from None
        qrels.setdefault(qid, {})[docid] = grade
    if not qrels:
        raise DataError("no judgments found", path)
    return qrels


def load_run(path: str | Path, encoding: str = "utf-8") -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``)."""
    path = Path(path)
    run: Run = {}
    for lineno, line in iter_lines(path, encoding):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise DataError(f"expected 6 columns (qid Q0 docid rank score tag), got {len(parts)}",
                            path, lineno)
        try:
            score = float(parts[4])
        except ValueError:
            raise DataError(f"score {parts[4]!r} is not a number", path, lineno,
                            "score") from None
        run.setdefault(parts[0], {})[parts[2]] = score
    return run


def write_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "intentrank"
              ) -> None:
    """Write a TREC run file, documents ordered by score (ties by doc id) per query."""
    with open_text_writer(path) as fh:
        for qid in run:
            ordered = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))
            for rank, (docid, score) in enumerate(ordered, start=1):
                fh.write(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")
