"""Answer generation (method 5's last step): a concise answer from each ranking's top
``top_k`` (N_ans) documents, citing them as ``[1]``..``[n]``; sets ``Query.answer``.

``abstain`` (``similarity``, the default; ``relevance``; ``llm``, the paper's) decides whether
the LLM is asked at all (a gated query abstains with no call, counted ``gated``), ``cite``
(``context``, the default; ``posthoc``; ``llm``, the paper's) how the citations are made
(``answer/attribution.py``); docs/knowledge.md describes each option and its thresholds.

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

from intentrank.answer.attribution import (
    SentenceSimilarity,
    attribute,
    most_relevant,
    relevant_enough,
)
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


ABSTAIN = ("similarity", "relevance", "llm")  # the first is the default
CITE = ("context", "posthoc", "llm")
DOC_WORDS = 200  # words of each passage the LLM is shown, by default
# the thresholds' defaults by method: cross-encoder scores (0-1) and embedder cosines differ
ABSTAIN_THRESHOLD = {"relevance": 0.2, "similarity": 0.45}
SUPPORT_THRESHOLD = {"posthoc": 0.1, "context": 0.45}


def uses_cross_encoder(abstain: str, cite: str) -> bool:
    """Whether these methods need the cross-encoder: the relevance gate, or citations
    attributed after the fact (``cite: context`` anchors on its most relevant passage)."""
    return abstain == "relevance" or cite != "llm"


class AnswerGenerator(Stage):
    """Answer each query from its top ``top_k`` documents with numbered citations (see the
    module doc). ``max_words``: the answer length the prompt asks for; ``scorer``: the
    cross-encoder of ``abstain: relevance`` and ``cite: posthoc|context``; ``embedder``: the
    embedder of ``abstain: similarity`` and ``cite: context`` (default: the index's).
    A threshold left None takes its method's default (``ABSTAIN_THRESHOLD``,
    ``SUPPORT_THRESHOLD``)."""

    def __init__(self, llm: LLMLike, index: IndexLike, top_k: int = 5,
                 doc_words: int = DOC_WORDS,
                 context_words: int = 2000, max_words: int = 80,
                 max_tokens: int | None = None, name: str = "answer", *,
                 abstain: str = ABSTAIN[0], abstain_threshold: float | None = None,
                 cite: str = CITE[0], support_threshold: float | None = None,
                 max_citations: int = 3, cite_margin: float = 0.05, scorer: Any = None,
                 embedder: Any = None) -> None:
        self.top_k = check_int("top_k", top_k)
        self.doc_words = check_int("doc_words", doc_words)
        self.context_words = check_int("context_words", context_words)
        self.max_words = check_int("max_words", max_words)
        self.abstain = check_choice("abstain", abstain, ABSTAIN)
        self.cite = check_choice("cite", cite, CITE)
        self.abstain_threshold = check_number(
            "abstain_threshold", ABSTAIN_THRESHOLD.get(self.abstain, 0.0)
            if abstain_threshold is None else abstain_threshold, minimum=0, maximum=1)
        self.support_threshold = check_number(
            "support_threshold", SUPPORT_THRESHOLD.get(self.cite, 0.0)
            if support_threshold is None else support_threshold, minimum=0, maximum=1)
        self.max_citations = check_int("max_citations", max_citations)
        self.cite_margin = check_number("cite_margin", cite_margin, minimum=0, maximum=1)
        self.contract = load_contract("answer_plain" if self.plain else "answer_with_citations")
        self.max_tokens = check_int("max_tokens", self.contract.max_tokens
                                    if max_tokens is None else max_tokens)
        if scorer is None and uses_cross_encoder(self.abstain, self.cite):
            from intentrank.models.cross_encoder import load_cross_encoder

            scorer = load_cross_encoder()
        self._embedder, self._similarity = embedder, None
        self.llm, self.index, self.name, self.scorer = llm, index, name, scorer

    @property
    def plain(self) -> bool:
        """Whether the prompt neither offers abstention nor asks for citations."""
        return self.abstain != "llm" and self.cite != "llm"

    @property
    def similarity(self) -> SentenceSimilarity | None:
        """The embedder's scorer of ``abstain: similarity`` and ``cite: context``, loaded on
        first use (the given embedder, else the index's, else the default one)."""
        if self._similarity is None and (self.abstain == "similarity" or self.cite == "context"):
            embedder = self._embedder or getattr(self.index, "embedder", None)
            if embedder is None:
                from intentrank.models.embedder import load_embedder

                embedder = load_embedder()
            self._similarity = SentenceSimilarity(embedder)
        return self._similarity

    @property
    def gate(self) -> Any:
        """The scorer of the relevance gate (None: ``abstain: llm``, no gate)."""
        if self.abstain == "llm":
            return None
        return self.scorer if self.abstain == "relevance" else self.similarity

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        path_id = trace.path_of(self)
        sources = [tuple(r.doc_ids[:self.top_k]) for r in rankings]
        texts = {i: [self.index.doc_text(d) for d in s] for i, s in enumerate(sources) if s}
        gated = {i for i, t in texts.items() if self.gate is not None and not
                 relevant_enough(rankings[i].query.text, t, self.gate,
                                 self.abstain_threshold)[0]}
        trace.count(path_id, "gated", len(gated))
        todo = [i for i in texts if i not in gated]
        items = []
        for i in todo:
            words = max(1, min(self.doc_words, self.context_words // len(texts[i])))
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
            elif self.cite != "llm":
                answer = self._attributed(replies[i], sources[i], texts[i], path_id, trace,
                                          ranking.query.text)
            else:
                answer = make_answer(replies[i], sources[i], path_id)
            self._count(answer, ranking.query.id, trace, path_id, replies.get(i))
            out.append(Ranking(replace(ranking.query, answer=answer), ranking.docs))
        return out

    def _attributed(self, reply: str | None, sources: tuple[str, ...], texts: list[str],
                    path_id: str, trace: Trace, question: str) -> Answer:
        """The reply with citations attributed after the fact (``cite: posthoc`` by the
        cross-encoder, sentence alone; ``cite: context`` by the embedder in the question's
        context, plus the passage most relevant to the question)."""
        text = (reply or "").strip()
        if not text:
            return Answer("", sources, (), path_id, "empty")
        if is_abstention(text):
            return Answer(text, sources, (), path_id)
        if self.cite == "context":
            done = attribute(text, texts, self.similarity, self.support_threshold,
                             self.max_citations, context=question, margin=self.cite_margin,
                             anchor=most_relevant(question, texts, self.scorer))
        else:
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
                              max_citations=self.max_citations,
                              cite_margin=self.cite_margin if self.cite == "context" else None,
                              scorer=scorer, embedder=self._embedder_name(),
                              prompt=self.contract.name)

    def _embedder_name(self) -> str | None:
        """The embedder's name without loading it (the index's dense model by default)."""
        if self.abstain != "similarity" and self.cite != "context":
            return None
        e = self._embedder
        if e is None:
            dense = getattr(getattr(self.index, "settings", None), "dense", None)
            return getattr(dense, "model", None) or "minilm"
        return str(getattr(e, "name", None) or type(e).__name__)


@register_stage("answer")
def _answer(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``answer: {top_k: 5, doc_words: 200, context_words: 2000, max_words: 80, abstain:
    similarity, abstain_threshold: 0.45, cite: context, support_threshold: 0.45,
    max_citations: 3, cite_margin: 0.05}``: a concise answer with numbered citations from
    the top ``top_k`` documents (sets Query.answer)."""
    llm = ctx.step_llm("answer", params)
    if uses_cross_encoder(params.get("abstain", ABSTAIN[0]), params.get("cite", CITE[0])):
        from intentrank.rerank.cross_encoder import shared_scorer

        # the bundled model as the shipped configs' cross_encoder steps load it: one copy
        params["scorer"] = shared_scorer(ctx, backend="onnx", max_length=128)
    return AnswerGenerator(llm, ctx.require_index("answer"), **params)
