"""Answer generation (method 5's last step): a concise answer from each ranking's top
``top_k`` (N_ans) documents, citing them as ``[1]``..``[n]``; sets ``Query.answer``.

How it abstains and how it cites are options (docs/benchmarks.md "Defaults" measures both):

- ``abstain: relevance`` (default): answer only when the cross-encoder scores some given
  passage ``abstain_threshold`` or above against the question, else abstain with no LLM call
  (counted ``gated``); ``abstain: llm`` (the paper's): the prompt offers the abstention
  sentence and the LLM decides.
- ``cite: posthoc`` (default): the LLM answers without a citation format and each sentence is
  cited by the passage the cross-encoder finds supports it (``answer/attribution.py``; below
  ``support_threshold`` a sentence gets no citation, counted ``unsupported``); ``cite: llm``
  (the paper's): the LLM writes the ``[n]`` markers and they are checked.

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

from intentrank.answer.attribution import attribute, relevant_enough
from intentrank.answer.citations import ABSTENTION, check_citations, is_abstention
from intentrank.core.params import check_choice, check_int, check_number
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


ABSTAIN = ("relevance", "llm")
CITE = ("posthoc", "llm")


class AnswerGenerator(Stage):
    """Answer each query from its top ``top_k`` documents with numbered citations (see the
    module doc). ``max_words``: the answer length the prompt asks for; ``scorer``: the
    cross-encoder of ``abstain: relevance`` and ``cite: posthoc``."""

    def __init__(self, llm: LLMLike, index: IndexLike, top_k: int = 5, doc_words: int = 200,
                 context_words: int = 2000, max_words: int = 80,
                 max_tokens: int | None = None, name: str = "answer", *,
                 abstain: str = "relevance", abstain_threshold: float = 0.2,
                 cite: str = "posthoc", support_threshold: float = 0.1,
                 max_citations: int = 3, scorer: Any = None) -> None:
        self.top_k = check_int("top_k", top_k)
        self.doc_words = check_int("doc_words", doc_words)
        self.context_words = check_int("context_words", context_words)
        self.max_words = check_int("max_words", max_words)
        self.abstain = check_choice("abstain", abstain, ABSTAIN)
        self.cite = check_choice("cite", cite, CITE)
        self.abstain_threshold = check_number("abstain_threshold", abstain_threshold,
                                              minimum=0, maximum=1)
        self.support_threshold = check_number("support_threshold", support_threshold,
                                              minimum=0, maximum=1)
        self.max_citations = check_int("max_citations", max_citations)
        self.contract = load_contract("answer_plain" if self.plain else "answer_with_citations")
        self.max_tokens = check_int("max_tokens", self.contract.max_tokens
                                    if max_tokens is None else max_tokens)
        if scorer is None and (self.abstain == "relevance" or self.cite == "posthoc"):
            from intentrank.models.cross_encoder import load_cross_encoder

            scorer = load_cross_encoder()
        self.llm, self.index, self.name, self.scorer = llm, index, name, scorer

    @property
    def plain(self) -> bool:
        """Whether the prompt neither offers abstention nor asks for citations."""
        return self.abstain == "relevance" and self.cite == "posthoc"

    def words_per_document(self, n_docs: int) -> int:
        return max(1, min(self.doc_words, self.context_words // max(n_docs, 1)))

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        sources = [tuple(r.doc_ids[:self.top_k]) for r in rankings]
        texts = {i: [self.index.doc_text(d) for d in s] for i, s in enumerate(sources) if s}
        gated = {i for i, t in texts.items() if self.abstain == "relevance" and not
                 relevant_enough(rankings[i].query.text, t, self.scorer,
                                 self.abstain_threshold)[0]}
        trace.count(path_id, "gated", len(gated))
        todo = [i for i in texts if i not in gated]
        items = []
        for i in todo:
            words = self.words_per_document(len(texts[i]))
            trace.count(path_id, "clipped_documents",
                        sum(len(t.split()) > words for t in texts[i]))
            items.append({"query": rankings[i].query.text.strip(), "max_words": self.max_words,
                          "documents": format_passages(texts[i], words)})
        results = run_step(self.llm, self.contract, items,
                           parse=lambda reply, item: reply.text, fallback=lambda item: None,
                           trace=trace, stage=path_id,
                           query_ids=[rankings[i].query.id for i in todo],
                           max_tokens=self.max_tokens)
        replies: dict[int, str | None] = {i: r.value for i, r in zip(todo, results, strict=True)}
        out = []
        for i, ranking in enumerate(rankings):
            if i in gated:
                answer = Answer(ABSTENTION, sources[i], (), path_id)
            elif i not in replies:
                answer = Answer("", (), (), path_id, "no_documents")
            elif self.cite == "posthoc":
                answer = self._attributed(replies[i], sources[i], texts[i], path_id, trace)
            else:
                answer = make_answer(replies[i], sources[i], path_id)
            self._count(answer, ranking.query.id, trace, path_id, replies.get(i))
            out.append(Ranking(replace(ranking.query, answer=answer), ranking.docs))
        return out

    def _attributed(self, reply: str | None, sources: tuple[str, ...], texts: list[str],
                    path_id: str, trace: Trace) -> Answer:
        """The reply with citations attributed by the cross-encoder (``cite: posthoc``)."""
        text = (reply or "").strip()
        if not text:
            return Answer("", sources, (), path_id, "empty")
        if is_abstention(text):
            return Answer(text, sources, (), path_id)
        done = attribute(text, texts, self.scorer, self.support_threshold,
                         self.max_citations)
        trace.count(path_id, "sentences", done.sentences)
        trace.count(path_id, "unsupported", done.unsupported)
        return Answer(done.text, sources, done.citations, path_id,
                      "" if done.citations else "no_citation", done.evidence)

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
        scorer = getattr(self.scorer, "name", None)
        return self.described(self.llm.name, top_k=self.top_k, doc_words=self.doc_words,
                              context_words=self.context_words, max_words=self.max_words,
                              max_tokens=self.max_tokens, abstain=self.abstain,
                              abstain_threshold=self.abstain_threshold, cite=self.cite,
                              support_threshold=self.support_threshold,
                              max_citations=self.max_citations, scorer=scorer,
                              prompt=self.contract.name)


@register_stage("answer")
def _answer(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``answer: {top_k: 5, doc_words: 200, context_words: 2000, max_words: 80, abstain:
    relevance, abstain_threshold: 0.2, cite: posthoc, support_threshold: 0.1, max_citations:
    3}``: a concise
    answer with numbered citations from the top ``top_k`` documents (sets Query.answer)."""
    llm = ctx.step_llm("answer", params)
    if params.get("abstain", "relevance") == "relevance" or params.get("cite",
                                                                        "posthoc") == "posthoc":
        from intentrank.rerank.cross_encoder import shared_scorer

        # the bundled model as the shipped configs' cross_encoder steps load it: one copy
        params["scorer"] = shared_scorer(ctx, backend="onnx", max_length=128)
    return AnswerGenerator(llm, ctx.require_index("answer"), **params)
