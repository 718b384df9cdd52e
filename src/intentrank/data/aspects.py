"""Aspect sets: multi-aspect questions with, per aspect, its gold documents (one subtopic)
and a reference sub-answer (method 4; what NCOM and the diversity measures read). JSONL, one
question a line::

    {"id": "c12", "text": "...", "source": "composed",
     "aspects": [{"id": "1", "text": "...", "answer": "reference sub-answer",
                  "docs": {"doc-id": 1, ...}}, ...]}

:func:`load_aspect_set` checks every field and raises :class:`DataError` naming file, line
and field; :func:`write_aspect_set` writes atomically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intentrank.data.readers import write_jsonl
from intentrank.errors import DataError


@dataclass(frozen=True)
class Aspect:
    """One aspect of a question: its gold documents (one subtopic) and reference
    sub-answer."""

    id: str
    answer: str
    docs: Mapping[str, int]
    text: str = ""


@dataclass(frozen=True)
class AspectQuestion:
    """A multi-aspect question with its aspects; ``source`` says how it was made."""

    id: str
    text: str
    aspects: tuple[Aspect, ...]
    source: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def qrels(self) -> dict[str, int]:
        """Flat judgments: each document's best grade over the aspects."""
        out: dict[str, int] = {}
        for a in self.aspects:
            for d, g in a.docs.items():
                out[d] = max(out.get(d, 0), g)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "source": self.source,
                "aspects": [{"id": a.id, "text": a.text, "answer": a.answer,
                             "docs": dict(a.docs)} for a in self.aspects],
                **({"meta": dict(self.meta)} if self.meta else {})}


def _need_text(value: Any, path: Path, line: int, name: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise DataError(f"must be {'text' if empty else 'non-empty text'}, got {value!r}"[:160],
                        path, line, name)
    return value


def _aspect(raw: Any, path: Path, line: int, at: str) -> Aspect:
    if not isinstance(raw, dict):
        raise DataError(f"must be an object with id, answer and docs, got {raw!r}"[:160],
                        path, line, at)
    for key in ("id", "answer", "docs"):
        if key not in raw:
            raise DataError("is missing", path, line, f"{at}.{key}")
    docs = raw["docs"]
    if not isinstance(docs, dict) or not docs:
        raise DataError(f"must be a non-empty object of document id -> grade, got {docs!r}"
                        [:160], path, line, f"{at}.docs")
    for d, g in docs.items():
        if isinstance(g, bool) or not isinstance(g, int) or g < 0:
            raise DataError(f"grade of {d!r} must be a whole number >= 0, got {g!r}", path,
                            line, f"{at}.docs")
    if not any(g > 0 for g in docs.values()):
        raise DataError("has no relevant document (grade > 0)", path, line, f"{at}.docs")
    return Aspect(str(raw["id"]), _need_text(raw["answer"], path, line, f"{at}.answer"),
                  dict(docs), _need_text(raw.get("text", ""), path, line, f"{at}.text", True))


def load_aspect_set(path: str | Path) -> list[AspectQuestion]:
    """Read an aspect set (module doc); DataError names the file, line and field."""
    path = Path(path)
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", path) from None
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason})", path) from None
    out: list[AspectQuestion] = []
    seen: dict[str, int] = {}
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"not a JSON object: {exc.msg}", path, n) from None
        if not isinstance(raw, dict):
            raise DataError("must be a JSON object", path, n)
        qid = _need_text(raw.get("id"), path, n, "id")
        if qid in seen:
            raise DataError(f"duplicate question id {qid!r} (first on line {seen[qid]})",
                            path, n, "id")
        seen[qid] = n
        aspects = raw.get("aspects")
        if not isinstance(aspects, list) or not aspects:
            raise DataError(f"must be a non-empty list of aspects, got {aspects!r}"[:160],
                            path, n, "aspects")
        parsed = tuple(_aspect(a, path, n, f"aspects[{i}]") for i, a in enumerate(aspects))
        ids = [a.id for a in parsed]
        if len(set(ids)) != len(ids):
            raise DataError(f"aspect ids must differ, got {ids}", path, n, "aspects")
        meta = raw.get("meta", {})
        out.append(AspectQuestion(qid, _need_text(raw.get("text"), path, n, "text"), parsed,
                                  str(raw.get("source", "")),
                                  meta if isinstance(meta, dict) else {}))
    if not out:
        raise DataError("no questions", path)
    return out


def write_aspect_set(questions: Sequence[AspectQuestion], path: str | Path) -> None:
    """Write questions as JSONL (atomically: a temporary file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, (q.to_json() for q in questions))
