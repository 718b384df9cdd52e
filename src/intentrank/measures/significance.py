"""Paired significance tests between two systems' per-query scores."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PairedTest:
    """Outcome of a paired test of system B against system A on one metric."""

    metric: str
    n: int
    mean_a: float
    mean_b: float
    p_ttest: float
    p_randomization: float

    @property
    def delta(self) -> float:
        return self.mean_b - self.mean_a

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_randomization < alpha


def paired_test(
    a: Mapping[str, float], b: Mapping[str, float], metric: str = "",
    n_permutations: int = 10_000, seed: int = 0,
) -> PairedTest:
    """Two-sided paired t-test and paired randomization (sign-flip) test over shared queries
    (``scipy.stats.ttest_rel`` and ``scipy.stats.permutation_test``).

    Both systems must have a score for the same queries; a mismatch raises ``ValueError``.
    """
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))[:5]
        raise ValueError(f"systems were scored on different queries (e.g. {only})")
    qids = sorted(a)
    xa = np.array([a[q] for q in qids], dtype=np.float64)
    xb = np.array([b[q] for q in qids], dtype=np.float64)
    p_t = p_r = 1.0
    if len(qids) >= 2 and (xb - xa).any():
        p_t = float(stats.ttest_rel(xb, xa).pvalue)
        p_t = 1.0 if np.isnan(p_t) else p_t
        # sign flips of the per-query differences (scipy's paired "samples" permutation)
        res = stats.permutation_test(
            (xb, xa), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
            permutation_type="samples", n_resamples=n_permutations, random_state=seed)
        p_r = min(float(res.pvalue), 1.0)
    return PairedTest(metric, len(qids), float(xa.mean()) if len(xa) else 0.0,
                      float(xb.mean()) if len(xb) else 0.0, p_t, p_r)
