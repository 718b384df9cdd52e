"""Answer generation (method 5's last step): a concise answer from each ranking's top
``top_k`` (N_ans) documents, citing them as ``[1]``..``[n]``; sets ``Query.answer``.

Documents are clipped to ``doc_words`` words each and, together, to ``context_words`` (so
N_ans = 20 fits the embedded model's 4096-token context). Fallbacks, counted as
``fallback.<reason>`` and logged: ``no_documents`` (an empty ranking: no call, empty answer),
``empty`` (a blank reply or a failed call), ``bad_citation`` (numbers not given, e.g. [7] with
five documents, removed from the text), ``no_citation`` (an answer that cites nothing; kept).
An abstention ("The documents do not answer this question.") is counted as ``abstentions``
and is not a fallback. The ranking itself is not changed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from intentrank.answer.citations import check_citations, is_abstention
from intentrank.core.params import check_int
from intentrank.core.protocols import IndexLike, LLMLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.llm.prompts import format_passages, load_contract
from intentrank.llm.step import run_step
from intentrank.types import Answer, Ranking, Trace


def make_answer(reply: str | None, sources: tuple[str, ...], stage: str) -> Answer:
    """The Answer for one reply (None: the call failed) over ``sources``, citations checked."""
    text = (reply or "").strip()
    if not text:
        return Answer("", sources, (), stage, "empty")
    checked = check_citations(text, len(sources))
    if checked.invalid:
        return Answer(checked.text, sources, checked.valid, stage, "bad_citation")
    if not checked.valid and not is_abstention(checked.text):
        return Answer(checked.text, sources, (), stage, "no_citation")
    return Answer(checked.text, sources, checked.valid, stage)


class AnswerGenerator(Stage):
    """Answer each query from its top ``top_k`` documents with numbered citations (see the
    module doc). ``max_words``: the answer length the prompt asks for."""

    def __init__(self, llm: LLMLike, index: IndexLike, top_k: int = 10, doc_words: int = 200,
                 context_words: int = 2000, max_words: int = 80,
                 max_tokens: int | None = None, name: str = "answer") -> None:
        self.top_k = check_int("top_k", top_k)
        self.doc_words = check_int("doc_words", doc_words)
        self.context_words = check_int("context_words", context_words)
        self.max_words = check_int("max_words", max_words)
        self.contract = load_contract("answer_with_citations")
        self.max_tokens = check_int("max_tokens", self.contract.max_tokens
                                    if max_tokens is None else max_tokens)
        self.llm, self.index, self.name = llm, index, name

    def words_per_document(self, n_docs: int) -> int:
        return max(1, min(self.doc_words, self.context_words // max(n_docs, 1)))

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        sources = [tuple(r.doc_ids[:self.top_k]) for r in rankings]
        todo = [i for i, s in enumerate(sources) if s]
        items = []
        for i in todo:
            texts = [self.index.doc_text(d) for d in sources[i]]
            words = self.words_per_document(len(texts))
            trace.count(path_id, "clipped_documents", sum(len(t.split()) > words for t in texts))
            items.append({"query": rankings[i].query.text.strip(), "max_words": self.max_words,
                          "documents": format_passages(texts, words)})
        results = run_step(self.llm, self.contract, items,
                           parse=lambda reply, item: reply.text, fallback=lambda item: None,
                           trace=trace, stage=path_id,
                           query_ids=[rankings[i].query.id for i in todo],
                           max_tokens=self.max_tokens)
        replies: dict[int, str | None] = {i: r.value for i, r in zip(todo, results, strict=True)}
        out = []
        for i, ranking in enumerate(rankings):
            if i in replies:
                answer = make_answer(replies[i], sources[i], path_id)
            else:
                answer = Answer("", (), (), path_id, "no_documents")
            self._count(answer, ranking.query.id, trace, path_id, replies.get(i))
            out.append(Ranking(replace(ranking.query, answer=answer), ranking.docs))
        return out

    @staticmethod
    def _count(answer: Answer, query_id: str, trace: Trace, path_id: str,
               reply: str | None) -> None:
        trace.count(path_id, "answers")
        trace.count(path_id, "citations", len(answer.citations))
        if is_abstention(answer.text):
            trace.count(path_id, "abstentions")
        if answer.fallback and not (answer.fallback == "empty" and reply is None):
            # (a failed call, reply None, was counted as llm_failed by the step)
            trace.count(path_id, "fallbacks")
            trace.count(path_id, f"fallback.{answer.fallback}")
            trace.log(path_id, "fallback", query_id, reason=answer.fallback,
                      detail=f"answer: {answer.text[:120]!r}")

    def describe(self) -> str:
        return self.described(self.llm.name, top_k=self.top_k, doc_words=self.doc_words,
                              context_words=self.context_words, max_words=self.max_words,
                              max_tokens=self.max_tokens)


@register_stage("answer")
def _answer(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``answer: {top_k: 10, doc_words: 200, context_words: 2000, max_words: 80}``: a concise
    answer with numbered citations from the top ``top_k`` documents (sets Query.answer)."""
    return AnswerGenerator(ctx.llm(), ctx.require_index("answer"), **params)
