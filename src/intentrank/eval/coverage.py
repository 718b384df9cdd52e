"""Coverage measures for multi-aspect questions (method 4): NCOM and the TREC diversity
measures, and the aspect-labelled question sets they read.

**NCOM** (RichRAG). For a question with reference sub-answers ``a_1..a_m`` and a list
``L = d_1..d_K``::

    COM(L) = sum_{t=1..K} sum_i w_i^t * phi(d_t, a_i),
    w_i^t  = 1 - Norm_i(max_{s < t} phi(d_s, a_i)),  Norm_i(x) = x_i / sum_j x_j

with ``w_i^t`` from the documents *before* position ``t`` (``w^1 = 1``; all ones while
nothing is covered) and ``phi(d, a) = (ROUGE-2 recall + ROUGE-L recall) / 2`` of the
sub-answer ``a`` in the passage ``d`` (:func:`rouge_phi`). ``NCOM = COM(L) / COM(L*)``, ``L*``
the greedy silver list of ``K`` documents over the same pool (each step takes the document
with the largest ``sum_i w_i^t phi``; ties to the earlier pool position). The greedy list is
not optimal, so NCOM can exceed 1; a pool in which no passage contains any word pair or
word of a sub-answer gives COM(L*) = 0 and NCOM 0.

ROUGE here is rouge-score's (Lin, 2004) without stemming: text lower-cased, every run of
characters other than ``a-z0-9`` a separator; ROUGE-2 recall = clipped bigram overlap / the
reference's bigrams; ROUGE-L recall = LCS length / the reference's tokens.

**Diversity measures** come from TREC's ndeval through ir-measures (provider ``pyndeval``):
``alpha_nDCG@10`` (alpha 0.5), ``ERR_IA@10``, ``StRecall@10`` (S-recall), over subtopic
qrels in which every aspect of a question is one subtopic (the qrels ``iteration`` field).

**Aspect sets** are JSONL, one question a line::

    {"id": "c12", "text": "...", "source": "composed",
     "aspects": [{"id": "1", "text": "...", "answer": "reference sub-answer",
                  "docs": {"doc-id": 1, ...}}, ...]}

:func:`load_aspect_set` checks every field and raises :class:`DataError` naming file, line
and field.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np

from intentrank.errors import DataError
from intentrank.eval.metrics import EvalResult, MetricError

DIVERSITY_METRICS = ("alpha_nDCG@10", "ERR_IA@10", "StRecall@10")
_TOKEN = re.compile(r"[a-z0-9]+")


# -- ROUGE recall ---------------------------------------------------------------------------
def tokens(text: str) -> list[str]:
    """rouge-score's tokens (no stemming): lower-cased runs of ``a-z0-9``."""
    return _TOKEN.findall(text.lower())


def rouge2_recall(reference: Sequence[str], passage: Sequence[str]) -> float:
    """Clipped bigram overlap / the reference's bigrams (0 for a reference of < 2 tokens)."""
    ref = Counter(zip(reference, reference[1:], strict=False))
    if not ref:
        return 0.0
    got = Counter(zip(passage, passage[1:], strict=False))
    return sum(min(n, got[b]) for b, n in ref.items()) / sum(ref.values())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (dynamic programming, O(len a * len b))."""
    if not a or not b:
        return 0
    prev = [0] * (len(a) + 1)
    for y in b:
        cur = [0]
        for i, x in enumerate(a):
            cur.append(prev[i] + 1 if x == y else max(prev[i + 1], cur[i]))
        prev = cur
    return prev[-1]


def rougeL_recall(reference: Sequence[str], passage: Sequence[str]) -> float:  # noqa: N802
    """LCS length / the reference's tokens (0 for an empty reference)."""
    return lcs_length(reference, passage) / len(reference) if reference else 0.0


def rouge_phi(passage: str, sub_answer: str) -> float:
    """NCOM's ``phi``: the mean of ROUGE-2 and ROUGE-L recall of ``sub_answer`` in
    ``passage``."""
    ref, got = tokens(sub_answer), tokens(passage)
    return (rouge2_recall(ref, got) + rougeL_recall(ref, got)) / 2


# -- COM and NCOM ---------------------------------------------------------------------------
def _weights(covered: np.ndarray) -> np.ndarray:
    total = covered.sum()
    return np.ones_like(covered) if total <= 0 else 1.0 - covered / total


def com(phi: np.ndarray) -> float:
    """COM of a list given ``phi`` (list positions x sub-answers), weights from the
    documents before each position."""
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2:
        raise ValueError(f"phi must be a (documents x sub-answers) matrix, got {phi.shape}")
    covered, total = np.zeros(phi.shape[1]), 0.0
    for row in phi:
        total += float(_weights(covered) @ row)
        covered = np.maximum(covered, row)
    return total


def silver_list(phi: np.ndarray, k: int) -> list[int]:
    """The greedy silver list: ``k`` pool positions (rows of ``phi``), each step the largest
    weighted gain, ties to the earlier position."""
    phi = np.asarray(phi, dtype=np.float64)
    covered, left, order = np.zeros(phi.shape[1]), list(range(len(phi))), []
    for _ in range(min(k, len(phi))):
        gains = phi[left] @ _weights(covered)
        best = left[int(np.argmax(gains))]  # argmax takes the first of equal gains
        order.append(best)
        covered = np.maximum(covered, phi[best])
        left.remove(best)
    return order


@dataclass
class NcomScorer:
    """NCOM of lists for one question: ``text_of(doc_id)`` gives passages; phi is cached."""

    sub_answers: Sequence[str]
    text_of: Callable[[str], str]
    _phi: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def phi(self, doc_ids: Sequence[str]) -> np.ndarray:
        for d in doc_ids:
            if d not in self._phi:
                text = self.text_of(d)
                self._phi[d] = np.array([rouge_phi(text, a) for a in self.sub_answers])
        return np.array([self._phi[d] for d in doc_ids]).reshape(len(doc_ids),
                                                                  len(self.sub_answers))

    def ncom(self, ranked: Sequence[str], pool: Sequence[str], k: int = 10) -> float:
        """COM of the top ``k`` of ``ranked`` over COM of the silver list of ``k`` from
        ``pool`` (``ranked``'s top ``k`` are added to the pool)."""
        top = list(dict.fromkeys(ranked))[:k]
        pool = list(dict.fromkeys([*pool, *top]))
        full = self.phi(pool)
        best = com(full[silver_list(full, k)])
        return com(self.phi(top)) / best if best > 0 else 0.0


# -- aspect-labelled questions --------------------------------------------------------------
@dataclass(frozen=True)
class Aspect:
    """One aspect of a question: its gold documents (one subtopic) and reference
    sub-answer."""

    id: str
    answer: str
    docs: Mapping[str, int]
    text: str = ""


@dataclass(frozen=True)
class AspectQuestion:
    """A multi-aspect question with its aspects; ``source`` says how it was made."""

    id: str
    text: str
    aspects: tuple[Aspect, ...]
    source: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def qrels(self) -> dict[str, int]:
        """Flat judgments: each document's best grade over the aspects."""
        out: dict[str, int] = {}
        for a in self.aspects:
            for d, g in a.docs.items():
                out[d] = max(out.get(d, 0), g)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "source": self.source,
                "aspects": [{"id": a.id, "text": a.text, "answer": a.answer,
                             "docs": dict(a.docs)} for a in self.aspects],
                **({"meta": dict(self.meta)} if self.meta else {})}


def _need_text(value: Any, path: Path, line: int, name: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise DataError(f"must be {'text' if empty else 'non-empty text'}, got {value!r}"[:160],
                        path, line, name)
    return value


def _aspect(raw: Any, path: Path, line: int, at: str) -> Aspect:
    if not isinstance(raw, dict):
        raise DataError(f"must be an object with id, answer and docs, got {raw!r}"[:160],
                        path, line, at)
    for key in ("id", "answer", "docs"):
        if key not in raw:
            raise DataError("is missing", path, line, f"{at}.{key}")
    docs = raw["docs"]
    if not isinstance(docs, dict) or not docs:
        raise DataError(f"must be a non-empty object of document id -> grade, got {docs!r}"
                        [:160], path, line, f"{at}.docs")
    for d, g in docs.items():
        if isinstance(g, bool) or not isinstance(g, int) or g < 0:
            raise DataError(f"grade of {d!r} must be a whole number >= 0, got {g!r}", path,
                            line, f"{at}.docs")
    if not any(g > 0 for g in docs.values()):
        raise DataError("has no relevant document (grade > 0)", path, line, f"{at}.docs")
    return Aspect(str(raw["id"]), _need_text(raw["answer"], path, line, f"{at}.answer"),
                  dict(docs), _need_text(raw.get("text", ""), path, line, f"{at}.text", True))


def load_aspect_set(path: str | Path) -> list[AspectQuestion]:
    """Read an aspect set (module doc); DataError names the file, line and field."""
    path = Path(path)
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", path) from None
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason})", path) from None
    out: list[AspectQuestion] = []
    seen: dict[str, int] = {}
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"not a JSON object: {exc.msg}", path, n) from None
        if not isinstance(raw, dict):
            raise DataError("must be a JSON object", path, n)
        qid = _need_text(raw.get("id"), path, n, "id")
        if qid in seen:
            raise DataError(f"duplicate question id {qid!r} (first on line {seen[qid]})",
                            path, n, "id")
        seen[qid] = n
        aspects = raw.get("aspects")
        if not isinstance(aspects, list) or not aspects:
            raise DataError(f"must be a non-empty list of aspects, got {aspects!r}"[:160],
                            path, n, "aspects")
        parsed = tuple(_aspect(a, path, n, f"aspects[{i}]") for i, a in enumerate(aspects))
        ids = [a.id for a in parsed]
        if len(set(ids)) != len(ids):
            raise DataError(f"aspect ids must differ, got {ids}", path, n, "aspects")
        meta = raw.get("meta", {})
        out.append(AspectQuestion(qid, _need_text(raw.get("text"), path, n, "text"), parsed,
                                  str(raw.get("source", "")),
                                  meta if isinstance(meta, dict) else {}))
    if not out:
        raise DataError("no questions", path)
    return out


def write_aspect_set(questions: Sequence[AspectQuestion], path: str | Path) -> None:
    """Write questions as JSONL (atomically: a temporary file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(q.to_json(), ensure_ascii=False) + "\n"
                           for q in questions), "utf-8")
    tmp.replace(path)


# -- TREC diversity measures ----------------------------------------------------------------
def subtopic_qrels(questions: Sequence[AspectQuestion]) -> list[ir_measures.Qrel]:
    """One qrel per (question, aspect, document), the aspect's id as the subtopic
    (``iteration``)."""
    return [ir_measures.Qrel(q.id, d, g, a.id) for q in questions for a in q.aspects
            for d, g in a.docs.items()]


def evaluate_diversity(run: Mapping[str, Mapping[str, float]],
                       questions: Sequence[AspectQuestion],
                       metrics: Sequence[str] = DIVERSITY_METRICS) -> EvalResult:
    """ndeval's measures (alpha-nDCG, ERR-IA, S-recall, ...) per question; a question with
    no retrieved document counts 0."""
    try:
        measures = {name: ir_measures.parse_measure(name) for name in metrics}
    except (ValueError, NameError, SyntaxError, TypeError, AttributeError) as exc:
        raise MetricError(f"unknown diversity metric in {list(metrics)}: {exc}") from exc
    by_str = {str(m): name for name, m in measures.items()}
    per_query = {q.id: {name: 0.0 for name in metrics} for q in questions}
    clean = {q: dict(docs) for q, docs in run.items() if q in per_query and docs}
    if clean:
        try:
            for m in ir_measures.iter_calc(list(measures.values()), subtopic_qrels(questions),
                                           clean):
                per_query[m.query_id][by_str[str(m.measure)]] = float(m.value)
        except Exception as exc:  # noqa: BLE001 (a missing provider raises ValueError etc.)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise MetricError(f"cannot compute {', '.join(metrics)} (they need ir-measures' "
                              f"pyndeval provider): {first}") from exc
    n = max(len(per_query), 1)
    return EvalResult(list(metrics), {name: sum(s[name] for s in per_query.values()) / n
                                      for name in metrics}, per_query)
