"""Experiment files: what to evaluate, on which queries, and which analyses to render.

An experiment file (YAML) names a dataset, a split, a query sample, the metrics, a baseline
and a set of named pipelines; the harness (:mod:`intentrank.eval.harness`) runs them all on
the same queries. Example::

    title: BM25 against dense and their fusion
    dataset: scifact                 # a directory under the data root, or a path
    split: test
    sample: {size: 100, seed: 0}     # size 0: the whole split
    metrics: [nDCG@10, MRR@10, Recall@100]
    baseline: bm25
    pipelines:
      bm25: [{bm25: {depth: 100}}]   # a pipeline node (the grammar of core/config.py)
      dense: {config: dense}         # a shipped pipeline name or a config file
      dense + CE:
        parent: dense                # swaps, degradations, tests against the parent
        then: [{cross_encoder: {top_k: 30}}, {cutoff: 10}]   # the parent's steps, then these
        adds: cross-encoder          # the step the child adds, as the tables name it
      rrf:
        pipeline: {fuse: {method: rrf, inputs: [bm25, dense]}}
        description: RRF of BM25 and dense

Other keys: ``index`` (default ``indexes/<dataset>``) and ``indexes`` (extra indexes by
name, ``{chunks: {legs: [dense], chunk_size: 128}}``; a pipeline picks one with ``index:``);
``primary_metric`` (swaps, degradations and variants are measured on it; default nDCG@10 or
the first metric); ``significance: {metrics, alpha, permutations, seed}``; ``swaps:
{depth}``; ``degradations: {worst}``; ``variants: {metrics}`` (a pipeline with
``variant_of: X`` and a ``label`` is compared with X, e.g. dynamic against static weights);
``latency: {cold, warm_up, columns, llm_columns}``; ``report`` (the tables to render, see
:data:`TABLES`); ``references: {source, values}`` (published numbers shown beside ours);
``notes``. Every mistake is a :class:`ConfigError` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from intentrank.core.config import resolve_shipped
from intentrank.errors import ConfigError

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"
TABLES = ("quality", "variants", "swaps", "degradations", "worst", "latency", "significance",
          "references", "metrics")
DEFAULT_REPORT = TABLES[:-1]
_TOP = ("title", "description", "dataset", "split", "sample", "index", "indexes", "metrics",
        "primary_metric", "baseline", "significance", "swaps", "degradations", "variants",
        "latency", "report", "references", "notes", "pipelines")
_ENTRY = ("pipeline", "config", "then", "parent", "variant_of", "label", "adds",
          "description", "index")


@dataclass
class PipelineSpec:
    """One named pipeline: a config node (or a ready ``stage`` from Python) and its links."""

    name: str
    node: Any = None
    parent: str | None = None
    variant_of: str | None = None
    label: str = ""
    adds: str = ""
    description: str = ""
    index: str | None = None  # one of the experiment's extra ``indexes``
    stage: Any = None  # a built Stage (Python callers); replaces ``node``


@dataclass
class TableSpec:
    """A table to render: ``kind`` is one of :data:`TABLES`; the rest narrows it."""

    kind: str
    title: str = ""
    metrics: list[str] = field(default_factory=list)
    pipelines: list[str] = field(default_factory=list)


@dataclass
class LatencySpec:
    """Cold-run latency accounting. ``cold``: LLM replies replayed from the on-disk cache
    are charged the seconds they took when generated; ``columns``: latency column -> the
    stages summed into it, by path id or name (``cross_encoder`` takes
    ``ce_rrf/cross_encoder``; unnamed stages go to ``other``; no columns: one per path id);
    ``llm_columns``: stage -> column that receives that stage's LLM seconds."""

    cold: bool = True
    warm_up: bool = True
    columns: dict[str, list[str]] = field(default_factory=dict)
    llm_columns: dict[str, str] = field(default_factory=dict)


@dataclass
class ExperimentSpec:
    """A parsed experiment file (see the module doc)."""

    pipelines: list[PipelineSpec]
    metrics: list[str]
    dataset: str = ""
    split: str = "test"
    sample: int = 0
    seed: int = 0
    title: str = ""
    description: str = ""
    index: str | None = None
    indexes: dict[str, dict[str, Any]] = field(default_factory=dict)
    primary_metric: str = ""
    baseline: str | None = None
    test_metrics: list[str] = field(default_factory=list)
    alpha: float = 0.05
    permutations: int = 10_000
    test_seed: int | None = None
    swap_depth: int = 10
    worst: int = 5
    variant_metrics: list[str] = field(default_factory=list)
    latency: LatencySpec = field(default_factory=LatencySpec)
    report: list[TableSpec] = field(default_factory=lambda: [TableSpec(k) for k in
                                                             DEFAULT_REPORT])
    references: dict[str, dict[str, float]] = field(default_factory=dict)
    reference_source: str = ""
    notes: list[str] = field(default_factory=list)
    path: Path | None = None
    source: str = "experiment"  # names the experiment in errors (its file, usually)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.pipelines]

    def pipeline(self, name: str) -> PipelineSpec:
        return next(p for p in self.pipelines if p.name == name)

    def replace(self, **changes: Any) -> ExperimentSpec:
        """A copy with some fields changed (checked again), e.g. ``sample=10``."""
        return dataclasses.replace(self, **changes).check()

    def with_params(self, stage: str, **params: Any) -> ExperimentSpec:
        """A copy in which every ``stage`` of every pipeline gets ``params`` (e.g.
        ``with_params("listwise", max_passage_chars=600)``); ConfigError if none has one."""
        pipes = [dataclasses.replace(p, node=_set_params(p.node, stage, params))
                 for p in self.pipelines]
        if all(p.node == q.node for p, q in zip(pipes, self.pipelines, strict=True)):
            raise ConfigError(f"{self.source}: no pipeline has a {stage!r} stage to set "
                              f"{', '.join(params)} on")
        return self.replace(pipelines=pipes)

    def with_assignments(self, items: Iterable[str], where: str = "--set") -> ExperimentSpec:
        """A copy with each ``STAGE.PARAM=VALUE`` of ``items`` applied in turn (see
        :func:`parse_assignment` and :meth:`with_params`)."""
        spec = self
        for item in items:
            stage, param, value = parse_assignment(item, where)
            spec = spec.with_params(stage, **{param: value})
        return spec

    def check(self, where: str = "") -> ExperimentSpec:
        """Cross-field checks (names, metrics and links that must agree); fills defaults."""
        from intentrank.measures.metrics import validate_metrics

        where = where or self.source
        if not self.pipelines:
            raise ConfigError(f"{where}: pipelines: none given")
        names = self.names
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError(f"{where}: pipelines: duplicate names {twice}")
        try:
            self.metrics = validate_metrics(self.metrics)
        except ConfigError as exc:
            raise ConfigError(f"{where}: metrics: {exc}") from None
        self.primary_metric = self.primary_metric or (
            "nDCG@10" if "nDCG@10" in self.metrics else self.metrics[0])
        self.test_metrics = self.test_metrics or list(self.metrics)
        self.variant_metrics = self.variant_metrics or [self.primary_metric]
        for key, values in (("primary_metric", [self.primary_metric]),
                            ("significance.metrics", self.test_metrics),
                            ("variants.metrics", self.variant_metrics)):
            missing = [m for m in values if m not in self.metrics]
            if missing:
                raise ConfigError(f"{where}: {key}: {missing} not among metrics {self.metrics}")
        if self.baseline is not None and self.baseline not in names:
            raise ConfigError(f"{where}: baseline: {self.baseline!r} is not one of the "
                              f"pipelines {names}")
        for p in self.pipelines:
            for key in ("parent", "variant_of"):
                other = getattr(p, key)
                if other is not None and (other not in names or other == p.name):
                    raise ConfigError(f"{where}: pipelines.{p.name}.{key}: {other!r} is not "
                                      f"another pipeline of this experiment")
            if p.index is not None and p.index not in self.indexes:
                raise ConfigError(f"{where}: pipelines.{p.name}.index: {p.index!r} is not "
                                  f"one of the indexes {sorted(self.indexes)}")
            if p.node is None and p.stage is None:
                raise ConfigError(f"{where}: pipelines.{p.name}: no pipeline given")
        for t in self.report:
            unknown = [n for n in t.pipelines if n not in names]
            bad = [m for m in t.metrics if m not in self.metrics]
            if unknown or bad:
                raise ConfigError(f"{where}: report.{t.kind}: unknown pipelines {unknown} or "
                                  f"metrics {bad}")
        unknown = [n for n in self.references if n not in names]
        if unknown:
            raise ConfigError(f"{where}: references.values: {unknown} are not pipelines")
        return self


def _set_params(node: Any, stage: str, params: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_set_params(n, stage, params) for n in node]
    if isinstance(node, str):
        return {stage: dict(params)} if node == stage else node
    if isinstance(node, dict) and len(node) == 1:
        ((name, given),) = node.items()
        if name == stage:
            return {name: {**(given or {}), **params}}
        if isinstance(given, dict):
            return {name: {k: _set_params(v, stage, params) for k, v in given.items()}}
    return node


# -- changes given on the command line ---------------------------------------------------

WITHOUT_LLM = "llm"  # a ``without`` entry: every pipeline that calls an LLM


def parse_assignment(item: str, where: str = "--set") -> tuple[str, str, Any]:
    """``STAGE.PARAM=VALUE`` (VALUE is YAML) as ``(stage, param, value)``; a ConfigError
    naming ``where`` and the item otherwise."""
    target, eq, text = item.partition("=")
    stage, dot, param = target.partition(".")
    if not (eq and dot and stage and param):
        raise ConfigError(f"{where} {item!r}: expected STAGE.PARAM=VALUE")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} {item!r}: VALUE is not YAML ({exc})") from None
    return stage, param, value


def check_without(names: Iterable[str], where: str = "--without") -> list[str]:
    """``names`` to skip pipelines by (``run_experiment(without=...)``), checked: each a
    registered stage name, a fusion method or ``llm``."""
    from intentrank.pipelines import known_names

    names = list(names)
    known = {*known_names(), WITHOUT_LLM}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ConfigError(f"{where} {unknown}: not a stage name, fusion method or "
                          f"'{WITHOUT_LLM}'; known: {', '.join(sorted(known))}")
    return names


# -- reading a file ----------------------------------------------------------------------
def _mapping(value: Any, where: str, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    if keys is not None and (unknown := [k for k in value if k not in keys]):
        raise ConfigError(f"{where}: unknown key(s) {unknown}; expected {', '.join(keys)}")
    return value


def _int(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return [_str(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _config_node(name: str, base: Path | None, where: str) -> Any:
    from intentrank.core.config import load_config, resolve_pipeline

    path = base / name if base is not None and (base / name).is_file() else None
    try:
        return load_config(path or resolve_pipeline(name))["pipeline"]
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _entry(name: str, raw: Any, base: Path | None, where: str) -> tuple[PipelineSpec, Any]:
    """A pipeline entry and its ``then`` steps (resolved against the parent later)."""
    if isinstance(raw, str):
        raw = {"config": raw}
    elif isinstance(raw, list) or (isinstance(raw, dict) and not set(raw) & set(_ENTRY)):
        raw = {"pipeline": raw}
    entry = _mapping(raw, where, _ENTRY)
    given = [k for k in ("pipeline", "config", "then") if k in entry]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of pipeline, config or then (got "
                          f"{given or 'none'})")
    then = entry.get("then")
    if then is not None and "parent" not in entry:
        raise ConfigError(f"{where}.then: extends the parent's pipeline; name a parent")
    if then is not None and not isinstance(then, list):
        then = [then]
    node = (_config_node(_str(entry["config"], f"{where}.config"), base, f"{where}.config")
            if "config" in entry else entry.get("pipeline"))
    text = {k: _str(entry[k], f"{where}.{k}") for k in ("parent", "variant_of", "label",
            "adds", "description", "index") if entry.get(k) is not None}
    return PipelineSpec(name, node, **text), then


def _resolve_then(specs: list[PipelineSpec], thens: dict[str, Any], where: str) -> None:
    by_name = {p.name: p for p in specs}

    def steps(name: str, seen: tuple[str, ...]) -> Any:
        p = by_name[name]
        if name in thens and p.node is None:
            if name in seen:
                raise ConfigError(f"{where}: pipelines.{name}.then: the parents form a cycle "
                                  f"({' -> '.join((*seen, name))})")
            if p.parent not in by_name:
                raise ConfigError(f"{where}: pipelines.{name}.parent: {p.parent!r} is not "
                                  f"a pipeline of this experiment")
            base = steps(p.parent, (*seen, name))
            p.node = [*(base if isinstance(base, list) else [base]), *thens[name]]
            if p.index is None:
                p.index = by_name[p.parent].index
        return p.node

    for p in specs:
        steps(p.name, ())


def _report(raw: Any, where: str) -> list[TableSpec]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of tables ({', '.join(TABLES)})")
    out = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        item = {"table": item} if isinstance(item, str) else _mapping(
            item, here, ("table", "title", "metrics", "pipelines"))
        if item.get("table") not in TABLES:
            raise ConfigError(f"{here}: unknown table {item.get('table')!r}; one of "
                              f"{', '.join(TABLES)}")
        out.append(TableSpec(item["table"], str(item.get("title") or ""),
                             _strings(item.get("metrics", []), f"{here}.metrics"),
                             _strings(item.get("pipelines", []), f"{here}.pipelines")))
    return out


# sections of an experiment file: key -> {sub-key: default}; the default's type is checked
_SECTIONS: dict[str, dict[str, Any]] = {
    "sample": {"size": 0, "seed": 0}, "swaps": {"depth": 10}, "degradations": {"worst": 5},
    "significance": {"metrics": [], "alpha": 0.05, "permutations": 10_000, "seed": None},
    "variants": {"metrics": []}, "references": {"source": "", "values": {}},
    "latency": {"cold": True, "warm_up": True, "columns": {}, "llm_columns": {}},
}


def _section(top: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    raw, defaults = top.get(key), _SECTIONS[key]
    if key == "sample" and isinstance(raw, int) and not isinstance(raw, bool):
        raw = {"size": raw}
    given = _mapping(raw, f"{where}: {key}", tuple(defaults))
    out = {}
    for sub, default in defaults.items():
        value, here = given.get(sub, default), f"{where}: {key}.{sub}"
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{here}: expected true or false, got {value!r}")
        if isinstance(default, float) and (isinstance(value, bool) or not isinstance(
                value, int | float) or not 0 < value < 1):
            raise ConfigError(f"{here}: expected a number in (0, 1), got {value!r}")
        if (default is None and value is not None) or type(default) is int:
            value = _int(value, here, 1 if sub in ("depth", "permutations") else 0)
        out[sub] = (_strings(value, here) if isinstance(default, list) else
                    _mapping(value, here) if isinstance(default, dict) else
                    str(value) if isinstance(default, str) else value)
    return out


def parse_experiment(data: Any, where: str = "experiment", base: Path | None = None,
                     path: Path | None = None) -> ExperimentSpec:
    """An :class:`ExperimentSpec` from a parsed YAML/JSON document; ``where`` names it in
    errors, ``base`` is the directory config paths are relative to, ``path`` its file."""
    top = _mapping(data, where, _TOP)
    if "metrics" not in top or "pipelines" not in top:
        raise ConfigError(f"{where}: an experiment file needs 'metrics' and 'pipelines'")
    specs, thens = [], {}
    for name, raw in _mapping(top["pipelines"], f"{where}: pipelines").items():
        spec, then = _entry(name, raw, base, f"{where}: pipelines.{name}")
        specs.append(spec)
        if then is not None:
            thens[name] = then
    _resolve_then(specs, thens, where)
    sec = {key: _section(top, key, where) for key in _SECTIONS}
    lat, refs = sec["latency"], sec["references"]
    values = {n: {m: float(v) for m, v in _mapping(ref, f"{where}: references.values.{n}")
                  .items()} for n, ref in refs["values"].items()}
    opt = {k: _str(top[k], f"{where}: {k}") for k in
           ("title", "description", "dataset", "split", "index", "primary_metric", "baseline")
           if top.get(k) is not None}
    return ExperimentSpec(
        specs, _strings(top["metrics"], f"{where}: metrics"), **opt,
        sample=sec["sample"]["size"], seed=sec["sample"]["seed"],
        indexes={n: _mapping(v, f"{where}: indexes.{n}")
                 for n, v in _mapping(top.get("indexes"), f"{where}: indexes").items()},
        test_metrics=sec["significance"]["metrics"], alpha=float(sec["significance"]["alpha"]),
        permutations=sec["significance"]["permutations"], test_seed=sec["significance"]["seed"],
        swap_depth=sec["swaps"]["depth"], worst=sec["degradations"]["worst"],
        variant_metrics=sec["variants"]["metrics"],
        latency=LatencySpec(lat["cold"], lat["warm_up"], {
            c: _strings(v, f"{where}: latency.columns.{c}") for c, v in lat["columns"].items()},
            {s: _str(c, f"{where}: latency.llm_columns.{s}")
             for s, c in lat["llm_columns"].items()}),
        report=(_report(top["report"], f"{where}: report") if "report" in top
                else [TableSpec(k) for k in DEFAULT_REPORT]),
        references=values, reference_source=refs["source"],
        notes=_strings(top.get("notes", []), f"{where}: notes"), path=path, source=where,
    ).check()


def load_experiment(name_or_path: str | Path) -> ExperimentSpec:
    """Read and check an experiment file (a path or a shipped name)."""
    path = resolve_shipped(name_or_path, EXPERIMENTS_DIR, "experiment file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: cannot read experiment file: {exc}") from exc
    return parse_experiment(data, str(path), path.parent, path)


__all__ = ["EXPERIMENTS_DIR", "ExperimentSpec", "LatencySpec", "PipelineSpec", "TABLES",
           "TableSpec", "WITHOUT_LLM", "check_without", "load_experiment", "parse_assignment",
           "parse_experiment"]
