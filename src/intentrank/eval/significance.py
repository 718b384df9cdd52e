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
    """Two-sided paired t-test and paired randomization (sign-flip) test over shared queries.

    Both systems must have a score for the same queries; a mismatch raises ``ValueError``.
    """
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))[:5]
        raise ValueError(f"systems were scored on different queries (e.g. {only})")
    qids = sorted(a)
    xa = np.array([a[q] for q in qids], dtype=np.float64)
    xb = np.array([b[q] for q in qids], dtype=np.float64)
    diff = xb - xa
    if len(qids) < 2 or not diff.any():
        p_t = 1.0
    else:
        p_t = float(stats.ttest_rel(xb, xa).pvalue)
        p_t = 1.0 if np.isnan(p_t) else p_t
    rng = np.random.default_rng(seed)
    observed = abs(diff.mean()) if len(diff) else 0.0
    signs = rng.choice([-1.0, 1.0], size=(n_permutations, len(diff)))
    permuted = np.abs((signs * diff).mean(axis=1)) if len(diff) else np.zeros(1)
    p_r = float((np.sum(permuted >= observed - 1e-12) + 1) / (n_permutations + 1))
    return PairedTest(metric, len(qids), float(xa.mean()) if len(xa) else 0.0,
                      float(xb.mean()) if len(xb) else 0.0, p_t, min(p_r, 1.0))
