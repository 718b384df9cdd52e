"""How much a reranking stage changed the order: position swaps and top-1 changes.

``position_swaps(before, after)`` is the number of adjacent swaps (Kendall inversions) that
turn the input order of the output's documents into the output order; documents the input
did not have are left out. A stage's swap rate is its mean over queries, taken over the
output's top ``depth`` (the list the stage hands on), with the share of queries whose top-1
document changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from intentrank.types import Ranking


def position_swaps(before: Sequence[str], after: Sequence[str]) -> int:
    """Adjacent swaps turning ``before``'s order of ``after``'s documents into ``after``."""
    pos = {d: i for i, d in enumerate(before)}
    ranks = [pos[d] for d in after if d in pos]
    return sum(1 for i in range(len(ranks)) for j in range(i + 1, len(ranks))
               if ranks[i] > ranks[j])


@dataclass(frozen=True)
class SwapStats:
    """Mean position swaps per query and the share of queries whose top-1 changed."""

    mean_swaps: float
    top1_changed: float
    queries: int
    depth: int


def swap_stats(before: Sequence[Ranking], after: Sequence[Ranking], depth: int = 10,
               ) -> SwapStats:
    """Swap metrics of a stage from its input and output rankings (matched by query id)."""
    prior = {r.query.id: r.doc_ids for r in before}
    swaps, changed, n = 0, 0, 0
    for r in after:
        if r.query.id not in prior or not r.docs:
            continue
        old = prior[r.query.id]
        new = r.doc_ids[:depth]
        swaps += position_swaps(old, new)
        changed += int(bool(old) and old[0] != new[0])
        n += 1
    return SwapStats(swaps / n if n else 0.0, changed / n if n else 0.0, n, depth)
