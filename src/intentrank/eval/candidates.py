"""The candidates ``intentrank choose`` compares, scored from one pass of their parts.

Each family runs its expensive parts once per query (BM25, dense, sparse, the tri-modal legs,
the default cascade's cross-encoder over RRF's top 20) and every parameter setting is a
re-fusion of those parts in Python, ranked exactly as the pipeline its :meth:`Family.config`
writes would rank it (ties by doc id, as ``Ranking.from_scores``). The shipped setting
comes first in each grid, so a tuned variant only departs from it when that scores higher.
Tuned variants are scored by two-fold cross-fitting: each half of the questions is ranked
with the setting tuned on the other half (:func:`cross_fitted`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.core.fusion import rrf
from intentrank.data.trec import Qrels, Run, ranked_scores
from intentrank.measures.metrics import evaluate
from intentrank.tune.grid import feature_matrix, kfold
from intentrank.tune.modality import SCORES, modality_rankings, simplex_grid
from intentrank.types import Query

METRIC = "nDCG@10"
# the pipeline to run without choosing (README, the configs' headers): ``choose`` departs
# from it only for a candidate that beats it beyond noise on the generated questions
REFERENCE = "rrf"
DEPTH = 100
Params = dict[str, Any]
# a part: query id -> ranked [doc id, score, ...] rows (what each family re-fuses)
Part = dict[str, list[list[Any]]]


def _ordered(scores: Mapping[str, float], top: int = DEPTH) -> Run:
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return ranked_scores(ranked)


def _ids(rows: Sequence[Sequence[Any]]) -> list[str]:
    return [r[0] for r in rows]


# --- the parts -------------------------------------------------------------------------------


def _shipped(name: str, index: Any, queries: Sequence[Query]) -> Part:
    from intentrank.pipelines import pipeline_from_config

    res = pipeline_from_config(name, index).run(list(queries))
    return {r.query.id: [[d.doc_id, d.score] for d in r.docs] for r in res.rankings}


def _legs(index: Any, queries: Sequence[Query]) -> Part:
    out = {}
    for r in modality_rankings(index, list(queries), DEPTH):
        ids, mat = feature_matrix(r, SCORES, normalise=True)
        out[r.query.id] = [[i, *row] for i, row in zip(ids, mat.tolist(), strict=True)]
    return out


def cascade_node(ce_weight: float = 1.0, rrf_k: float = 60, cutoff: int | None = 10) -> list:
    """The shipped cascade with the cross-encoder's RRF weight against its input's."""
    from intentrank.core.config import load_config, resolve_pipeline

    steps = list(load_config(resolve_pipeline("cascade"))["pipeline"])
    fuse = dict(steps[-2]["rrf_with_input"])
    fuse["rrf_k"] = rrf_k
    if ce_weight != 1.0:
        fuse["weights"] = [1.0, ce_weight]
    steps[-2] = {"rrf_with_input": fuse}
    return steps if cutoff else steps[:-1]


def _cascade(index: Any, queries: Sequence[Query]) -> Part:
    from intentrank.core.config import build_pipeline
    from intentrank.pipelines import build_context

    pipe = build_pipeline(cascade_node(cutoff=None), build_context(index))
    out = {}
    for r in pipe.run(list(queries)).rankings:
        rows = [[d.doc_id, d.stage_scores["rrf"], d.stage_scores["ce_rrf/cross_encoder"]]
                for d in r.docs]
        out[r.query.id] = sorted(rows, key=lambda x: (-x[1], x[0]))  # the input's order
    return out


PARTS: dict[str, Callable[[Any, Sequence[Query]], Part]] = {
    "bm25": lambda idx, qs: _shipped("bm25", idx, qs),
    "dense": lambda idx, qs: _shipped("dense", idx, qs),
    "sparse": lambda idx, qs: _shipped("sparse", idx, qs),
    "legs": _legs,
    "cascade": _cascade,
}


def compute_parts(index: Any, queries: Sequence[Query], cache: Path | None,
                  names: Sequence[str] = tuple(PARTS),
                  log: Callable[[str], None] | None = None) -> dict[str, Part]:
    """Each part for ``queries``, read from ``cache`` (a folder) when this index and these
    query texts were done before; a part is saved as soon as it is computed (resumable)."""
    key = hashlib.sha256(json.dumps([getattr(index, "corpus_sha256", ""),
                                     [(q.id, q.text) for q in queries]]).encode()).hexdigest()
    out = {}
    for name in names:
        path = cache / f"{name}-{key[:16]}.json" if cache else None
        if path is not None and path.is_file():
            out[name] = json.loads(path.read_text(encoding="utf-8"))
            continue
        if log:
            log(f"running {name} on {len(queries)} questions")
        out[name] = PARTS[name](index, queries)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(out[name]), encoding="utf-8")
            tmp.replace(path)
    return out


# --- the families ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Pipelines that share their parts: ``run`` ranks queries for one setting, ``config``
    writes that setting as a pipeline node; ``grid[0]`` is the shipped setting."""

    name: str
    cost_ms: float  # per query on 2 cores, docs/benchmarks.md "Defaults" (sparse: estimated)
    parts: tuple[str, ...]
    grid: tuple[Params, ...]
    run: Callable[[dict[str, Part], Sequence[str], Params], Run]
    config: Callable[[Params], Any]


def _single(part: str) -> Callable[[dict[str, Part], Sequence[str], Params], Run]:
    return lambda parts, qids, p: {q: ranked_scores((r[0], r[1]) for r in parts[part][q])
                                   for q in qids}


def _rrf_run(parts: dict[str, Part], qids: Sequence[str], p: Params) -> Run:
    return {q: _ordered(rrf([_ids(parts["bm25"][q]), _ids(parts["dense"][q])], p["rrf_k"],
                            [1.0, p["dense_weight"]])) for q in qids}


def _rrf_config(p: Params) -> Any:
    fuse: dict[str, Any] = {"method": "rrf", "rrf_k": p["rrf_k"],
                            "inputs": [{"bm25": {"depth": DEPTH}}, {"dense": {"depth": DEPTH}}]}
    if p["dense_weight"] != 1.0:
        fuse["weights"] = [1.0, p["dense_weight"]]
    return [{"fuse": fuse}, {"cutoff": DEPTH}]


def _weighted_run(parts: dict[str, Part], qids: Sequence[str], p: Params) -> Run:
    w = np.asarray(p["weights"], dtype=float)
    out = {}
    for q in qids:
        rows = parts["legs"][q]
        mat = np.asarray([r[1:] for r in rows], dtype=float).reshape(len(rows), 3)
        out[q] = _ordered(dict(zip(_ids(rows), (mat @ w).tolist(), strict=True)))
    return out


def _weighted_config(p: Params) -> Any:
    return [{"fuse": {"method": "weighted", "weights": list(p["weights"]),
                      "inputs": [{"dense": {"depth": DEPTH}}, {"sparse": {"depth": DEPTH}},
                                 {"graph": {"depth": DEPTH}}]}}, {"cutoff": DEPTH}]


def _cascade_run(parts: dict[str, Part], qids: Sequence[str], p: Params) -> Run:
    out = {}
    for q in qids:
        rows = parts["cascade"][q]
        by_ce = [r[0] for r in sorted(rows, key=lambda x: (-x[2], x[0]))]
        out[q] = _ordered(rrf([_ids(rows), by_ce], p["rrf_k"], [1.0, p["ce_weight"]]), 10)
    return out


def families() -> list[Family]:
    """The shipped pipelines without an LLM step, grouped by the parts they share."""
    w_grid = [0.25, 0.5, 0.75, 1.5, 2.0, 4.0]
    rrf_grid = ({"dense_weight": 1.0, "rrf_k": 60},
                *({"dense_weight": w, "rrf_k": k} for k in (20, 60) for w in [1.0, *w_grid]
                  if (w, k) != (1.0, 60)))
    modality = ({"weights": [0.5, 0.35, 0.15]},
                *({"weights": list(w)} for w in simplex_grid(0.1)))
    ce = ({"ce_weight": 1.0, "rrf_k": 60},
          *({"ce_weight": w, "rrf_k": 60} for w in (0.0, 0.25, 0.5, 0.75, 1.5, 2.0, 4.0, 100.0)))
    return [
        Family("bm25", 0.3, ("bm25",), ({},), _single("bm25"), lambda p: {"bm25": {"depth": 100}}),
        Family("sparse", 1.0, ("sparse",), ({},), _single("sparse"),
               lambda p: {"sparse": {"depth": 100}}),
        Family("dense", 1.4, ("dense",), ({},), _single("dense"),
               lambda p: {"dense": {"depth": 100}}),
        Family("rrf", 2.3, ("bm25", "dense"), rrf_grid, _rrf_run, _rrf_config),
        Family("weighted", 2.9, ("legs",), modality, _weighted_run, _weighted_config),
        Family("cascade", 200.0, ("cascade",), ce, _cascade_run,
               lambda p: cascade_node(p["ce_weight"], p["rrf_k"])),
    ]


# --- scoring ---------------------------------------------------------------------------------


def per_query(run: Run, qrels: Qrels) -> dict[str, float]:
    return evaluate(run, qrels, [METRIC]).column(METRIC)


@dataclass
class Scored:
    """Every candidate's per-query score, its setting and the family it belongs to;
    ``tuned`` candidates (``<family>-tuned``) are cross-fitted and carry the setting tuned
    on all the questions."""

    scores: dict[str, dict[str, float]]
    params: dict[str, Params]
    family: dict[str, Family]


def grid_scores(fam: Family, parts: dict[str, Part], qrels: Qrels) -> list[dict[str, float]]:
    """Per-query scores of every grid point, in grid order."""
    qids = sorted(q for q in qrels if q in parts[fam.parts[0]])
    return [per_query(fam.run(parts, qids, p), {q: qrels[q] for q in qids}) for p in fam.grid]


def _best(table: list[dict[str, float]], qids: Sequence[str]) -> int:
    means = [sum(t[q] for q in qids) / max(len(qids), 1) for t in table]
    return int(np.argmax(means))  # ties: the first, so the shipped setting


def cross_fitted(table: list[dict[str, float]], seed: int = 0) -> tuple[dict[str, float], int]:
    """Two-fold cross-fitting: each half scored at the grid point best on the other half;
    also the point best on all queries (the setting to ship)."""
    qids = sorted(table[0])
    out: dict[str, float] = {}
    halves = kfold(qids, 2, seed)
    for i, held in enumerate(halves):
        point = _best(table, halves[1 - i])
        out.update({q: table[point][q] for q in held})
    return out, _best(table, qids)


def score_candidates(fams: Sequence[Family], parts: dict[str, Part], qrels: Qrels,
                     seed: int = 0) -> Scored:
    """The shipped setting of each family and, where it has a grid, its tuned variant."""
    res = Scored({}, {}, {})
    for fam in fams:
        table = grid_scores(fam, parts, qrels)
        res.scores[fam.name], res.params[fam.name] = table[0], fam.grid[0]
        res.family[fam.name] = fam
        if len(fam.grid) > 1:
            name = f"{fam.name}-tuned"
            res.scores[name], point = cross_fitted(table, seed)
            res.params[name], res.family[name] = fam.grid[point], fam
    return res


def score_settings(settings: Mapping[str, tuple[Family, Params]], parts: dict[str, Part],
                   qrels: Qrels) -> dict[str, dict[str, float]]:
    """Per-query scores of fixed settings (e.g. those chosen on generated questions, on real
    queries)."""
    out = {}
    for name, (fam, p) in settings.items():
        qids = sorted(q for q in qrels if q in parts[fam.parts[0]])
        out[name] = per_query(fam.run(parts, qids, p), {q: qrels[q] for q in qids})
    return out


def cost(name: str, fam: Family) -> float:
    """A tuned variant costs a hair more than the shipped one (same work; ties go to the
    shipped config)."""
    return fam.cost_ms + (0.01 if name.endswith("-tuned") else 0.0)


__all__ = ["DEPTH", "METRIC", "PARTS", "REFERENCE", "Family", "Scored", "cascade_node",
           "compute_parts", "cost", "cross_fitted", "families", "grid_scores", "per_query",
           "score_candidates", "score_settings"]
