"""Choosing one system from per-query scores, and how sure the choice is.

Every candidate is scored on the same queries. :func:`select` bootstraps the queries (the
same resample for every candidate, so the comparison stays paired; with question kinds,
e.g. the ways the questions were made, the bootstrap is stratified: each kind's questions
are resampled within the kind, keeping its size, so every resample's mean weighs the kinds
by their question counts as the point estimate does), gives each candidate's mean with a
percentile interval and the share of resamples in which it is best, runs the paired
randomization test of the best against the runner-up, and picks the best, or the cheapest
candidate that is within ``noise`` of the best and not significantly worse than it. A tuned
variant may be picked only when it beats the setting it was tuned from by more than
``noise`` and significantly (its scores are cross-fitted, so this is a held-out gain), and
any pick must so beat the reference pipeline (the one to run without choosing), which
otherwise stays. :func:`set_warnings` says when a question set is too weak to trust,
including kinds with too few questions to say anything on their own (their means are
reported apart, per kind; in the estimate they weigh only their share of the questions).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from intentrank.measures.significance import paired_test

MIN_QUESTIONS = 50  # fewer: warn
MAX_COPIED = 0.8  # a larger mean share of question words found in the source: warn
MIN_KIND = 10  # a question kind with fewer questions: warn, read its own mean apart


@dataclass(frozen=True)
class Estimate:
    """One candidate's mean, bootstrap interval and probability of being the best."""

    name: str
    mean: float
    low: float
    high: float
    p_best: float  # among the eligible candidates (0 for one that is not)
    cost: float
    eligible: bool = True  # False: a tuned variant not beyond noise of its base


@dataclass
class Selection:
    """The pick and the evidence for it (``estimates`` best mean first)."""

    chosen: str
    best: str
    runner_up: str | None
    estimates: list[Estimate]
    p_value: float  # paired randomization test, best vs runner-up (1.0 without runner-up)
    p_chosen_best: float
    confident: bool
    reason: str
    n_queries: int
    warnings: list[str] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)  # questions per kind (with groups)

    def estimate(self, name: str) -> Estimate:
        return next(e for e in self.estimates if e.name == name)


def bootstrap_means(matrix: np.ndarray, n_boot: int = 2000, seed: int = 0,
                    groups: Sequence[str] | None = None) -> np.ndarray:
    """``(n_boot, candidates)`` means over query resamples (rows of ``matrix``: queries).

    With ``groups`` (one label per row), a stratified bootstrap: each group's rows are
    resampled within the group, keeping its size, and a resample's mean is the mean over
    all its rows (the question-weighted mean of the point estimate). One group, or none,
    is the plain bootstrap (the same draws for the same seed)."""
    rng = np.random.default_rng(seed)
    n = matrix.shape[0]
    labels = np.asarray(groups) if groups is not None else np.zeros(n, dtype=int)
    if labels.shape != (n,):
        raise ValueError(f"groups: {labels.shape[0]} labels for {n} rows")
    counts = np.zeros(n_boot * n)
    offsets = np.arange(n_boot)[:, None] * n
    for g in sorted(set(labels.tolist())):
        members = np.flatnonzero(labels == g)
        drawn = members[rng.integers(0, len(members), size=(n_boot, len(members)))]
        counts += np.bincount((offsets + drawn).ravel(), minlength=n_boot * n)
    return counts.reshape(n_boot, n) @ matrix / n


def p_best(boot: np.ndarray) -> np.ndarray:
    """Share of resamples (axis 0) in which each candidate (last axis) has the highest
    mean (ties shared); ``(n_boot, ..., candidates)`` gives ``(..., candidates)``."""
    top = boot.max(axis=-1, keepdims=True)
    wins = np.isclose(boot, top, rtol=0, atol=1e-12)
    return (wins / wins.sum(axis=-1, keepdims=True)).mean(axis=0)


def intervals(boot: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of each column of ``boot`` (resamples on axis 0)."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(boot, [tail, 100 - tail], axis=0)
    return low, high


def select(
    scores: Mapping[str, Mapping[str, float]],
    costs: Mapping[str, float],
    noise: float = 0.01,
    alpha: float = 0.05,
    confidence: float = 0.8,
    n_boot: int = 2000,
    seed: int = 0,
    groups: Mapping[str, str] | None = None,
    bases: Mapping[str, str] | None = None,
    reference: str | None = None,
) -> Selection:
    """Pick a candidate from ``scores`` (name -> query id -> score; the same queries each).

    The best mean wins unless a cheaper candidate (``costs``, lower is cheaper) is within
    ``noise`` of it and the paired test does not separate them at ``alpha``; the pick is
    ``confident`` when it is best in at least ``confidence`` of the resamples. ``groups``
    (query id -> kind) stratifies the bootstrap (:func:`bootstrap_means`); a candidate
    of ``bases`` (tuned name -> the name of the setting it was tuned from) is eligible only
    when its mean exceeds its base's by more than ``noise`` with paired p < ``alpha``. A
    ``reference`` candidate (the pipeline to run without choosing) stays the pick unless the
    pick so far beats it by more than ``noise`` with paired p < ``alpha``."""
    names = list(scores)
    if not names:
        raise ValueError("no candidates to choose from")
    qids = sorted(next(iter(scores.values())))
    if not qids:
        raise ValueError("no scored queries")
    for n in names:
        if set(scores[n]) != set(qids):
            raise ValueError(f"candidate {n!r} was scored on other queries than {names[0]!r}")
    matrix = np.array([[scores[n][q] for n in names] for q in qids], dtype=np.float64)
    labels = [groups.get(q, "") for q in qids] if groups else None
    boot = bootstrap_means(matrix, n_boot, seed, labels)
    means = matrix.mean(axis=0)
    ok = [_beats_base(n, scores, bases or {}, noise, alpha) for n in names]
    pb = np.zeros(len(names))
    pb[ok] = p_best(boot[:, ok])
    low, high = intervals(boot)
    ests = sorted((Estimate(n, float(means[i]), float(low[i]), float(high[i]), float(pb[i]),
                            float(costs.get(n, 0.0)), ok[i]) for i, n in enumerate(names)),
                  key=lambda e: (-e.mean, e.cost, e.name))
    eligible = [e for e in ests if e.eligible]
    best = eligible[0]
    runner = eligible[1] if len(eligible) > 1 else None
    p_value = paired_test(scores[runner.name], scores[best.name]).p_randomization \
        if runner else 1.0
    chosen, reason = best, "highest estimated score"
    for e in sorted(eligible[1:], key=lambda e: (e.cost, -e.mean)):
        if e.cost >= chosen.cost or best.mean - e.mean > noise:
            continue
        if paired_test(scores[e.name], scores[best.name]).p_randomization >= alpha:
            chosen = e
            reason = (f"within noise of {best.name} ({best.mean - e.mean:+.4f} below, not "
                      f"significant at {alpha}) and cheaper")
            break
    ref = next((e for e in eligible if e.name == reference), None)
    if ref is not None and chosen is not ref:
        gain = chosen.mean - ref.mean
        p_ref = paired_test(scores[ref.name], scores[chosen.name]).p_randomization
        if gain <= noise or p_ref >= alpha:
            reason = (f"the reference pipeline: {chosen.name} is not better beyond noise "
                      f"({gain:+.4f}, p = {p_ref:.3f})")
            chosen = ref
    return Selection(chosen.name, best.name, runner.name if runner else None, ests, p_value,
                     chosen.p_best, chosen.p_best >= confidence, reason, len(qids),
                     kinds=dict(sorted(Counter(labels).items())) if labels else {})


def _beats_base(name: str, scores: Mapping[str, Mapping[str, float]],
                bases: Mapping[str, str], noise: float, alpha: float) -> bool:
    base = bases.get(name)
    if base is None or base not in scores:
        return True
    a, b = scores[base], scores[name]
    gain = (sum(b.values()) - sum(a.values())) / max(len(b), 1)
    return gain > noise and paired_test(a, b).p_randomization < alpha


def set_warnings(selection: Selection, copied: float, noise: float = 0.01,
                 alpha: float = 0.05, min_questions: int = MIN_QUESTIONS,
                 max_copied: float = MAX_COPIED, min_kind: int = MIN_KIND) -> list[str]:
    """Why the question set or the pick is weak, in words (empty when nothing is)."""
    out = []
    if selection.n_queries < min_questions:
        out.append(f"few questions: {selection.n_queries} kept (fewer than {min_questions}); "
                   f"intervals are wide")
    if len(selection.kinds) > 1:
        for kind, n in selection.kinds.items():
            if n < min_kind:
                out.append(f"few {kind} questions: {n} of {selection.n_queries} (fewer than "
                           f"{min_kind}); they weigh {n / selection.n_queries:.0%} of the "
                           f"estimate, and their own means (per kind) say little")
    if copied > max_copied:
        out.append(f"questions copy their sources: {copied:.0%} of question words occur in "
                   f"the source passage (above {max_copied:.0%}); lexical matching (BM25) "
                   f"is favoured")
    if selection.runner_up is not None and selection.p_value >= alpha:
        best = selection.estimate(selection.best)
        second = selection.estimate(selection.runner_up)
        out.append(f"candidates within noise: {selection.best} ({best.mean:.4f}) and "
                   f"{selection.runner_up} ({second.mean:.4f}) are not significantly "
                   f"different (p = {selection.p_value:.3f}); the cheaper of those within "
                   f"{noise:g} wins")
    if not selection.confident:
        out.append(f"not confident: {selection.chosen} is best in "
                   f"{selection.p_chosen_best:.0%} of the bootstrap resamples")
    return out


__all__ = ["Estimate", "MAX_COPIED", "MIN_KIND", "MIN_QUESTIONS", "Selection", "bootstrap_means",
           "intervals", "p_best", "select", "set_warnings"]
