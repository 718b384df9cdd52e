"""Corpus and query loading from BEIR-style JSONL or CSV, streamed, with optional chunking."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from intentrank.data.readers import iter_csv, iter_jsonl
from intentrank.errors import DataError
from intentrank.types import Document, Query

ID_FIELDS = ("_id", "id", "docid", "doc_id")
TEXT_FIELDS = ("text", "contents", "body", "abstract")
QUERY_ID_FIELDS = ("_id", "id", "qid", "query_id")
QUERY_TEXT_FIELDS = ("text", "query", "question")


def _records(path: Path, encoding: str) -> Iterator[tuple[int, dict[str, Any]]]:
    name = path.name.removesuffix(".gz").removesuffix(".zip")
    if name.endswith((".csv", ".tsv")):
        yield from iter_csv(path, encoding)
    elif name.endswith((".jsonl", ".json", ".ndjson")):
        yield from iter_jsonl(path, encoding)
    else:
        raise DataError("unknown corpus format: expected .jsonl or .csv (optionally .gz/.zip)",
                        path)


def _pick(record: dict[str, Any], fields: tuple[str, ...], path: Path, line: int,
          what: str) -> str:
    for f in fields:
        if f in record and record[f] is not None:
            return str(record[f])
    raise DataError(f"no {what} field (looked for {', '.join(fields)})", path, line)


def iter_corpus(path: str | Path, encoding: str = "utf-8") -> Iterator[Document]:
    """Stream documents; duplicate ids and records without an id or a text field raise with
    file and line. Documents whose text is empty are kept (real collections have them)."""
    path = Path(path)
    seen: dict[str, int] = {}
    for line, rec in _records(path, encoding):
        doc_id = _pick(rec, ID_FIELDS, path, line, "id").strip()
        if not doc_id:
            raise DataError("empty document id", path, line, "_id")
        if doc_id in seen:
            raise DataError(f"duplicate document id {doc_id!r} (first seen on line "
                            f"{seen[doc_id]})", path, line, "_id")
        seen[doc_id] = line
        text = _pick(rec, TEXT_FIELDS, path, line, "text")
        title = str(rec.get("title") or "")
        meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
        yield Document(id=doc_id, text=text, title=title, metadata=meta)


def load_queries(path: str | Path, encoding: str = "utf-8") -> dict[str, Query]:
    """Read queries (JSONL ``_id``/``text`` or CSV/TSV ``id``/``text``) keyed by id."""
    path = Path(path)
    out: dict[str, Query] = {}
    for line, rec in _records(path, encoding):
        qid = _pick(rec, QUERY_ID_FIELDS, path, line, "query id").strip()
        text = _pick(rec, QUERY_TEXT_FIELDS, path, line, "query text")
        if qid in out:
            raise DataError(f"duplicate query id {qid!r}", path, line, "_id")
        if not text.strip():
            raise DataError(f"query {qid!r} is empty", path, line, "text")
        out[qid] = Query(id=qid, text=text)
    return out


def chunk_documents(
    docs: Iterable[Document], size: int = 200, overlap: int = 50
) -> Iterator[Document]:
    """Split documents into passages of ``size`` words with ``overlap``; keep the parent id.

    A document no longer than ``size`` words is passed through unchanged. Passages are named
    ``<parent>#<n>`` and carry the parent's title.
    """
    if size < 1 or not 0 <= overlap < size:
        raise ValueError(f"need size >= 1 and 0 <= overlap < size, got {size}, {overlap}")
    step = size - overlap
    for doc in docs:
        words = doc.text.split()
        if len(words) <= size:
            yield doc
            continue
        starts = range(0, max(len(words) - overlap, 1), step)
        for n, start in enumerate(starts):
            yield Document(
                id=f"{doc.id}#{n}", text=" ".join(words[start:start + size]), title=doc.title,
                parent_id=doc.id, metadata=doc.metadata,
            )
