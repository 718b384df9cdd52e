"""Conversations: turns with the user's question, optionally its gold standalone rewrite,
the system's answer and the documents judged relevant to the turn.

The plain format is ``conversations.jsonl``, one conversation per line::

    {"id": "c1", "turns": [{"id": "c1_1", "question": "...", "rewrite": "...",
                            "answer": "...", "passage_id": "p7", "relevant": {"doc-id": 1}},
                           ...]}

Turns are in order; ``rewrite``, ``answer``, ``passage_id`` and ``relevant`` are optional
(``null`` is the same as absent). A turn becomes a :class:`~intentrank.types.Query` whose
``history`` holds the earlier turns (question and answer); the gold rewrite never enters the
query (it is what evaluation compares with). :func:`load_conversations` checks every field and
refuses any key it does not know, naming the file, line and field (``turns[2].rewrite``).

TREC CAsT 2019-2021 (the track's public topic files, ``$INTENTRANK_DATA/trec-cast``) load
with :func:`load_cast`; :func:`write_cast2021_passages` turns CAsT 2021's canonical response
passages into a small grounded BEIR-layout dataset. See docs/conversations.md.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intentrank.core.params import ParameterError
from intentrank.data.corpus import check_id
from intentrank.data.readers import iter_jsonl, iter_lines, read_text, write_jsonl
from intentrank.data.trec import write_qrels
from intentrank.errors import DataError
from intentrank.paths import default_data_dir
from intentrank.types import Query, Turn

TURN_KEYS = ("id", "question", "rewrite", "answer", "passage_id", "relevant")
CONVERSATION_KEYS = ("id", "turns")


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


def write_conversations(conversations: Iterable[Conversation], path: str | Path) -> Path:
    """Write ``conversations.jsonl`` atomically (a temporary file renamed over ``path``); a
    file that already holds exactly these lines is left untouched (its mtime too)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, ({"id": c.id, "turns": [turn_record(t) for t in c.turns]}
                       for c in conversations), keep_unchanged=True)
    return path


# -- reading the plain format ---------------------------------------------------------------

def _unknown_key(key: str, known: tuple[str, ...], where: str) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r} on {where} (known: {', '.join(known)}){hint}"


def _ident(value: Any, label: str, path: Path, line: int, name: str) -> str:
    """A required id (see :func:`~intentrank.data.corpus.check_id`)."""
    if value is None:
        raise DataError(f"missing {label}", path, line, name)
    return check_id(value, label, path, line, name)


def _string(value: Any, label: str, path: Path, line: int, name: str, *,
            blank_ok: bool = False) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataError(f"{label} must be a string, got {type(value).__name__} {value!r:.40}",
                        path, line, name)
    if not blank_ok and not value.strip():
        raise DataError(f"empty {label}", path, line, name)
    return value


def _relevant(value: Any, path: Path, line: int, name: str) -> dict[str, int] | None:
    """``{"doc-id": grade}`` with integer grades >= 0."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DataError(f"'relevant' must be an object {{doc-id: grade}}, got "
                        f"{type(value).__name__} {value!r:.40}", path, line, name)
    out: dict[str, int] = {}
    for doc_id, grade in value.items():
        where = f"{name}[{doc_id!r}]"
        if not isinstance(doc_id, str) or not doc_id.strip() or doc_id.split() != [doc_id]:
            raise DataError(f"document id {doc_id!r} must be a non-empty string without "
                            f"whitespace", path, line, where)
        if isinstance(grade, bool) or not isinstance(grade, int):
            raise DataError(f"grade of {doc_id!r} must be an integer >= 0, got "
                            f"{type(grade).__name__} {grade!r:.40}", path, line, where)
        if grade < 0:
            raise DataError(f"grade of {doc_id!r} must be >= 0, got {grade}", path, line, where)
        out[doc_id] = grade
    return out


def _turn(rec: Any, n: int, path: Path, line: int) -> ConversationTurn:
    base = f"turns[{n}]"
    if not isinstance(rec, dict):
        raise DataError(f"a turn must be a JSON object, got {type(rec).__name__} {rec!r:.40}",
                        path, line, base)
    for key in rec:
        if key not in TURN_KEYS:
            raise DataError(_unknown_key(key, TURN_KEYS, "a turn"), path, line,
                            f"{base}.{key}")
    turn_id = _ident(rec.get("id"), "turn id", path, line, f"{base}.id")
    if "question" not in rec or rec["question"] is None:
        raise DataError(f"turn {turn_id!r} has no question", path, line, f"{base}.question")
    question = _string(rec["question"], "question", path, line, f"{base}.question")
    rewrite = _string(rec.get("rewrite"), "rewrite", path, line, f"{base}.rewrite")
    answer = _string(rec.get("answer"), "answer", path, line, f"{base}.answer", blank_ok=True)
    passage_id = rec.get("passage_id")
    if passage_id is not None:
        passage_id = _ident(passage_id, "passage id", path, line, f"{base}.passage_id")
    relevant = _relevant(rec.get("relevant"), path, line, f"{base}.relevant")
    assert question is not None
    return ConversationTurn(turn_id, question, rewrite, answer, passage_id, relevant)


def load_conversations(path: str | Path, encoding: str = "utf-8") -> list[Conversation]:
    """Read ``conversations.jsonl`` (plain, .gz or .zip; format in the module docstring).

    Raises a :class:`DataError` naming file, line and field for: a missing, empty or repeated
    conversation id; ``turns`` missing, not a list or empty; a turn that is not an object, has
    no id, or an id used before anywhere in the file; a missing, blank or non-string question;
    an empty or non-string rewrite, a rewrite given on the conversation instead of a turn; any
    key a turn or conversation does not know; ``relevant`` that is not an object of integer
    grades >= 0 keyed by document ids; and a file with no conversations.
    """
    path = Path(path)
    out: list[Conversation] = []
    seen: dict[str, int] = {}
    turn_seen: dict[str, int] = {}
    for line, rec in iter_jsonl(path, encoding):
        for key in rec:
            if key in ("rewrite", "rewrites"):
                raise DataError(f"{key!r} is on the conversation, so it rewrites no turn: "
                                f"put each turn's rewrite on that turn "
                                f"(turns[i].rewrite)", path, line, key)
            if key not in CONVERSATION_KEYS:
                raise DataError(_unknown_key(key, CONVERSATION_KEYS, "a conversation"),
                                path, line, key)
        conv_id = _ident(rec.get("id"), "conversation id", path, line, "id")
        if conv_id in seen:
            raise DataError(f"duplicate conversation id {conv_id!r} (first seen on line "
                            f"{seen[conv_id]})", path, line, "id")
        seen[conv_id] = line
        turns = rec.get("turns")
        if turns is None:
            raise DataError(f"conversation {conv_id!r} has no turns", path, line, "turns")
        if not isinstance(turns, list):
            raise DataError(f"'turns' must be a list of turns, got {type(turns).__name__}",
                            path, line, "turns")
        if not turns:
            raise DataError(f"conversation {conv_id!r} has an empty list of turns", path, line,
                            "turns")
        parsed = []
        for n, t in enumerate(turns):
            turn = _turn(t, n, path, line)
            if turn.id in turn_seen:
                raise DataError(f"duplicate turn id {turn.id!r} (first seen on line "
                                f"{turn_seen[turn.id]}); turn ids are query ids and must be "
                                f"unique in the file", path, line, f"turns[{n}].id")
            turn_seen[turn.id] = line
            parsed.append(turn)
        out.append(Conversation(conv_id, tuple(parsed)))
    if not out:
        raise DataError("no conversations found", path)
    return out


# -- TREC CAsT ------------------------------------------------------------------------------

CAST_YEARS = (2019, 2020, 2021)
CAST_REWRITES = ("manual", "automatic")
CAST_FILES = {
    2019: "2019/evaluation_topics_v1.0.json",
    2020: "2020/2020_manual_evaluation_topics_v1.0.json",
    2021: "2021/2021_manual_evaluation_topics_v1.0.json",
}
CAST_2019_REWRITES = "2019/evaluation_topics_annotated_resolved_v1.0.tsv"


def cast_root(root: str | Path | None = None) -> Path:
    """The TREC CAsT directory: ``root``, else ``trec-cast`` in
    :func:`~intentrank.paths.default_data_dir` (``$INTENTRANK_DATA``, else
    ``../shared/data``)."""
    path = Path(root) if root is not None else default_data_dir() / "trec-cast"
    if not path.is_dir():
        raise DataError("TREC CAsT directory not found (pass root= or set $INTENTRANK_DATA "
                        "to the folder holding trec-cast/)", path)
    return path


def _json_file(path: Path) -> list[Any]:
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed JSON ({exc.msg} at column {exc.colno})", path,
                        exc.lineno) from None
    if not isinstance(data, list):
        raise DataError(f"expected a JSON list of topics, got {type(data).__name__}", path)
    return data


def _field(obj: Any, key: str, path: Path, where: str, kind: type | tuple[type, ...] = str
           ) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise DataError(f"{where}: missing or not a {getattr(kind, '__name__', kind)} "
                        f"(got {value!r:.40})", path, None, key)
    if isinstance(value, str) and not value.strip():
        raise DataError(f"{where}: empty", path, None, key)
    return value


def _cast_turns(path: Path) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """``[(topic, [(turn_id, raw turn object), ...]), ...]`` from a CAsT topics file."""
    out = []
    for n, topic in enumerate(_json_file(path)):
        number = _field(topic, "number", path, f"topic [{n}]", int)
        turns = _field(topic, "turn", path, f"topic {number}", list)
        rows = []
        for t in turns:
            turn_no = _field(t, "number", path, f"topic {number}: a turn", int)
            rows.append((f"{number}_{turn_no}", t))
        out.append((str(number), rows))
    return out


def _tsv_rewrites(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line, text in iter_lines(path):
        if not text.strip():
            continue
        parts = text.split("\t")
        if len(parts) != 2 or not parts[1].strip():
            raise DataError(f"expected 'turn-id<TAB>rewrite', got {len(parts)} field(s)", path,
                            line)
        if parts[0] in out:
            raise DataError(f"turn {parts[0]!r} is rewritten twice", path, line)
        out[parts[0]] = parts[1].strip()
    return out


def load_cast(year: int, root: str | Path | None = None, rewrites: str = "manual"
              ) -> list[Conversation]:
    """The TREC CAsT evaluation conversations of ``year`` (turn ids ``<topic>_<turn>``,
    questions are the raw utterances, whitespace-stripped).

    - 2019: 50 conversations, 479 turns; rewrite = the manually resolved turn
      (``evaluation_topics_annotated_resolved_v1.0.tsv``); no answers.
    - 2020: 25 conversations, 216 turns; rewrite = ``manual_rewritten_utterance``;
      ``passage_id`` = ``manual_canonical_result_id``; no answer (the passage texts are not
      in the topic file).
    - 2021: 26 conversations, 239 turns; rewrite = ``manual_rewritten_utterance``; answer =
      the canonical response ``passage``, ``passage_id`` = ``<canonical_result_id>-<passage
      number>``. One id is given to two different passages in the file (``MARCO_D684519-2``,
      turns 106_4 and 106_5); the later one is named ``MARCO_D684519-2@106_5`` so that an id
      names one text.

    ``rewrites="automatic"`` (2020, 2021) gives the track's ``automatic_rewritten_utterance``
    as the rewrite instead (its automatic baseline); everything else is unchanged.
    """
    if year not in CAST_YEARS:
        raise ParameterError(f"year: TREC CAsT years are {', '.join(map(str, CAST_YEARS))}, "
                             f"got {year!r}")
    if rewrites not in CAST_REWRITES:
        raise ParameterError(f"rewrites: one of {', '.join(CAST_REWRITES)}, got {rewrites!r}")
    if year == 2019 and rewrites == "automatic":
        raise ParameterError("rewrites: CAsT 2019 has no automatic rewrites (only the manual "
                             "resolutions); use rewrites='manual'")
    base = cast_root(root)
    path = base / CAST_FILES[year]
    gold = _tsv_rewrites(base / CAST_2019_REWRITES) if year == 2019 else {}
    key = f"{rewrites}_rewritten_utterance"
    texts: dict[str, str] = {}  # 2021 passage id -> its text
    out = []
    for topic, rows in _cast_turns(path):
        turns = []
        for turn_id, t in rows:
            where = f"topic {topic} turn {turn_id}"
            question = _field(t, "raw_utterance", path, where).strip()
            answer = passage_id = None
            if year == 2019:
                if turn_id not in gold:
                    raise DataError(f"turn {turn_id!r} has no rewrite in this file",
                                    base / CAST_2019_REWRITES)
                rewrite = gold[turn_id]
            else:
                rewrite = _field(t, key, path, where).strip()
            if year == 2020 and t.get("manual_canonical_result_id"):
                passage_id = _field(t, "manual_canonical_result_id", path, where)
            if year == 2021:
                answer = _field(t, "passage", path, where).strip()
                doc = _field(t, "canonical_result_id", path, where)
                number = _field(t, "passage_id", path, where, int)
                passage_id = f"{doc}-{number}"
                if texts.get(passage_id, answer) != answer:
                    passage_id = f"{passage_id}@{turn_id}"
                texts.setdefault(passage_id, answer)
            turns.append(ConversationTurn(turn_id, question, rewrite, answer, passage_id))
        out.append(Conversation(topic, tuple(turns)))
    if year == 2019 and (extra := set(gold) - {t.id for c in out for t in c.turns}):
        raise DataError(f"{len(extra)} rewrite(s) for turns that are not in {path.name} "
                        f"(e.g. {sorted(extra)[:3]})", base / CAST_2019_REWRITES)
    return out


def write_cast2021_passages(out_dir: str | Path, root: str | Path | None = None) -> Path:
    """Write CAsT 2021's canonical response passages as a grounded BEIR-layout dataset.

    ``corpus.jsonl``: each distinct canonical passage once (``_id`` = its passage id, see
    :func:`load_cast`); ``conversations.jsonl``: the 239 turns, each with ``relevant`` =
    ``{its passage id: 1}`` and its passage as ``answer`` (so a turn's history holds the
    earlier turns' passages, never its own unless an earlier turn had the same one);
    ``qrels/test.tsv``: the same judgments in BEIR TSV. Returns ``out_dir``. Files that
    already hold what would be written are left untouched, so a rerun keeps their mtimes
    (``intentrank bench`` reads them to decide what is stale).
    """
    out = Path(out_dir)
    conversations = load_cast(2021, root)
    passages: dict[str, str] = {}
    judged = []
    for conv in conversations:
        turns = []
        for t in conv.turns:
            assert t.passage_id is not None and t.answer is not None
            passages.setdefault(t.passage_id, t.answer)
            turns.append(ConversationTurn(t.id, t.question, t.rewrite, t.answer, t.passage_id,
                                          {t.passage_id: 1}))
        judged.append(Conversation(conv.id, tuple(turns)))
    write_conversations(judged, out / "conversations.jsonl")
    write_jsonl(out / "corpus.jsonl", ({"_id": pid, "title": "", "text": text}
                                       for pid, text in passages.items()), keep_unchanged=True)
    write_qrels(((t.id, t.passage_id, 1) for c in judged for t in c.turns),
                out / "qrels" / "test.tsv", keep_unchanged=True)
    return out
