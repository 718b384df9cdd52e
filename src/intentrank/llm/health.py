"""How the LLM steps of a run went: calls, cache hits, failures and fallbacks per stage.

:func:`health_report` turns the ``llm_*`` counters of a run's :class:`~intentrank.types.Trace`
(see :mod:`intentrank.llm.client`) and each stage's own ``fallbacks`` (an unusable or missing
reply replaced by the stage's fallback) into one :class:`StageHealth` per LLM stage,
:func:`format_health` into one line each, and :func:`warnings_for` / :func:`check_strict`
say when a run's LLM output is degraded.

Several traces (the pipelines of ``intentrank eval``, the configurations of an ablation)
are summed over the work each actually did: what a run replayed from another run's stage
output (``Trace.replayed``, see :class:`~intentrank.core.cache.Cached`) is left out, so
shared LLM steps are not counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from intentrank.types import EventKind, Trace

# A stage is an LLM stage when its trace has one of these counters.
LLM_COUNTERS = ("llm_calls", "llm_cache_hits", "llm_failed")
DEFAULT_THRESHOLD = 0.10  # warn when more than this share of a stage's requests fell back


@dataclass(frozen=True)
class StageHealth:
    """LLM activity of one stage (summed over the runs given to :func:`health_report`)."""

    stage: str
    queries: int = 0
    calls: int = 0  # backend calls, retries included
    retries: int = 0
    errors: int = 0  # backend calls that failed (some were retried successfully)
    cache_hits: int = 0
    failed: int = 0  # requests that failed for good (after retries)
    fallbacks: int = 0
    last_failure: str = ""  # the reason of the last failed request, if any
    labels: tuple[str, ...] = field(default=())  # the runs (pipelines) it came from

    @property
    def requests(self) -> int:
        """LLM requests the stage made: replayed from the cache or sent to the backend."""
        return self.cache_hits + max(self.calls - self.retries, 0)

    @property
    def fallback_share(self) -> float:
        """Fallbacks per request (per query when the stage made no request)."""
        denominator = self.requests or self.queries
        return self.fallbacks / denominator if denominator else 0.0

    @property
    def all_failed(self) -> bool:
        """Every request to the backend failed (none came from the cache)."""
        sent = self.requests - self.cache_hits
        return sent > 0 and self.failed >= sent


def _fresh(trace: Trace, stage: str, fresh: bool = True) -> tuple[float, dict[str, float]]:
    """Queries and counters of ``stage`` minus what was replayed from another run (all of
    them with ``fresh=False``)."""
    st = trace.stages[stage]
    replayed = trace.replayed.get(stage, {}) if fresh else {}
    counters = {c: v - replayed.get(c, 0.0) for c, v in st.counters.items()}
    return st.queries - replayed.get("queries", 0.0), counters


def health_report(traces: Trace | Iterable[Trace] | Mapping[str, Trace],
                  separate: bool = False, fresh: bool = True) -> list[StageHealth]:
    """One :class:`StageHealth` per LLM stage (in first-seen order), summed over ``traces``.

    ``traces``: one trace, several, or ``{label: trace}`` (the labels, e.g. pipeline names,
    are kept on each stage's health). ``separate=True`` keeps one entry per label and stage
    instead of summing a stage over the labels (independent pipelines compared by
    ``intentrank eval``). ``fresh=False`` also counts what each run replayed from another
    run's stage output (each run "as if run alone"; do not sum such runs). Counts are
    rounded to whole numbers: replayed shares are per-query averages.
    """
    if isinstance(traces, Trace):
        labelled: list[tuple[str, Trace]] = [("", traces)]
    elif isinstance(traces, Mapping):
        labelled = list(traces.items())
    else:
        labelled = [("", t) for t in traces]
    sums: dict[tuple[str, str], dict[str, float]] = {}
    labels: dict[tuple[str, str], list[str]] = {}
    last_failure: dict[tuple[str, str], str] = {}
    for label, trace in labelled:
        for stage, st in trace.stages.items():
            if not any(st.counters.get(c, 0) > 0 for c in LLM_COUNTERS):
                continue
            key = (label if separate else "", stage)
            queries, counters = _fresh(trace, stage, fresh)
            acc = sums.setdefault(key, {})
            acc["queries"] = acc.get("queries", 0.0) + queries
            for c, v in counters.items():
                acc[c] = acc.get(c, 0.0) + v
            if label and label not in labels.setdefault(key, []):
                labels[key].append(label)
        for ev in trace.events:  # events are logged by fresh work only
            key = (label if separate else "", ev.stage)
            if ev.kind == EventKind.LLM_FAILED and key in sums:
                last_failure[key] = str(ev.details.get("reason", ""))

    def n(acc: dict[str, float], key: str) -> int:
        return max(int(round(acc.get(key, 0.0))), 0)

    return [StageHealth(stage, queries=n(acc, "queries"), calls=n(acc, "llm_calls"),
                        retries=n(acc, "llm_retries"), errors=n(acc, "llm_errors"),
                        cache_hits=n(acc, "llm_cache_hits"), failed=n(acc, "llm_failed"),
                        fallbacks=n(acc, "fallbacks"),
                        last_failure=last_failure.get((label, stage), ""),
                        labels=tuple(labels.get((label, stage), ())))
            for (label, stage), acc in sums.items()
            if any(n(acc, c) for c in LLM_COUNTERS)]  # not a run that only replayed it


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def format_health(health: StageHealth) -> str:
    """One line, e.g. ``LLM stage followups: 50 queries, 50 requests (12 calls, 38 cache
    hits), 0 retries, 0 failed, 1 fallback (2.0%)``."""
    where = f" [{', '.join(health.labels)}]" if health.labels else ""
    return (f"LLM stage {health.stage}{where}: {_plural(health.queries, 'query', 'queries')}, "
            f"{_plural(health.requests, 'request')} ({_plural(health.calls, 'call')}, "
            f"{_plural(health.cache_hits, 'cache hit')}), "
            f"{_plural(health.retries, 'retry', 'retries')}, {health.failed} failed, "
            f"{_plural(health.fallbacks, 'fallback')} ({100 * health.fallback_share:.1f}%)")


def warnings_for(healths: Iterable[StageHealth],
                 threshold: float = DEFAULT_THRESHOLD) -> list[str]:
    """A warning (without the ``warning:`` prefix) for each degraded stage."""
    out = []
    for h in healths:
        reason = f" (last error: {h.last_failure})" if h.last_failure else ""
        if h.all_failed:
            out.append(f"LLM stage {h.stage}: every LLM request failed ({h.failed} of "
                       f"{h.requests - h.cache_hits}); its output is the fallback for all "
                       f"of them{reason}")
        elif h.fallback_share > threshold:
            out.append(f"LLM stage {h.stage}: {h.fallbacks} of {h.requests or h.queries} "
                       f"{'requests' if h.requests else 'queries'} fell back "
                       f"({100 * h.fallback_share:.1f}% > {100 * threshold:.0f}%); results "
                       f"are degraded{reason}")
    return out


def check_strict(healths: Iterable[StageHealth]) -> str | None:
    """The ``--strict`` verdict: None when no LLM request failed and no stage fell back,
    else a message naming each offending stage and its counts."""
    bad = [h for h in healths if h.failed or h.fallbacks]
    if not bad:
        return None
    parts = [f"{h.stage} ({_plural(h.failed, 'failed LLM request')}, "
             f"{_plural(h.fallbacks, 'fallback')} of {_plural(h.requests, 'request')})"
             for h in bad]
    return "strict mode: LLM stage(s) failed or fell back: " + "; ".join(parts)


__all__ = ["DEFAULT_THRESHOLD", "StageHealth", "check_strict", "format_health",
           "health_report", "warnings_for"]
