"""Conversational query reformulation (method 2): stages that turn a contextual turn ("Is it
treatable?") into what the retriever searches, from the query's conversation history.

Seven LLM methods, each a registered stage (``rewrite_full >> bm25``):

- ``rewrite_full`` (prompt ``rewrite_full_dialog``): the turn rewritten from the dialog;
- ``rewrite_summary`` (``summarize_dialog``, then ``rewrite_from_summary``; two calls): the
  turn rewritten from a summary, or passed on unchanged when off the summary's topic;
- ``rewrite_questions`` (``rewrite_questions_only``): from the user's questions only;
- ``hyde`` (``hyde_vanilla``, 3-shot): a self-contained pseudo-answer;
- ``hyde_masked`` (``hyde_masked``, 3-shot): the same, invented key elements as [MASK];
- ``hyde_doc`` (``hyde_document``): an example passage in the corpus's ``genre``;
- ``hyde_doc_masked`` (``hyde_masked_document``): the same with [MASK];

and one baseline without an LLM, ``concat_turns`` (the earlier questions and the turn, joined).
The searched text replaces ``Query.text`` (so every later retriever and reranker uses it) and
the user's turn stays on the query as kind ``original`` (``Query.turn``); masked passages
are searched with every ``[MASK]`` removed (the masked text is kept as kind ``masked``).

Every LLM reply goes through ``llm/step.py``: an unusable reply (empty, several lines of
chatter for a rewrite, nothing left after removing [MASK]) falls back to the raw turn,
counted as ``fallbacks``. A rewrite method leaves a turn with no history alone without a
call (counted ``no_history``); the HyDE methods write a passage for every turn. History
longer than ``max_history_words`` is cut by the policy in :mod:`intentrank.query.dialog`.

:func:`conversation_turns` and :func:`reformulate_turns` run a method over the turns of a
set of conversations in batches, one record per turn (what ``intentrank reformulate``
writes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from intentrank.core.params import ParameterError, check_int
from intentrank.core.protocols import LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.parsing import ParseError
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.query.dialog import Dialog, render_dialog
from intentrank.types import EventKind, Query, Ranking, Trace

if TYPE_CHECKING:
    from intentrank.data.conversations import Conversation, ConversationTurn

MASK = re.compile(r"\[\s*mask(?:ed)?\s*\]", re.I)
_LABEL = re.compile(r"^\s*(?:rewritten(?: (?:message|question|query))?|query|question|"
                    r"search query|passage|answer)\s*:\s*", re.I)
MAX_REWRITE_WORDS = 80
# the baselines without an LLM (concat_turns here; first_turn, history_terms in
# query/history_expansion.py), each a registered stage
NO_LLM_METHODS = ("concat_turns", "first_turn", "history_terms")


@dataclass(frozen=True)
class Method:
    """One reformulation method: its prompt(s) and what its output is."""

    name: str
    prompts: tuple[str, ...]
    group: str  # "paraphrase" (the output is a query) or "hyde" (a passage)
    questions_only: bool = False
    masked: bool = False
    genre: bool = False  # the prompt takes the corpus genre

    @property
    def kind(self) -> str:
        """The derived-text kind of the output."""
        return "rewrite" if self.group == "paraphrase" else "hypothetical"


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("rewrite_full", ("rewrite_full_dialog",), "paraphrase"),
    Method("rewrite_summary", ("summarize_dialog", "rewrite_from_summary"), "paraphrase"),
    Method("rewrite_questions", ("rewrite_questions_only",), "paraphrase",
           questions_only=True),
    Method("hyde", ("hyde_vanilla",), "hyde"),
    Method("hyde_masked", ("hyde_masked",), "hyde", masked=True),
    Method("hyde_doc", ("hyde_document",), "hyde", genre=True),
    Method("hyde_doc_masked", ("hyde_masked_document",), "hyde", masked=True, genre=True),
)}


def clean_rewrite(reply: str) -> str:
    """The rewritten query in a reply: its first non-blank line without a leading label
    ("Rewritten:") or quotes. ``ParseError`` when there is none or it is too long to be a
    query (the model answered the question instead)."""
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    if not lines:
        raise ParseError("empty rewrite")
    text = _LABEL.sub("", lines[0]).strip().strip('"“”\'').strip()
    if not text:
        raise ParseError("empty rewrite")
    if len(text.split()) > MAX_REWRITE_WORDS:
        raise ParseError(f"a rewrite of {len(text.split())} words is not a query "
                         f"(limit {MAX_REWRITE_WORDS})")
    return text


def clean_passage(reply: str) -> str:
    """A hypothetical passage: the reply without a leading label, whitespace collapsed."""
    text = " ".join(_LABEL.sub("", reply.strip()).split())
    if not text:
        raise ParseError("empty passage")
    return text


def unmask(text: str) -> str:
    """``text`` with every [MASK] removed (what is searched); ParseError if fewer than
    three words remain."""
    out = " ".join(MASK.sub(" ", text).split())
    out = re.sub(r"\s+([,.;:])", r"\1", out)
    if len(out.split()) < 3:
        raise ParseError("fewer than three words left once [MASK] is removed")
    return out


def _same(a: str, b: str) -> bool:
    """Equal up to case and spacing."""
    return a.casefold().split() == b.casefold().split()


class ConversationalReformulator(Stage):
    """Reformulate each query from its history with one of :data:`METHODS`.

    ``genre``: what the corpus's documents are, for the document methods ("scientific
    abstract", "Wikipedia passage"); ``max_history_words`` / ``max_answer_words``: the
    truncation budget (see :mod:`intentrank.query.dialog`); ``max_tokens`` overrides the
    contract's reply limit."""

    def __init__(self, llm: LLMLike, method: str = "rewrite_full", *, genre: str = "passage",
                 max_history_words: int = 300, max_answer_words: int = 40,
                 max_tokens: int | None = None, name: str | None = None) -> None:
        if method not in METHODS:
            raise ParameterError(f"unknown reformulation method {method!r}; choose one of "
                                 f"{', '.join(METHODS)}")
        if not isinstance(genre, str) or not genre.strip():
            raise ParameterError(f"genre must be a non-empty text, got {genre!r}")
        self.method = METHODS[method]
        self.contracts = [load_contract(p) for p in self.method.prompts]
        self.max_history_words = check_int("max_history_words", max_history_words)
        self.max_answer_words = check_int("max_answer_words", max_answer_words)
        self.max_tokens = None if max_tokens is None else check_int("max_tokens", max_tokens)
        self.llm, self.genre, self.name = llm, genre.strip(), name or method

    def dialog(self, query: Query) -> Dialog:
        """The query's history as prompt text, cut to the budget."""
        return render_dialog(query.history, questions_only=self.method.questions_only,
                             max_words=self.max_history_words,
                             max_answer_words=self.max_answer_words)

    def reformulate(self, queries: list[Query], trace: Trace) -> list[Query]:
        """The queries with their reformulation as ``text`` (the raw turn on fallback)."""
        stage = trace.path_of(self)
        todo = [i for i, q in enumerate(queries)
                if q.history or self.method.group == "hyde"]
        trace.count(stage, "no_history", len(queries) - len(todo))
        dialogs = {i: self.dialog(queries[i]) for i in todo}
        for i in todo:
            if dialogs[i].omitted:
                trace.count(stage, "truncated_turns", dialogs[i].omitted)
        items = [{"dialog": dialogs[i].text or "(no earlier turns)",
                  "question": queries[i].text.strip(), "genre": self.genre} for i in todo]
        ids = [queries[i].id for i in todo]
        if self.method.name == "rewrite_summary":
            summaries = run_step(
                self.llm, self.contracts[0], items, trace=trace, stage=stage, query_ids=ids,
                parse=lambda reply, item: clean_passage(reply.text),
                fallback=lambda item: item["dialog"])
            items = [{**item, "summary": s.value} for item, s in zip(items, summaries,
                                                                     strict=True)]
        parse = clean_rewrite if self.method.group == "paraphrase" else clean_passage
        validate = (lambda value, item: (value, unmask(value))) if self.method.masked \
            else (lambda value, item: (value, value))
        results = run_step(
            self.llm, self.contracts[-1], items, trace=trace, stage=stage, query_ids=ids,
            parse=lambda reply, item: parse(reply.text), validate=validate,
            fallback=lambda item: None, max_tokens=self.max_tokens)
        out = list(queries)
        for i, result in zip(todo, results, strict=True):
            if result.value is None:
                continue
            shown, searched = result.value
            if _same(searched, queries[i].text):
                trace.count(stage, "unchanged")
                continue
            query = queries[i]
            if self.method.masked:
                query = query.with_derived("masked", [shown], stage)
            out[i] = query.reformulated(searched, stage, self.method.kind)
        return out

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        queries = self.reformulate([r.query for r in rankings], trace)
        return [Ranking(q, r.docs) for q, r in zip(queries, rankings, strict=True)]

    def describe(self) -> str:
        return self.described(self.llm.name, method=self.method.name, genre=self.genre,
                              max_history_words=self.max_history_words,
                              max_answer_words=self.max_answer_words,
                              max_tokens=self.max_tokens,
                              prompts=",".join(c.name for c in self.contracts))


class ConcatTurns(Stage):
    """The no-LLM baseline: the earlier questions and the turn joined into one query (the
    most recent questions that fit ``max_words``)."""

    def __init__(self, max_words: int = 100, name: str = "concat_turns") -> None:
        self.max_words, self.name = check_int("max_words", max_words), name

    def concatenated(self, query: Query) -> str:
        words = query.text.split()
        earlier: list[str] = []
        for turn in reversed(query.history):
            more = turn.question.split()
            if len(words) + len(earlier) + len(more) > self.max_words:
                break
            earlier = more + earlier
        return " ".join(earlier + words)

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        stage, out = trace.path_of(self), []
        for r in rankings:
            text = self.concatenated(r.query)
            query = r.query.reformulated(text, stage, "rewrite") \
                if text != r.query.text else r.query
            out.append(Ranking(query, r.docs))
        return out

    def describe(self) -> str:
        return self.described(max_words=self.max_words)


# -- reformulating the turns of conversations (``intentrank reformulate``) --------------------

Turns = list[tuple["Conversation", "ConversationTurn", Query]]


def conversation_turns(conversations: Iterable[Conversation], limit: int = 0) -> Turns:
    """Every turn of ``conversations`` in order, with its query (the earlier turns as
    history); only the first ``limit`` when ``limit`` > 0."""
    turns = [(c, t, q) for c in conversations
             for t, q in zip(c.turns, c.queries(), strict=True)]
    return turns[:limit] if limit else turns


def reformulate_turns(stage: Stage, turns: Turns, trace: Trace, batch_size: int = 8
                      ) -> Iterator[list[dict[str, Any]]]:
    """Run a reformulation ``stage`` over ``turns`` (see :func:`conversation_turns`),
    ``batch_size`` turns at a time, and yield each batch's records: ``conversation``,
    ``turn``, ``question``, ``method`` (the stage's name), ``reformulation`` (the text
    searched), ``changed``, ``fallback`` (its reason, or None), ``masked`` (the masked text,
    masked methods only) and ``gold`` (the gold rewrite, when known)."""
    check_int("batch_size", batch_size)
    for start in range(0, len(turns), batch_size):
        chunk = turns[start:start + batch_size]
        outs = stage([Ranking(q) for _, _, q in chunk], trace)
        fell = {e.query_id: e.details.get("reason") for e in trace.events
                if e.kind == EventKind.FALLBACK}
        records = []
        for (conv, turn, q), r in zip(chunk, outs, strict=True):
            masked = r.query.derived_of("masked")
            records.append({"conversation": conv.id, "turn": turn.id,
                            "question": turn.question, "method": stage.name,
                            "reformulation": r.query.text, "changed": r.query.text != q.text,
                            "fallback": fell.get(q.id),
                            **({"masked": masked[-1]} if masked else {}),
                            **({"gold": turn.rewrite} if turn.rewrite else {})})
        yield records


def _register(method: str) -> None:
    @register_stage(method)
    def _factory(ctx: BuildContext, params: dict[str, Any]) -> Stage:
        return ConversationalReformulator(ctx.step_llm("rewrite", params), method, **params)

    _factory.__doc__ = f"``{method}: {{genre, max_history_words, max_answer_words}}``: " \
                       f"conversational reformulation ({', '.join(METHODS[method].prompts)})."


for _name in METHODS:
    _register(_name)


@register_stage("concat_turns")
def _concat_turns(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``concat_turns: {max_words: 100}``: the earlier questions and the turn, joined."""
    return ConcatTurns(**params)
