"""Evaluate several pipelines on the same queries and report them as a Markdown table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from intentrank.core.stage import RunResult, Stage
from intentrank.data.trec import Qrels
from intentrank.errors import ConfigError
from intentrank.eval.metrics import DEFAULT_METRICS, EvalResult, evaluate, validate_metrics
from intentrank.eval.significance import PairedTest, paired_test
from intentrank.types import Query


@dataclass
class SystemResult:
    name: str
    run: RunResult
    scores: EvalResult

    @property
    def ms_per_query(self) -> float:
        n = max(len(self.run.rankings), 1)
        return 1000 * sum(st.seconds for st in self.run.trace.stages.values()) / n


@dataclass
class Experiment:
    """Results of several systems on one query set, with tests against a baseline."""

    systems: list[SystemResult]
    metrics: list[str]
    baseline: str | None = None
    tests: dict[str, dict[str, PairedTest]] = field(default_factory=dict)

    def to_markdown(self, alpha: float = 0.05, digits: int = 4) -> str:
        """A table: one row per system, best value per metric in bold; ``†`` marks a
        significant difference from the baseline (paired randomization test, p < alpha)."""
        header = ["system", *self.metrics, "ms/query"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        best = {m: max(s.scores.aggregate[m] for s in self.systems) for m in self.metrics}
        for s in self.systems:
            cells = [s.name + (" (baseline)" if s.name == self.baseline else "")]
            for m in self.metrics:
                v = s.scores.aggregate[m]
                cell = f"{v:.{digits}f}"
                test = self.tests.get(s.name, {}).get(m)
                if test is not None and test.significant(alpha):
                    cell += "†"
                cells.append(f"**{cell}**" if v == best[m] else cell)
            cells.append(f"{s.ms_per_query:.1f}")
            lines.append("| " + " | ".join(cells) + " |")
        if self.baseline:
            lines.append("")
            lines.append(f"† p < {alpha} against {self.baseline} (paired randomization test, "
                         f"10,000 sign flips; n = {len(self.systems[0].scores.per_query)} "
                         f"queries).")
        return "\n".join(lines)


def run_experiment(
    systems: Mapping[str, Stage],
    queries: Sequence[Query],
    qrels: Qrels,
    metrics: Sequence[str] = DEFAULT_METRICS,
    baseline: str | None = None,
) -> Experiment:
    """Run every system on ``queries`` and score it; test each against ``baseline``.

    Metric names and the baseline are checked before any system runs."""
    if not systems:
        raise ConfigError("no systems to evaluate")
    if baseline is not None and baseline not in systems:
        raise ValueError(f"baseline {baseline!r} is not one of {list(systems)}")
    metrics = validate_metrics(list(metrics))
    results = []
    for name, pipeline in systems.items():
        run = pipeline.run(queries)
        results.append(SystemResult(name, run, evaluate(run.to_run(), qrels, metrics)))
    exp = Experiment(results, list(metrics), baseline)
    if baseline is not None:
        base = next(r for r in results if r.name == baseline)
        for r in results:
            if r.name != baseline:
                exp.tests[r.name] = {m: paired_test(base.scores.column(m), r.scores.column(m), m)
                                     for m in metrics}
    return exp
