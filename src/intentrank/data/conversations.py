"""Conversations: turns with the user's question, optionally its gold standalone rewrite,
the system's answer and the documents judged relevant to the turn.

The plain format is ``conversations.jsonl``, one conversation per line::

    {"id": "c1", "turns": [{"id": "c1_1", "question": "...", "rewrite": "...",
                            "answer": "...", "relevant": {"doc-id": 1}}, ...]}

Turns are in order; ``rewrite``, ``answer`` and ``relevant`` are optional. A turn becomes a
:class:`~intentrank.types.Query` whose ``history`` holds the earlier turns (question and
answer); the gold rewrite never enters the query (it is what evaluation compares with).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intentrank.types import Query, Turn


@dataclass(frozen=True)
class ConversationTurn:
    """One turn of a conversation as a dataset stores it."""

    id: str
    question: str
    rewrite: str | None = None  # the gold standalone rewrite
    answer: str | None = None  # the system's answer (CAsT 2021: the canonical passage text)
    passage_id: str | None = None  # the answer's passage id, when known
    relevant: dict[str, int] | None = None  # judgments of this turn against a corpus


@dataclass(frozen=True)
class Conversation:
    """A conversation: an id and its turns in order."""

    id: str
    turns: tuple[ConversationTurn, ...] = field(default_factory=tuple)

    def queries(self) -> list[Query]:
        """One query per turn (id = the turn's id), with the earlier turns as history."""
        out: list[Query] = []
        history: list[Turn] = []
        for turn in self.turns:
            out.append(Query(turn.id, turn.question, tuple(history)))
            history.append(Turn(turn.question, turn.answer or ""))
        return out


def turn_record(turn: ConversationTurn) -> dict[str, Any]:
    """A turn as its ``conversations.jsonl`` object (unset optional fields left out)."""
    rec: dict[str, Any] = {"id": turn.id, "question": turn.question}
    for key in ("rewrite", "answer", "passage_id", "relevant"):
        value = getattr(turn, key)
        if value is not None:
            rec[key] = value
    return rec


def conversation_line(conversation: Conversation) -> str:
    """One ``conversations.jsonl`` line (no newline)."""
    return json.dumps({"id": conversation.id,
                       "turns": [turn_record(t) for t in conversation.turns]},
                      ensure_ascii=False)


def write_conversations(conversations: Iterable[Conversation], path: str | Path) -> Path:
    """Write ``conversations.jsonl`` atomically (a temporary file renamed over ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for conversation in conversations:
            fh.write(conversation_line(conversation) + "\n")
    os.replace(tmp, path)
    return path
