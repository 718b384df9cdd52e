"""IR metrics through ir-measures (trec_eval semantics), aggregate and per query.

Metric names accept the common spellings: ``nDCG@10``, ``MRR@10`` (= ``RR@10``),
``MAP@100`` / ``MAP`` (= ``AP``), ``Recall@100`` (= ``R@100``), ``P@10`` and
``HitRate@5`` (= ``Success@5``). Queries that have judgments but no retrieved documents
count 0, so systems are always averaged over the same queries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ir_measures

from intentrank.data.trec import Qrels, Run
from intentrank.errors import ConfigError

DEFAULT_METRICS = ("nDCG@10", "MRR@10", "MAP@100", "Recall@100", "P@10", "HitRate@10")
_ALIASES = {"MRR": "RR", "MAP": "AP", "Recall": "R", "HitRate": "Success", "Hit": "Success",
            "NDCG": "nDCG", "ndcg": "nDCG"}


class MetricError(ConfigError, ValueError):
    """A metric name that cannot be parsed or computed (a ConfigError and a ValueError)."""


def to_measure(name: str) -> ir_measures.Measure:
    """Parse a metric name (aliases allowed) into an ir-measures measure.

    Cut-offs must be >= 1: trec_eval aborts the whole process on ``@0``."""
    if not isinstance(name, str):
        raise MetricError(f"a metric name must be a string, got {name!r}")
    m = re.fullmatch(r"([A-Za-z_]+)(?:@(\d+))?", name.strip())
    if not m:
        raise MetricError(f"cannot parse metric {name!r} (expected a name with an optional "
                          f"@cutoff, e.g. {', '.join(DEFAULT_METRICS)})")
    if m.group(2) is not None and int(m.group(2)) < 1:
        raise MetricError(f"metric {name.strip()!r}: the cut-off must be >= 1, got "
                          f"{int(m.group(2))}")
    base = _ALIASES.get(m.group(1), m.group(1))
    try:
        return ir_measures.parse_measure(base + (f"@{int(m.group(2))}" if m.group(2) else ""))
    except (ValueError, NameError, SyntaxError, TypeError, AttributeError) as exc:
        raise MetricError(f"unknown metric {name!r} (e.g. {', '.join(DEFAULT_METRICS)})") \
            from exc


_PROBE_QRELS = {"1": {"d1": 1, "d2": 0}, "2": {"d3": 2}}
_PROBE_RUN = {"1": {"d1": 2.0, "d4": 1.0}, "2": {"d4": 1.0, "d3": 0.5}}
_COMPUTABLE: dict[str, str] = {}  # measure -> "" (fine) or why it cannot be computed


def validate_metrics(names: str | Sequence[str]) -> list[str]:
    """Check metric names before any work: each parses, has a cut-off >= 1 and can be
    computed here (some measures need an extra ir-measures provider or a Perl script).

    ``names``: a list, or a comma-separated string (blank items are ignored). Returns the
    names stripped and de-duplicated in order; raises :class:`MetricError` naming every bad
    one.
    """
    if isinstance(names, str):
        names = names.split(",")
    elif not isinstance(names, Sequence):
        raise MetricError(f"metrics must be a list of names, got {names!r}")
    cleaned: list[str] = []
    for raw in names:
        if not isinstance(raw, str):
            raise MetricError(f"a metric name must be a string, got {raw!r}")
        if raw.strip() and raw.strip() not in cleaned:
            cleaned.append(raw.strip())
    if not cleaned:
        raise MetricError(f"no metrics given (e.g. {','.join(DEFAULT_METRICS)})")
    problems = []
    for name in cleaned:
        try:
            measure = to_measure(name)
        except MetricError as exc:
            problems.append(str(exc))
            continue
        key = str(measure)
        if key not in _COMPUTABLE:
            try:
                list(ir_measures.iter_calc([measure], _PROBE_QRELS, _PROBE_RUN))
                _COMPUTABLE[key] = ""
            except Exception as exc:  # noqa: BLE001 (providers raise anything)
                _COMPUTABLE[key] = _error_line(exc)
        if _COMPUTABLE[key]:
            problems.append(f"metric {name!r} cannot be computed here ({_COMPUTABLE[key]})")
    if problems:
        raise MetricError("; ".join(problems))
    return cleaned


@dataclass
class EvalResult:
    """Mean scores over all judged queries, and the score of every query.

    ``skipped``: queries in the qrels with no relevant (grade > 0) document; like trec_eval,
    they are not evaluated and not averaged.
    """

    metrics: list[str]
    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def column(self, metric: str) -> dict[str, float]:
        return {qid: scores[metric] for qid, scores in self.per_query.items()}


def evaluate(
    run: Mapping[str, Mapping[str, float]], qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS
) -> EvalResult:
    """Score ``run`` against ``qrels``; averaged over every query in ``qrels`` that has a
    relevant document (trec_eval skips the others; they are listed in ``skipped``). Tied
    scores are ordered trec_eval's way (by doc id): a run from rankings
    (``RunResult.to_run``, :func:`~intentrank.data.trec.ranked_scores`) has none."""
    if isinstance(metrics, str):
        raise MetricError(f"metrics must be a list of names, got the string {metrics!r}")
    metrics = list(dict.fromkeys(metrics))
    if not metrics:
        raise MetricError("no metrics given")
    judged = {q: j for q, j in qrels.items() if any(g > 0 for g in j.values())}
    result = score_queries({name: to_measure(name) for name in metrics}, judged, run, judged)
    result.skipped = [q for q in qrels if q not in judged]
    return result


def score_queries(measures: Mapping[str, ir_measures.Measure], qrels: Any,
                  run: Mapping[str, Mapping[str, float]], query_ids: Iterable[str],
                  needs: str = "") -> EvalResult:
    """``measures`` (name -> measure; aliases such as R@3 and Recall@3 share one) of every
    query of ``query_ids`` and their means; a query with no retrieved document scores 0.
    ``needs`` is added to the error raised when ir-measures cannot compute them."""
    per_query = {q: dict.fromkeys(measures, 0.0) for q in query_ids}
    names: dict[str, list[str]] = {}
    for name, m in measures.items():
        names.setdefault(str(m), []).append(name)
    clean_run: Run = {q: dict(docs) for q, docs in run.items() if q in per_query and docs}
    if clean_run:
        unique = list({str(m): m for m in measures.values()}.values())
        try:
            for metric in ir_measures.iter_calc(unique, qrels, clean_run):
                for name in names[str(metric.measure)]:
                    per_query[metric.query_id][name] = float(metric.value)
        except Exception as exc:  # noqa: BLE001 (providers raise anything, e.g. a Perl exit)
            raise MetricError(f"cannot compute {', '.join(measures)}{needs}: "
                              f"{_error_line(exc)}") from exc
    n = max(len(per_query), 1)
    return EvalResult(list(measures), {name: sum(s[name] for s in per_query.values()) / n
                                       for name in measures}, per_query)


def _error_line(exc: Exception) -> str:
    """``Type: first line of the message``, at most 300 characters."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__}: {first}"[:300]
