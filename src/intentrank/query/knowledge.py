"""Knowledge element declaration and summarisation (knowledge-aware diverse reranking,
method 5).

For each of the top ``n_know`` documents of a ranking, one LLM call (prompt
``declare_knowledge``) lists the knowledge elements the question needs (at most 4) and the
numbers of those this document provides; a second call (``summarize_knowledge``) condenses
every declared element into two. They go onto the query's derived-text stack as kind
``knowledge`` (tagged with the stage's path id) for ``per_element``. ``n_know = 0`` declares
the elements from the question alone (``declare_knowledge_question``, no documents): the
paper's ablation.

The document's elements are a subset of the question's by construction (numbers into the
question's list); a number outside the list is a ``subset_violations`` count (and event) and
is dropped. Fallbacks, all counted: a declaration reply that cannot be read declares nothing
for that document; a summary that cannot be read keeps the two elements provided by the most
documents (ties: first declared); a query with nothing declared gets no elements, and
``per_element`` leaves its ranking as it was.

``split: auto`` (not in the paper) first asks the LLM how many separate things each question
asks about (prompt ``question_parts``); a question of one part gets no elements (counter
``single_part``), so ``per_element`` keeps its incoming ranking, and its declaration calls are
not made. An unreadable answer counts as several parts (the step's counted fallback).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from intentrank.core.params import ParameterError, check_bool, check_choice, check_int
from intentrank.core.protocols import IndexLike, LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.parsing import normalise, read_json_object
from intentrank.llm.prompts import load_contract
from intentrank.llm.step import run_step
from intentrank.query.aspects import distinct
from intentrank.query.dialog import clip_words
from intentrank.types import Ranking, Trace

KIND = "knowledge"
N_ELEMENTS = 2
FORMS = ("phrases", "questions")
SPLITS = ("always", "auto")


def contract_names(n_know: int, form: str) -> tuple[str, str]:
    """The declaration and summary prompts for ``n_know`` (0: from the question alone) and
    the element ``form``."""
    declare = "declare_knowledge" if n_know else "declare_knowledge_question"
    suffix = "_subquestions" if form == "questions" else ""
    return declare + suffix, "summarize_knowledge" + suffix


def _clean(items: Any, limit: int) -> list[str]:
    """Distinct non-blank strings (:func:`~intentrank.query.aspects.distinct`), at most
    ``limit``."""
    if not isinstance(items, list):
        raise ValueError(f"expected a list of strings, got {type(items).__name__}")
    return distinct(items, limit)


@dataclass(frozen=True)
class Declaration:
    """What one call declared: the question's elements, the 1-based numbers of those the
    document provides, and the numbers it gave outside the list (dropped)."""

    needed: tuple[str, ...]
    provided: tuple[int, ...] = ()
    violations: tuple[Any, ...] = ()


def parse_declaration(reply: str) -> Declaration:
    """``{"needed": [...], "provided": [numbers]}`` (``provided`` optional, for the
    question-only prompt). ValueError when no element is listed."""
    obj = read_json_object(reply)
    needed = _clean(obj.get("needed"), 4)
    if not needed:
        raise ValueError("no knowledge element listed")
    raw = obj.get("provided", [])
    raw = raw if isinstance(raw, list) else [raw]
    provided, violations = [], []
    for n in raw:
        ok = isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(needed)
        if ok and n not in provided:
            provided.append(n)
        elif not ok:
            violations.append(n)
    return Declaration(tuple(needed), tuple(provided), tuple(violations))


def element_support(declarations: list[Declaration]) -> dict[str, int]:
    """Every declared element (first spelling kept) -> how many documents provide it, in
    first-declared order."""
    support: dict[str, int] = {}
    spelling: dict[str, str] = {}
    for decl in declarations:
        for i, element in enumerate(decl.needed, 1):
            key = normalise(element)
            name = spelling.setdefault(key, element)
            support[name] = support.get(name, 0) + (i in decl.provided)
    return support


def top_supported(support: Mapping[str, int], n: int = N_ELEMENTS) -> list[str]:
    """The ``n`` elements provided by the most documents (ties: first declared)."""
    order = sorted(enumerate(support.items()), key=lambda x: (-x[1][1], x[0]))
    return [name for _, (name, _) in order[:n]]


def parse_summary(reply: str) -> list[str]:
    """``{"elements": [two strings]}``: ValueError unless two distinct elements are left."""
    elements = _clean(read_json_object(reply).get("elements"), N_ELEMENTS)
    if len(elements) < N_ELEMENTS:
        raise ValueError(f"{len(elements)} usable element(s), need {N_ELEMENTS}")
    return elements


def parse_parts(reply: str) -> int:
    """``{"parts": N}`` with N a whole number from 1 to 4; ValueError otherwise."""
    parts = read_json_object(reply).get("parts")
    if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= 4:
        raise ValueError(f"parts must be a whole number from 1 to 4, got {parts!r}")
    return parts


def knowledge_of(ranking_or_query: Any) -> list[str]:
    """The knowledge elements a ``knowledge`` stage pushed (empty when none)."""
    query = getattr(ranking_or_query, "query", ranking_or_query)
    return query.derived_of(KIND)


class KnowledgeElements(Stage):
    """Declare, per top-``n_know`` document, the knowledge elements each query needs and
    those the document provides, then condense them into two (see the module doc).

    ``doc_words`` clips each document in the prompt. ``structured`` (default on) sends the
    contracts' JSON schemas for constrained decoding. Counters: ``declarations``,
    ``subset_violations``, ``elements`` (pushed), ``no_elements`` (queries left without),
    ``summary_fallbacks``; the step's own ``fallbacks``. ``form`` is ``phrases`` (the
    paper's) or ``questions`` (self-contained sub-questions). ``split`` is ``always`` (the
    paper's) or ``auto`` (only questions the LLM finds several parts in get elements;
    counter ``single_part``)."""

    def __init__(self, llm: LLMLike, index: IndexLike | None, n_know: int = 5,
                 doc_words: int = 200, structured: bool = True, form: str = FORMS[0],
                 split: str = SPLITS[0], name: str = "knowledge") -> None:
        self.n_know = check_int("n_know", n_know, minimum=0)
        self.doc_words = check_int("doc_words", doc_words)
        check_bool("structured", structured)
        if self.n_know and index is None:
            raise ParameterError("knowledge with n_know > 0 needs an index (document texts)")
        self.form = check_choice("form", form, FORMS)
        self.split = check_choice("split", split, SPLITS)
        self.parts = load_contract("question_parts") if self.split == "auto" else None
        declare, summarize = contract_names(self.n_know, self.form)
        self.declare, self.summarize = load_contract(declare), load_contract(summarize)
        self.llm, self.index, self.structured, self.name = llm, index, structured, name

    def _several_parts(self, rankings: list[Ranking], trace: Trace, path_id: str
                       ) -> list[bool]:
        """Per ranking: does its question ask about several things (always, unless
        ``split: auto`` and the LLM answers one part)?"""
        if self.parts is None:
            return [True] * len(rankings)
        results = run_step(self.llm, self.parts,
                           [{"query": r.query.text.strip()} for r in rankings],
                           parse=lambda reply, item: parse_parts(reply.text),
                           fallback=lambda item: 2, trace=trace, stage=path_id,
                           query_ids=[r.query.id for r in rankings],
                           structured=self.structured)
        several = [result.value > 1 for result in results]
        trace.count(path_id, "single_part", several.count(False))
        return several

    def _declare(self, rankings: list[Ranking], trace: Trace, path_id: str
                 ) -> list[list[Declaration] | None]:
        """Per ranking, what its declaration calls returned (None: a one-part question under
        ``split: auto``, not declared)."""
        several = self._several_parts(rankings, trace, path_id)
        items, owners, qids = [], [], []
        for i, ranking in enumerate(rankings):
            if not several[i]:
                continue
            question = ranking.query.text.strip()
            if not self.n_know:
                items.append({"query": question})
                owners.append(i)
                qids.append(ranking.query.id)
                continue
            for doc in ranking.docs[:self.n_know]:
                text = clip_words(self.index.doc_text(doc.doc_id), self.doc_words)  # type: ignore[union-attr]
                items.append({"query": question, "document": text})
                owners.append(i)
                qids.append(ranking.query.id)
        results = run_step(self.llm, self.declare, items,
                           parse=lambda reply, item: parse_declaration(reply.text),
                           fallback=lambda item: None, trace=trace, stage=path_id,
                           query_ids=qids, structured=self.structured)
        out: list[list[Declaration] | None] = [[] if s else None for s in several]
        for owner, qid, result in zip(owners, qids, results, strict=True):
            if result.value is None:
                continue
            out[owner].append(result.value)  # type: ignore[union-attr]
            if result.value.violations:
                trace.count(path_id, "subset_violations", len(result.value.violations))
                trace.log(path_id, "repair", qid, detail="provided numbers outside the "
                          f"declared elements dropped: {list(result.value.violations)}")
        trace.count(path_id, "declarations", sum(len(d or ()) for d in out))
        return out

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        declared = self._declare(rankings, trace, path_id)
        supports = [element_support(d or []) for d in declared]
        todo = [i for i, s in enumerate(supports) if len(s) > N_ELEMENTS]
        elements = [list(s) for s in supports]  # two or fewer: nothing to condense
        results = run_step(
            self.llm, self.summarize,
            [{"query": rankings[i].query.text.strip(),
              "elements": "\n".join(f"{n}. {e}" for n, e in enumerate(
                  top_supported(supports[i], len(supports[i])), 1))} for i in todo],
            parse=lambda reply, item: parse_summary(reply.text),
            fallback=lambda item: None, trace=trace, stage=path_id,
            query_ids=[rankings[i].query.id for i in todo], structured=self.structured)
        for i, result in zip(todo, results, strict=True):
            if result.value is None:
                trace.count(path_id, "summary_fallbacks")
                elements[i] = top_supported(supports[i])
            else:
                elements[i] = result.value
        out = []
        for ranking, mine, decls in zip(rankings, elements, declared, strict=True):
            trace.count(path_id, "elements", len(mine))
            if not mine and decls is not None:
                trace.count(path_id, "no_elements")
            out.append(Ranking(ranking.query.with_derived(KIND, mine, path_id), ranking.docs))
        return out

    def describe(self) -> str:
        return self.described(self.llm.name, n_know=self.n_know, doc_words=self.doc_words,
                              structured=self.structured,
                              form=None if self.form == FORMS[0] else self.form,
                              split=None if self.split == SPLITS[0] else self.split)


@register_stage("knowledge")
def _knowledge(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``knowledge: {n_know: 5, doc_words: 200, structured: true, form: phrases|questions,
    split: always|auto}``: the two knowledge elements each query needs, declared over its top
    ``n_know`` documents (as short phrases, or as self-contained sub-questions; with ``split:
    auto`` only for questions the LLM finds several parts in)."""
    n_know = params.get("n_know", 5)
    index = ctx.require_index("knowledge") if n_know else None
    return KnowledgeElements(ctx.step_llm("knowledge", params), index, **params)
