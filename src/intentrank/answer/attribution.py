"""Citations that follow the retrieval models, not the LLM, and abstention as a decision.

- :func:`attribute` (``cite: posthoc``): the LLM's answer is split into sentences and each is
  cited by the given passage a cross-encoder scores highest against it; a sentence no passage
  supports at ``threshold`` or above gets no citation and counts as unsupported.
- ``cite: context``: the same per-sentence attribution, but each sentence is scored in the
  question's context ("question + sentence") by :class:`SentenceSimilarity`, citing the
  passages within ``margin`` of the best one; the first sentence also cites the passage the
  cross-encoder finds most relevant to the question (``anchor``). So answers that restate the
  question ("Yes, X.") or say only "Yes." are attributed by what they answer.
- :func:`relevant_enough` (``abstain: relevance`` with the cross-encoder, ``abstain:
  similarity`` with :class:`SentenceSimilarity`): answer only when at least one given
  passage scores ``threshold`` or above against the question; otherwise abstain without
  calling the LLM.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from intentrank.answer.citations import check_citations
from intentrank.data.ingest.labels import source_label
from intentrank.measures.ncom import tokens
from intentrank.models.cross_encoder import PairScorer
from intentrank.types import Answer, Evidence

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_END = re.compile(r"[.!?]+[\"')\]]*\s*$")
MIN_WORDS = 3  # shorter pieces ("Yes.") are kept with the next sentence's citation


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (a piece under :data:`MIN_WORDS` words joins the next)."""
    pieces = [p.strip() for p in _SENTENCE_END.split(text.strip()) if p.strip()]
    out: list[str] = []
    carry = ""
    for piece in pieces:
        piece = f"{carry} {piece}".strip()
        if len(piece.split()) < MIN_WORDS:
            carry = piece
        else:
            out.append(piece)
            carry = ""
    if carry:
        if out:
            out[-1] = f"{out[-1]} {carry}"
        else:
            out.append(carry)
    return out


def strip_markers(text: str) -> str:
    """``text`` without ``[n]``, ``[1, 2]`` or ``[2-4]`` markers (none cites a source of 0)."""
    return check_citations(text, 0).text


def best_snippet(sentence: str, passage: str) -> str:
    """The sentence of ``passage`` sharing the most words with ``sentence``."""
    words = set(tokens(sentence))
    candidates = split_sentences(passage) or [passage]
    return max(candidates, key=lambda s: len(words & set(tokens(s))))


@dataclass(frozen=True)
class Attributed:
    """An answer with citations attributed: the text with ``[n]`` after each supported
    sentence, the cited numbers (first-cited order), the evidence (one per citation of a
    sentence, one for each unsupported sentence) and the number of sentences."""

    text: str
    citations: tuple[int, ...]
    evidence: tuple[Evidence, ...]
    sentences: int = 0

    @property
    def unsupported(self) -> int:
        """Sentences no passage supports (one Evidence each, ``n`` None)."""
        return sum(e.n is None for e in self.evidence)


class SentenceSimilarity:
    """A :class:`PairScorer` by an embedder: the cosine between the first text and the
    closest sentence of the second (a passage), so a statement is matched to the sentence
    that says it, wherever it sits in the passage. Each distinct text is encoded once per
    call (first texts as queries, passage sentences as passages), and the vectors of the
    last ``memory`` passage sentences are kept: the gate and the citations of one answer
    read the same passages."""

    name = "sentence-cosine"

    def __init__(self, embedder: Any, memory: int = 4096) -> None:
        self.embedder = embedder
        self.memory = memory
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def _passage_vectors(self, sentences: list[str]) -> np.ndarray:
        """The passage vectors of ``sentences`` (distinct), encoding only those not kept."""
        with self._lock:
            found = {s: self._vectors[s] for s in sentences if s in self._vectors}
        missing = [s for s in sentences if s not in found]
        if missing:
            found.update(zip(missing, np.asarray(self.embedder.encode_passages(missing),
                                                 dtype=np.float32), strict=True))
        with self._lock:
            for sentence in sentences:
                self._vectors[sentence] = found[sentence]
                self._vectors.move_to_end(sentence)
            while len(self._vectors) > self.memory:
                self._vectors.popitem(last=False)
        return np.stack([found[s] for s in sentences])

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 8) -> np.ndarray:
        """One cosine per ``(text, passage)`` pair (0.0 for an empty passage)."""
        firsts = list(dict.fromkeys(a for a, _ in pairs))
        pieces = {p: split_sentences(p) or [p] for p in dict.fromkeys(b for _, b in pairs)}
        flat = list(dict.fromkeys(s for sents in pieces.values() for s in sents if s.strip()))
        if not flat:
            return np.zeros(len(pairs), dtype=np.float32)
        q = np.asarray(self.embedder.encode_queries(firsts), dtype=np.float32)
        v = self._passage_vectors(flat)
        cos = _unit(q) @ _unit(v).T
        row = {a: i for i, a in enumerate(firsts)}
        col = {s: j for j, s in enumerate(flat)}
        out = [max((float(cos[row[a], col[s]]) for s in pieces[b] if s in col), default=0.0)
               for a, b in pairs]
        return np.asarray(out, dtype=np.float32)


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def attribute(answer: str, passages: Sequence[str], scorer: PairScorer,
              threshold: float, max_citations: int = 1, *, context: str = "",
              margin: float | None = None, anchor: int | None = None) -> Attributed:
    """Cite each sentence of ``answer`` by the passages (1-based) ``scorer`` rates at least
    ``threshold`` against it, best first, at most ``max_citations`` of them (see the module
    doc); a sentence none reaches is left uncited and counted unsupported.

    ``context`` (the question) is put before each sentence when it is scored; ``margin``
    keeps only the passages scoring within it of the sentence's best; ``anchor`` (0-based)
    is a passage the answer as a whole cites: the first sentence cites it too (after its
    own), with the score ``scorer`` gave it."""
    sentences = split_sentences(strip_markers(answer))
    if not sentences or not passages:
        return Attributed(strip_markers(answer), (), ())
    prefix = f"{context.strip()} " if context.strip() else ""
    pairs = [(prefix + s, p) for s in sentences for p in passages]
    scores = scorer.predict(pairs).reshape(len(sentences), len(passages))
    parts, cited, evidence = [], [], []
    for k, (sentence, row) in enumerate(zip(sentences, scores, strict=True)):
        order = sorted(range(len(passages)), key=lambda i: (-float(row[i]), i))
        floor = threshold if margin is None else max(threshold, float(row[order[0]]) - margin)
        chosen = [i for i in order if row[i] >= floor][:max_citations]
        if k == 0 and anchor is not None and 0 <= anchor < len(passages) \
                and anchor not in chosen:
            chosen.append(anchor)
        if not chosen:
            parts.append(sentence)
            evidence.append(Evidence(sentence, None, float(row[order[0]])))
            continue
        parts.append(_cited(sentence, [i + 1 for i in chosen]))
        for i in chosen:
            if i + 1 not in cited:
                cited.append(i + 1)
            evidence.append(Evidence(sentence, i + 1, float(row[i]),
                                     best_snippet(sentence, passages[i])))
    return Attributed(" ".join(parts), tuple(cited), tuple(evidence), len(sentences))


def _cited(sentence: str, numbers: list[int]) -> str:
    """``sentence`` with ``[n]`` markers before its closing punctuation."""
    markers = "".join(f"[{n}]" for n in numbers)
    m = _END.search(sentence)
    if m is None:
        return f"{sentence} {markers}"
    return f"{sentence[:m.start()].rstrip()} {markers}{m.group(0)}"


def relevant_enough(question: str, passages: Sequence[str], scorer: PairScorer,
                    threshold: float) -> tuple[bool, float]:
    """Whether some passage scores at least ``threshold`` against ``question``, and the best
    score."""
    if not passages:
        return False, 0.0
    best = float(scorer.predict([(question, p) for p in passages]).max())
    return best >= threshold, best


def most_relevant(question: str, passages: Sequence[str], scorer: PairScorer) -> int | None:
    """The 0-based passage ``scorer`` rates highest against ``question`` (the first on a
    tie; None without passages)."""
    if not passages:
        return None
    scores = scorer.predict([(question, p) for p in passages])
    return int(np.argmax(scores))


def cited_passages(answer: Answer, index: Any, words: int = 60) -> list[dict[str, Any]]:
    """What a user is shown under an answer, one entry per cited number: ``n``, ``id``,
    ``title``, ``source`` (``file › section (page N)`` for a passage read from a folder,
    else empty; :func:`~intentrank.data.ingest.source_label`), the passage ``text`` and
    ``support`` (the passage sentence that supports the answer, from post-hoc attribution;
    else the passage's first ``words`` words)."""
    out = []
    for n in answer.citations:
        doc = index.doc(answer.sources[n - 1])
        snippets = [e.snippet for e in answer.evidence if e.n == n and e.snippet]
        support = " ".join(dict.fromkeys(snippets)) or " ".join(doc.text.split()[:words])
        out.append({"n": n, "id": doc.id, "title": doc.title,
                    "source": source_label(doc.metadata), "text": doc.full_text(),
                    "support": support})
    return out
