"""NCOM (RichRAG), the coverage measure of a list for a multi-aspect question (method 4).

For a question with reference sub-answers ``a_1..a_m`` and a list ``L = d_1..d_K``::

    COM(L) = sum_{t=1..K} sum_i w_i^t * phi(d_t, a_i),
    w_i^t  = 1 - Norm_i(max_{s < t} phi(d_s, a_i)),  Norm_i(x) = x_i / sum_j x_j

with ``w_i^t`` from the documents *before* position ``t`` (``w^1 = 1``; all ones while
nothing is covered) and ``phi(d, a) = (ROUGE-2 recall + ROUGE-L recall) / 2`` of the
sub-answer ``a`` in the passage ``d`` (:func:`rouge_phi`). ``NCOM = COM(L) / COM(L*)``, ``L*``
the greedy silver list of ``K`` documents over the same pool (each step takes the document
with the largest ``sum_i w_i^t phi``; ties to the earlier pool position). The greedy list is
not optimal, so NCOM can exceed 1; a pool in which no passage contains any word pair or
word of a sub-answer gives COM(L*) = 0 and NCOM 0. ROUGE is rouge-score's (Lin, 2004)
without stemming (:func:`tokens`).

The TREC diversity measures over the same aspect sets are in :mod:`intentrank.measures.diversity`;
the aspect-set files are read and written by :mod:`intentrank.data.aspects`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

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
def coverage_weights(covered: np.ndarray) -> np.ndarray:
    """``w_i = 1 - covered_i / sum_j covered_j`` (all ones when nothing is covered)."""
    covered = np.asarray(covered, dtype=np.float64)
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
        total += float(coverage_weights(covered) @ row)
        covered = np.maximum(covered, row)
    return total


def silver_list(phi: np.ndarray, k: int) -> list[int]:
    """The greedy silver list: ``k`` pool positions (rows of ``phi``), each step the largest
    weighted gain, ties to the earlier position."""
    phi = np.asarray(phi, dtype=np.float64)
    covered, left, order = np.zeros(phi.shape[1]), list(range(len(phi))), []
    for _ in range(min(k, len(phi))):
        gains = phi[left] @ coverage_weights(covered)
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
