"""A generated conversation set on disk: one attempt's record (a line of ``attempts.jsonl``)
and the kept attempts written as ``conversations.jsonl`` and ``qrels/<split>.tsv``
(:mod:`.conversations` runs the generation)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from intentrank.data.conversations import Conversation, ConversationTurn, write_conversations
from intentrank.data.trec import write_qrels


@dataclass
class ConversationAttempt:
    """One query's attempt and what became of it (a line of ``attempts.jsonl``)."""

    attempt: int
    query_id: str
    query: str
    document: str  # the query's most relevant document
    topic: str = ""
    question: str = ""  # the contextual last question
    turns: list[dict[str, str]] = field(default_factory=list)  # earlier turns, in order
    status: str = "kept"  # "kept" or one of REASONS
    detail: str = ""
    link: str = ""  # kept: "pronoun" or "ellipsis"
    follow_up_by: str = ""  # "llm" or "rule": who wrote ``question``
    llm_follow_up: str = ""  # the LLM's follow-up the rule replaced (llm_or_rule)
    replaced: str = ""  # why it was replaced: self_contained, drifted or unrecoverable
    lost: list[str] = field(default_factory=list)  # key terms no rewriter can recover
    calls: int = 0
    seconds: float = 0.0
    history_doc: str = ""  # the document the earlier turns' answers come from ("": document)


def conversation_of(a: ConversationAttempt, relevant: dict[str, int]) -> Conversation:
    """A kept attempt as a :class:`Conversation` (the last turn labelled)."""
    cid = f"c{a.query_id}"
    turns = [ConversationTurn(f"{cid}_{j}", t["question"], answer=t["answer"],
                              passage_id=a.history_doc or a.document)
             for j, t in enumerate(a.turns, 1)]
    turns.append(ConversationTurn(a.query_id, a.question, rewrite=a.query,
                                  relevant=dict(relevant)))
    return Conversation(cid, tuple(turns))


def write_set(out: Path, attempts: list[ConversationAttempt],
              qrels: dict[str, dict[str, int]], split: str) -> int:
    """Write ``conversations.jsonl`` and ``qrels/<split>.tsv`` for the kept attempts."""
    kept = [a for a in attempts if a.status == "kept"]
    write_conversations([conversation_of(a, qrels[a.query_id]) for a in kept],
                        out / "conversations.jsonl")
    write_qrels(((a.query_id, d, g) for a in kept for d, g in qrels[a.query_id].items()),
                out / "qrels" / f"{split}.tsv")
    return len(kept)

