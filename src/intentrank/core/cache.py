"""Reuse a stage's outputs across pipelines that share it (ablations, experiments).

``Cached(stage)`` runs ``stage`` only for inputs it has not seen (same query, same derived
texts, same candidate ids, same stage-score names) and replays stored outputs otherwise. A
replay also adds the stored per-query share of the original wall time and counters to the
trace, so every pipeline's trace shows what it would cost on its own; ``replayed`` counts
replays. The replayed amounts are also recorded in ``Trace.replayed``, so the work actually
done can be told apart (LLM health summed over an ablation's configurations counts each call
once).

An output computed where the stage had one path id (``dense``, alone) and replayed where it
has another (``weighted/dense``, a fusion branch) is relabelled: its trace entries, stage
scores and derived texts move to the new path id. ``Cached`` itself takes no place in path ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from intentrank.core.stage import Stage
from intentrank.types import Ranking, Trace, under


@dataclass
class _Entry:
    ranking: Ranking
    path_id: str  # where the stage ran when it computed the output
    seconds: dict[str, float] = field(default_factory=dict)
    counters: dict[str, dict[str, float]] = field(default_factory=dict)


def _key(r: Ranking) -> tuple:
    q = r.query
    return (q.id, q.text, q.history, q.derived, tuple(r.doc_ids), r.score_names())


def _moved(old: str, new: str) -> Callable[[str], str]:
    """Rename what the stage at ``old`` recorded to the stage at ``new``."""
    return lambda name: new + name[len(old):] if under(name, old) else name


class Cached(Stage):
    """Memoise ``stage`` per input ranking. ``store``: the dict that holds the outputs, to
    share them with other ``Cached`` wrappers of the same computation (the experiment harness
    keeps one per canonical pipeline prefix)."""

    def __init__(self, stage: Stage, store: dict | None = None) -> None:
        self.stage = stage
        self.name = f"cached:{stage.name}"
        self._store: dict[tuple, _Entry] = {} if store is None else store

    def __call__(self, rankings: list[Ranking], trace: Trace | None = None) -> list[Ranking]:
        trace = trace if trace is not None else Trace()
        path_id = trace.path_of(self.stage)
        keys = [_key(r) for r in rankings]
        todo = [i for i, k in enumerate(keys) if k not in self._store]
        if todo:
            sub = trace.fork()
            outputs = self.stage([rankings[i] for i in todo], sub)
            n = len(todo)
            seconds = {name: st.seconds / n for name, st in sub.stages.items()}
            counters = {name: {c: v / n for c, v in st.counters.items()}
                        for name, st in sub.stages.items()}
            for i, out in zip(todo, outputs, strict=True):
                self._store[keys[i]] = _Entry(out, path_id, seconds, counters)
            trace.merge(sub)
        fresh = set(todo)
        out = []
        for i, key in enumerate(keys):
            entry = self._store[key]
            rename = _moved(entry.path_id, path_id)
            if i not in fresh:
                for name, secs in entry.seconds.items():
                    st = trace.stage(rename(name))
                    st.seconds += secs
                    st.queries += 1
                    for c, v in entry.counters[name].items():
                        st.counters[c] = st.counters.get(c, 0) + v
                    trace.add_replayed(st.name, {"queries": 1, "seconds": secs,
                                                 **entry.counters[name]})
            out.append(entry.ranking if entry.path_id == path_id
                       else entry.ranking.relabel(rename))
        if len(fresh) < len(keys):
            trace.count(path_id, "replayed", len(keys) - len(fresh))
        return out

    def describe(self) -> str:
        return self.stage.describe()
