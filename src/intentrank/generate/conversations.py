"""Generate labelled conversational test sets from a judged collection (Method 2's data).

Each attempt takes one judged query of ``split`` (a seeded order: attempt ``i`` is the same
query on every run; each query is tried once) and its most relevant document. The LLM
writes a conversation that ends with the query asked as a follow-up, so the query is the
gold rewrite of the last turn and its judgments label it:

1. ``contextualize_query``: the query's topic and the query as a follow-up question (the
   topic replaced by a pronoun or left out). ``follow_up`` says who writes the follow-up:
   ``llm``, ``rule`` (:mod:`.follow_up_rule`: the topic span replaced by a pronoun) or
   ``llm_or_rule`` (the default: the LLM's, unless it would be rejected as
   ``self_contained``, ``drifted`` or ``unrecoverable`` (judged before the history: it
   leaves out more than ``max_lost`` key terms that are not the topic's), then the rule's).
   A topic the rule cannot use rejects the attempt as ``unusable_topic`` where it is needed;
2. ``generate_history``: the earlier turns (at most 2), short questions with one-sentence
   answers taken from a document, asked to use the words the follow-up left out (the
   topic, for a rule follow-up). ``history_from`` says which document: ``neighbour`` (the
   default; :mod:`.neighbours`: the one BM25 scores highest for the gold document's text
   among those that hold the key terms of those words and that the query's judgments do not
   grade relevant; none: ``no_neighbour``) or ``gold`` (the most relevant document itself);
3. ``extend_conversation`` (conversations of more than 3 turns): the turns that came before,
   in rounds that grow the conversation through the paper's lengths 3, 6, 11 (so a longer
   set extends the shorter one of the same seed, whose calls come back from the LLM reply
   cache), at most ``round_turns`` per call.

Calls stop at the first rejection; the filters (:mod:`.conversation_filters`) judge the final
follow-up, whoever wrote it, and are counted per reason (:data:`REASONS`) in
``generation.json``. ``OUT`` holds ``conversations.jsonl`` and ``qrels/<split>.tsv`` (the kept
attempts, :mod:`.conversation_set`), a link to the corpus, ``attempts.jsonl`` (every attempt,
resumable as in :mod:`.generator`) and ``generation.json`` (identity, settings, counts).
See docs/generation.md.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from intentrank.core.protocols import LLMLike
from intentrank.data.dataset import load_dataset
from intentrank.errors import ConfigError, DataError
from intentrank.generate import runlog
from intentrank.generate.conversation_filters import (
    Problem,
    contextual_problem,
    dropped_phrases,
    history_problem,
    key_terms,
    link_kind,
    lost_terms,
    missing_terms,
)
from intentrank.generate.conversation_set import ConversationAttempt, write_set
from intentrank.generate.filters import words
from intentrank.generate.follow_up_rule import EDGE_CHARS, UnusableTopic, rule_follow_up
from intentrank.generate.neighbours import Neighbours
from intentrank.llm.prompts import PromptContract, load_contract
from intentrank.llm.step import run_step
from intentrank.types import Trace

STAGE = "generate_conversations"
CONTRACTS = ("contextualize_query", "generate_history", "extend_conversation")
REASONS = ("malformed", "identical", "self_contained", "drifted", "repeats_query",
           "unrecoverable", "unsupported", "unusable_topic", "no_neighbour")
HISTORY_FROM = ("neighbour", "gold")
FOLLOW_UPS = ("llm", "rule", "llm_or_rule")
RULE_REPLACES = ("self_contained", "drifted", "unrecoverable")  # llm_or_rule
PAPER_LENGTHS = (3, 6, 11)
MAX_TURN_WORDS = 40
# the 0.5B model slips Chinese words into English text ("high-speed飞行")
_FOREIGN = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


@dataclass(frozen=True)
class ConversationSettings(runlog.RunSettings):
    """What a generated conversation set depends on; recorded in ``generation.json``."""

    n: int = 50  # conversations to keep
    turns: int = 3  # turns per conversation, the contextual last one included
    seed: int = 0
    split: str = "test"  # the judged queries used, and qrels/<split>.tsv written
    max_minutes: float | None = None
    max_attempts: int | None = None  # default: every judged query of the split once
    doc_chars: int = 1500  # the source document is clipped to this many characters
    round_turns: int = 5  # at most this many earlier turns per extension call
    min_faithful: float = 0.5  # share of the follow-up's key terms that must be the query's
    min_support: float = 0.5  # share of the answers' content words found in the document
    max_lost: int = 1  # key terms of the query that neither the question nor the turns hold
    follow_up: str = "llm_or_rule"  # who writes the follow-up: llm, rule or llm_or_rule
    history_from: str = "neighbour"  # the earlier turns' document: neighbour or gold

    def __post_init__(self) -> None:
        for option, value, choices in (("--history-from", self.history_from, HISTORY_FROM),
                                       ("--follow-up", self.follow_up, FOLLOW_UPS)):
            if value not in choices:
                raise ConfigError(f"{option} must be one of {', '.join(choices)}, got {value!r}")
        if isinstance(self.turns, bool) or not isinstance(self.turns, int) or \
                not 2 <= self.turns <= 31:
            raise ConfigError(f"--turns must be a whole number in [2, 31], got {self.turns!r}")
        self.check_run()
        if isinstance(self.max_lost, bool) or not isinstance(self.max_lost, int) or \
                self.max_lost < 0:
            raise ConfigError(f"max_lost must be a whole number >= 0, got {self.max_lost!r}")
        if not 2 <= self.round_turns <= 10:
            raise ConfigError(f"round_turns must be in [2, 10], got {self.round_turns!r}")
        for name in ("min_faithful", "min_support"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")

    @property
    def rounds(self) -> list[int]:
        """Earlier turns written per call: the history call's (at most 2), then extensions
        through the paper's lengths 3, 6, 11 (e.g. 3 turns: [2]; 6: [2, 3]; 11: [2, 3, 5])."""
        out = [min(self.turns - 1, 2)]
        length = out[0] + 1
        for target in [x for x in PAPER_LENGTHS if length < x < self.turns] + [self.turns]:
            while length < target:
                step = min(target - length, self.round_turns)
                out.append(step)
                length += step
        return out


def _turns_problem(value: Any, k: int) -> str | None:
    """Why a reply is not ``k`` usable earlier turns (None if it is)."""
    turns = value.get("turns") if isinstance(value, dict) else None
    if not isinstance(turns, list):
        return "no list of turns in the reply"
    if len(turns) != k:
        return f"{len(turns)} turns, asked for {k}"
    for i, t in enumerate(turns, 1):
        if not isinstance(t, dict) or not all(isinstance(t.get(f), str) and t[f].strip()
                                               for f in ("question", "answer")):
            return f"turn {i} lacks a question or an answer"
        if len(words(t["question"])) > MAX_TURN_WORDS:
            return f"turn {i}'s question has more than {MAX_TURN_WORDS} words"
        if m := _FOREIGN.search(t["question"] + t["answer"]):
            return f"turn {i} has a character of another script ({m.group(0)!r})"
    asked = [tuple(words(t["question"])) for t in turns]
    if len(set(asked)) < len(asked):
        return "two earlier turns ask the same question"
    return None


def _question_problem(question: str, query: str, settings: ConversationSettings
                      ) -> Problem | None:
    """Why a follow-up is unusable: ``malformed`` (length, another script), ``identical``,
    ``self_contained`` or ``drifted``; None if it is usable."""
    if not 2 <= len(words(question)) <= MAX_TURN_WORDS:
        return "malformed", f"the follow-up has {len(words(question))} words"
    if m := _FOREIGN.search(question):
        return "malformed", f"the follow-up has a character of another script ({m.group(0)!r})"
    return contextual_problem(question, query, settings.min_faithful)


def _dialog(turns: list[dict[str, str]]) -> str:
    """The earlier turns as the extension prompt shows them (the last question is left out:
    the 0.5B copied it into the turns it wrote)."""
    return "\n".join(f"User: {t['question']}\nAssistant: {t['answer']}" for t in turns)


class ConversationWriter:
    """Runs one attempt's LLM calls and filters (see the module docstring)."""

    def __init__(self, llm: LLMLike, settings: ConversationSettings,
                 trace: Trace | None = None, neighbours: Neighbours | None = None,
                 qrels: dict[str, dict[str, int]] | None = None) -> None:
        self.llm, self.settings = llm, settings
        self.trace = trace if trace is not None else Trace()
        self.neighbours, self.qrels = neighbours, qrels or {}
        self._contracts: dict[tuple[str, int], PromptContract] = {}

    def contract(self, name: str, k: int = 0) -> PromptContract:
        """``name``'s contract; with ``k``, its schema asks for exactly ``k`` turns."""
        if (name, k) not in self._contracts:
            c = load_contract(name)
            if k:
                schema = copy.deepcopy(dict(c.schema or {}))
                schema["properties"]["turns"].update(minItems=k, maxItems=k)
                c = dataclasses.replace(c, schema=schema)
            self._contracts[(name, k)] = c
        return self._contracts[(name, k)]

    def _call(self, a: ConversationAttempt, name: str, values: dict[str, Any], k: int = 0
              ) -> Any:
        a.calls += 1
        result = run_step(self.llm, self.contract(name, k), [values], fallback=lambda v: None,
                          trace=self.trace, stage=STAGE, query_ids=[a.query_id],
                          structured=True)[0]
        return result.value if result.ok else None

    def run(self, a: ConversationAttempt, document: str) -> ConversationAttempt:
        """Write and filter attempt ``a`` (status, detail and the texts are set)."""
        start = time.perf_counter()
        self.trace.stage(STAGE).queries += 1  # an attempt is the health line's query
        a.status, a.detail = self._write(a, runlog.clip(document, self.settings.doc_chars))
        if a.status == "kept":
            a.link = link_kind(a.question, a.query)
        a.seconds = round(time.perf_counter() - start, 3)
        return a

    def _follow_up(self, a: ConversationAttempt, llm_question: str) -> Problem | None:
        """Set ``a.question`` by ``follow_up`` (see the module docstring); the problem that
        rejects the attempt, or None."""
        mode = self.settings.follow_up
        if mode == "rule":
            return self._rule(a) or _question_problem(a.question, a.query, self.settings)
        a.question, a.follow_up_by = llm_question, "llm"
        problem = _question_problem(a.question, a.query, self.settings)
        if mode == "llm" or problem and problem[0] not in RULE_REPLACES:
            return problem
        problem = problem or self._beyond_topic(a)
        if problem is None:
            return None
        if failed := self._rule(a):
            return failed[0], f"the LLM's follow-up was {problem[0]} ({problem[1]}); {failed[1]}"
        a.llm_follow_up, a.replaced = llm_question, problem[0]
        return _question_problem(a.question, a.query, self.settings)

    def _rule(self, a: ConversationAttempt) -> Problem | None:
        """The rule's follow-up into ``a.question``, or ``unusable_topic``."""
        try:
            a.question = rule_follow_up(a.query, a.topic)
        except UnusableTopic as exc:
            return "unusable_topic", str(exc)
        a.follow_up_by = "rule"
        return None

    def _beyond_topic(self, a: ConversationAttempt) -> Problem | None:
        """``unrecoverable`` foreseen: the follow-up leaves out more than ``max_lost`` key
        terms of the query that are not the topic's (the history is written about the
        topic)."""
        beyond = missing_terms(a.question, a.query) - key_terms(a.topic)
        if len(beyond) > self.settings.max_lost:
            return "unrecoverable", (f"it leaves out {len(beyond)} key term(s) of the query "
                                     f"beyond the topic: {', '.join(sorted(beyond)[:8])}")
        return None

    def _write(self, a: ConversationAttempt, document: str) -> tuple[str, str]:
        s = self.settings
        value = self._call(a, "contextualize_query", {"query": a.query})
        if not isinstance(value, dict) or not all(
                isinstance(value.get(f), str) and value[f].strip()
                for f in ("topic", "follow_up")):
            return "malformed", "no topic and follow-up question in the reply"
        a.topic = value["topic"].strip()
        if problem := self._follow_up(a, value["follow_up"].strip()):
            return problem
        if a.follow_up_by == "rule":
            dropped = [a.topic.strip(EDGE_CHARS)]  # as the rule strips it
        else:
            dropped = dropped_phrases(a.question, a.query)
        if self.neighbours is not None:
            found = self.neighbours.of(a.document, self.qrels.get(a.query_id, {}), dropped)
            if found is None:
                return "no_neighbour", (
                    f"no document that BM25 finds for the gold one holds {dropped} and is "
                    f"not judged relevant")
            a.history_doc = found
            document = runlog.clip(self.neighbours.texts[found], s.doc_chars)
        first, *more = s.rounds
        value = self._call(a, "generate_history", {
            "k": first, "phrases": "; ".join(f'"{p}"' for p in dropped), "document": document,
            "topic": a.topic.rstrip(".")}, k=first)
        if problem := _turns_problem(value, first):
            return "malformed", f"earlier turns: {problem}"
        a.turns = [{"question": t["question"].strip(), "answer": t["answer"].strip()}
                   for t in value["turns"]]
        if problem := history_problem(a.question, a.query, a.turns, document, s.min_support,
                                      max_lost=s.max_lost):
            return problem
        a.lost = sorted(lost_terms(a.question, a.query, a.turns))
        for k in more:
            value = self._call(a, "extend_conversation", {
                "k": k, "document": document,
                "conversation": _dialog(a.turns)}, k=k)
            if problem := _turns_problem(value, k):
                return "malformed", f"extension to {len(a.turns) + 1 + k} turns: {problem}"
            new = [{"question": t["question"].strip(), "answer": t["answer"].strip()}
                   for t in value["turns"]]
            # the later turns already hold the missing terms: recoverability is not asked
            if problem := history_problem(a.question, a.query, new, document, s.min_support,
                                          recoverable=False):
                reason, detail = problem
                return reason, f"extension to {len(a.turns) + 1 + k} turns: {detail}"
            a.turns = new + a.turns
        return "kept", ""


# --- the output directory ----------------------------------------------------------------


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _contract_sha256(name: str) -> str:
    c = load_contract(name)
    text = repr((c.system, c.template, c.examples, c.max_tokens, c.temperature, c.schema))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _best_document(judged: dict[str, int]) -> str | None:
    """The most relevant judged document (the first listed among equals); None if none is
    relevant."""
    best = max(judged.values(), default=0)
    return next((d for d, g in judged.items() if g == best), None) if best > 0 else None


# --- the run -------------------------------------------------------------------------------


def generate_conversations(
    dataset_dir: str | Path,
    out_dir: str | Path,
    *,
    split: str = "test",
    n: int = 50,
    turns: int = 3,
    seed: int = 0,
    llm: LLMLike | str | None = None,
    minutes: float | None = None,
    max_attempts: int | None = None,
    follow_up: str = "llm_or_rule",
    history_from: str = "neighbour",
    settings: ConversationSettings | None = None,
    trace: Trace | None = None,
    progress: bool = True,
    log: runlog.Log | None = None,
) -> runlog.RunReport:
    """Generate ``n`` conversations of ``turns`` turns ending in ``split``'s judged queries
    of the BEIR collection ``dataset_dir`` into ``out_dir`` (resuming what is there).

    ``llm``: an LLM client, a backend spec for :func:`~intentrank.llm.client.load_llm`, or
    None for the embedded model. ``follow_up``: ``llm``, ``rule`` or ``llm_or_rule``;
    ``history_from``: ``neighbour`` or ``gold`` (see the module docstring). ``settings``
    (when given) replaces ``split`` ... ``history_from``.
    Everything is checked before anything is written.
    """
    settings = settings or ConversationSettings(
        n=n, turns=turns, seed=seed, split=split, max_minutes=minutes,
        max_attempts=max_attempts, follow_up=follow_up, history_from=history_from)
    ds = load_dataset(dataset_dir)
    if settings.split not in ds.qrels:
        raise DataError(f"no judgments for split {settings.split!r} (splits: "
                        f"{', '.join(ds.splits) or 'none'})", Path(dataset_dir) / "qrels")
    queries, qrels = ds.split(settings.split)
    usable = sorted((q for q in queries if _best_document(qrels[q.id])),
                    key=lambda q: q.id)
    if not usable:
        raise DataError(f"no query of split {settings.split!r} has a relevant document",
                        ds.qrels_paths[settings.split])
    random.Random(settings.seed).shuffle(usable)
    if isinstance(llm, str) or llm is None:
        from intentrank.llm.client import load_llm

        llm = load_llm(llm or "embedded")
    identity = {**settings.identity(),
                "model": getattr(llm, "model", getattr(llm, "name", "?")),
                "corpus_sha256": _sha256(ds.corpus_path),
                "queries_sha256": _sha256(ds.root / "queries.jsonl")
                if (ds.root / "queries.jsonl").exists() else None,
                "qrels_sha256": _sha256(ds.qrels_paths[settings.split]),
                "prompts": {c: _contract_sha256(c)
                            for c in CONTRACTS[:2 if len(settings.rounds) == 1 else 3]}}
    out = Path(out_dir)
    attempts = runlog.open_run(out, identity, "generated conversation set",
                               ConversationAttempt, log, "conversations")
    gold = {_best_document(qrels[q.id]) for q in usable}
    every = settings.history_from == "neighbour"  # neighbours are sought in the whole corpus
    texts = {d.id: d.full_text() for d in ds.corpus() if every or d.id in gold}
    if missing := sorted(i for i in gold if i is not None and i not in texts):
        raise DataError(f"{len(missing)} relevant document(s) are not in the corpus "
                        f"(e.g. {missing[:5]})", ds.corpus_path)
    neighbours = Neighbours(texts, settings.doc_chars) if every else None
    linked = runlog.link_corpus(ds.corpus_path, out)
    writer = ConversationWriter(llm, settings, trace, neighbours, qrels)
    limit = min(settings.max_attempts or len(usable), len(usable))
    budget = runlog.Budget(settings.n, limit, settings.max_minutes)
    stopped_by = _loop(writer, usable, qrels, texts, attempts, out, budget, progress)
    if stopped_by == "max_attempts" and limit == len(usable):
        stopped_by = "queries"  # every usable query was tried
    info = _record(out, settings, identity, attempts, writer.trace, linked, ds,
                   len(usable), stopped_by, budget.seconds)
    kept = write_set(out, attempts, qrels, settings.split)
    return runlog.RunReport(out, kept, len(attempts), info)


def _loop(writer: ConversationWriter, usable: list, qrels: dict[str, dict[str, int]],
          texts: dict[str, str], attempts: list[ConversationAttempt], out: Path,
          budget: runlog.Budget, progress: bool) -> str:
    def attempt(i: int) -> ConversationAttempt:
        q = usable[i]
        doc = _best_document(qrels[q.id])
        return writer.run(ConversationAttempt(i, q.id, q.text, doc, history_doc=doc),
                          texts[doc])

    return runlog.run_attempts(out, attempts, budget, attempt,
                               lambda: write_set(out, attempts, qrels, writer.settings.split),
                               "conversations kept", "conv", progress)


def _record(out: Path, settings: ConversationSettings, identity: dict[str, Any],
            attempts: list[ConversationAttempt], trace: Trace, linked: str, ds: Any,
            usable: int, stopped_by: str, seconds: float) -> dict[str, Any]:
    reasons = Counter(a.status for a in attempts)
    kept = reasons.pop("kept", 0)
    runs = runlog.runs_so_far(out, trace, STAGE, stopped_by, seconds)
    total = sum(r["seconds"] for r in runs)
    written = [a for a in attempts if a.status != "malformed" and a.question]
    return runlog.write_info(out, {
        "identity": identity, "settings": asdict(settings), "rounds": settings.rounds,
        "dataset": str(Path(ds.root).resolve()), "corpus": str(ds.corpus_path.resolve()),
        "corpus_link": linked, "split": settings.split, "usable_queries": usable,
        "kept": kept, "attempts": len(attempts),
        "rejected": {r: reasons.get(r, 0) for r in REASONS},
        "kept_share": round(kept / len(attempts), 3) if attempts else None,
        "kept_share_of_written": round(kept / len(written), 3) if written else None,
        "links": dict(Counter(a.link for a in attempts if a.status == "kept")),
        "kept_with_a_lost_term": sum(bool(a.lost) for a in attempts if a.status == "kept"),
        "follow_up": settings.follow_up, "history_from": settings.history_from,
        # attempts whose follow-up the rule wrote (llm_or_rule: replacing the LLM's)
        "rule_follow_ups": sum(a.follow_up_by == "rule" for a in attempts),
        "rule_replaced": dict(Counter(a.replaced for a in attempts if a.replaced)),
        "kept_follow_ups": dict(Counter(a.follow_up_by for a in attempts
                                        if a.status == "kept")),
        "llm_calls": sum(a.calls for a in attempts),
        "runs": runs,
        "seconds_per_attempt": round(total / len(attempts), 1) if attempts else None,
        "seconds_per_kept": round(total / kept, 1) if kept else None,
    })
