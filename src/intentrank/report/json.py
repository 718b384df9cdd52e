"""An experiment result as JSON: scores (aggregate and per query), latency, counters, tests,
swaps and degradations, and the experiment itself."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from intentrank.eval.harness import ExperimentResult
    from intentrank.measures.significance import PairedTest


def _tests(tests: dict[str, dict[str, PairedTest]]) -> dict[str, Any]:
    return {n: {m: {**asdict(t), "delta": t.delta} for m, t in ts.items()}
            for n, ts in tests.items()}


def to_dict(res: ExperimentResult) -> dict[str, Any]:
    spec = res.spec
    return {
        "title": res.title, "experiment": str(spec.path or ""), "dataset": spec.dataset,
        "split": spec.split, "sample": spec.sample, "n_queries": res.n_queries,
        "seed": res.seed, "baseline": spec.baseline, "metrics": spec.metrics,
        "primary_metric": spec.primary_metric, "notes": res.notes, "skipped": res.skipped,
        "configs": [{"name": r.name, "label": r.spec.label, "parent": r.spec.parent,
                     "variant_of": r.spec.variant_of, "adds": r.spec.adds,
                     "description": r.spec.description, "pipeline": r.describe,
                     "aggregate": r.scores.aggregate, "latency_ms": r.latency,
                     "counters": r.counters, "per_query": r.scores.per_query}
                    for r in res.pipelines],
        "significance": _tests(res.tests), "against_parent": _tests(res.parent_tests),
        "variants": _tests(res.variant_tests),
        "swaps": {n: asdict(s) for n, s in res.swaps.items()},
        "degradations": {n: asdict(d) for n, d in res.degradations.items()},
        "llm_weights": res.llm_weights, "references": spec.references,
        "computed_per_step": res.computed,
    }


def render(res: ExperimentResult, indent: int | None = 1) -> str:
    return json.dumps(to_dict(res), indent=indent)


__all__ = ["render", "to_dict"]
