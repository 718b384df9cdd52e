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
_CORE_FIELDS = frozenset((*ID_FIELDS, "title"))  # not metadata: every other field is


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
          what: str) -> tuple[str, Any]:
    for f in fields:
        if f in record and record[f] is not None:
            return f, record[f]
    raise DataError(f"no {what} field (looked for {', '.join(fields)}; the record has "
                    f"{sorted(record)[:10]})", path, line)


def _id(record: dict[str, Any], fields: tuple[str, ...], path: Path, line: int,
        what: str, label: str) -> str:
    """The id in the first of ``fields`` the record has (see :func:`check_id`)."""
    name, value = _pick(record, fields, path, line, what)
    return check_id(value, label, path, line, name)


def check_id(value: Any, label: str, path: Path, line: int, name: str) -> str:
    """``value`` as an id: a string or an integer, non-empty, without whitespace (TREC runs
    and qrels are whitespace-separated, so such an id could never be judged or written);
    otherwise a DataError naming ``path``, ``line`` and the field ``name``."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(f"{label} must be a string or an integer, got {type(value).__name__} "
                        f"{value!r:.40}", path, line, name)
    text = str(value).strip()
    if not text:
        raise DataError(f"empty {label}", path, line, name)
    if text.split() != [text]:
        raise DataError(f"{label} {text!r} contains whitespace, which TREC qrels and runs "
                        f"cannot hold", path, line, name)
    return text


def _text(value: Any, path: Path, line: int, name: str) -> str:
    """A text field: a string, or a list of strings (sentences), joined by spaces."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    raise DataError(f"expected a string (or a list of strings), got {type(value).__name__} "
                    f"{value!r:.40}", path, line, name)


def iter_corpus(path: str | Path, encoding: str = "utf-8") -> Iterator[Document]:
    """Stream documents; duplicate ids and records without an id or a text field raise with
    file and line. Documents whose text is empty are kept (real collections have them); a file
    with no documents at all is an error. A text that is a list of strings (sentences) is
    joined by spaces; any other non-string text, title or id raises."""
    path = Path(path)
    seen: dict[str, int] = {}
    for line, rec in _records(path, encoding):
        doc_id = _id(rec, ID_FIELDS, path, line, "id", "document id")
        if doc_id in seen:
            raise DataError(f"duplicate document id {doc_id!r} (first seen on line "
                            f"{seen[doc_id]})", path, line, "_id")
        seen[doc_id] = line
        name, value = _pick(rec, TEXT_FIELDS, path, line, "text")
        text = _text(value, path, line, name)
        title = rec.get("title")
        title = "" if title is None else _text(title, path, line, "title")
        meta = dict(rec["metadata"]) if isinstance(rec.get("metadata"), dict) else {}
        meta.update((k, v) for k, v in rec.items()  # the corpus's own fields
                    if k not in _CORE_FIELDS and k not in (name, "metadata"))
        yield Document(id=doc_id, text=text, title=title, metadata=meta)
    if not seen:
        raise DataError("no documents found", path)


def load_queries(path: str | Path, encoding: str = "utf-8") -> dict[str, Query]:
    """Read queries (JSONL ``_id``/``text`` or CSV/TSV ``id``/``text``) keyed by id."""
    path = Path(path)
    out: dict[str, Query] = {}
    for line, rec in _records(path, encoding):
        qid = _id(rec, QUERY_ID_FIELDS, path, line, "query id", "query id")
        name, value = _pick(rec, QUERY_TEXT_FIELDS, path, line, "query text")
        text = _text(value, path, line, name)
        if qid in out:
            raise DataError(f"duplicate query id {qid!r}", path, line, "_id")
        if not text.strip():
            raise DataError(f"query {qid!r} is empty", path, line, "text")
        out[qid] = Query(id=qid, text=text)
    if not out:
        raise DataError("no queries found", path)
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
