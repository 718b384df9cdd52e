"""Pipelines described as data (YAML or JSON), so the CLI and Python run the same thing.

Grammar of a node::

    - a list of nodes              -> run them in order (``>>``)
    - "bm25"                       -> a registered stage with default parameters
    - {bm25: {k: 100}}             -> a registered stage with parameters
    - {cutoff: 10}                 -> keep the top 10 (``% 10``)
    - {fuse: {method: rrf, k: 60, weights: [1, 1], inputs: [node, node, ...]}}
                                   -> fuse branches: rrf | weighted | interleave

A config file holds ``pipeline: <node>`` and optionally ``index: <path>``. Example::

    index: indexes/scifact
    pipeline:
      - fuse: {method: rrf, inputs: [{bm25: {k: 100}}, {dense: {k: 100}}]}
      - cutoff: 10
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from intentrank.errors import ConfigError
from intentrank.index.store import Index
from intentrank.pipeline.fusion import InterleaveFusion, RRFFusion, WeightedFusion
from intentrank.pipeline.retrievers import RETRIEVERS, sparse_retriever
from intentrank.pipeline.stage import Chain, Cutoff, Stage


@dataclass
class BuildContext:
    """What stage factories may need: the index and shared resources (models, LLMs)."""

    index: Index | None = None
    resources: dict[str, Any] = field(default_factory=dict)

    def llm(self) -> Any:
        """The LLM client stages share: ``resources['llm']`` (a client, backend or spec
        string such as ``embedded`` or ``openai:<model>@<url>``), built once per config."""
        from intentrank.llm.client import LLMClient, load_llm

        llm = self.resources.get("llm", "embedded")
        if isinstance(llm, str):
            llm = load_llm(llm, **self.resources.get("llm_options", {}))
        elif not isinstance(llm, LLMClient):
            llm = LLMClient(llm, **self.resources.get("llm_options", {}))
        self.resources["llm"] = llm
        return llm

    def require_index(self, stage: str) -> Index:
        if self.index is None:
            raise ConfigError(f"stage {stage!r} needs an index: pass --index or set 'index:' "
                              f"in the config")
        return self.index


StageFactory = Callable[[BuildContext, dict[str, Any]], Stage]
STAGES: dict[str, StageFactory] = {}


def register_stage(name: str) -> Callable[[StageFactory], StageFactory]:
    """Make a stage buildable from configs under ``name``."""

    def deco(factory: StageFactory) -> StageFactory:
        STAGES[name] = factory
        return factory

    return deco


for _leg, _cls in RETRIEVERS.items():
    register_stage(_leg)(lambda ctx, p, _leg=_leg, _cls=_cls: _cls(ctx.require_index(_leg), **p))
register_stage("sparse")(lambda ctx, p: sparse_retriever(ctx.require_index("sparse"), **p))

FUSERS = {"rrf": RRFFusion, "weighted": WeightedFusion, "interleave": InterleaveFusion}


def build_pipeline(node: Any, ctx: BuildContext, where: str = "pipeline") -> Stage:
    """Turn a config node into a stage; errors name the offending place."""
    if isinstance(node, list):
        if not node:
            raise ConfigError(f"{where}: an empty list is not a pipeline")
        return Chain([build_pipeline(n, ctx, f"{where}[{i}]") for i, n in enumerate(node)])
    if isinstance(node, str):
        node = {node: {}}
    if not isinstance(node, dict) or len(node) != 1:
        raise ConfigError(f"{where}: expected a stage name, a one-key mapping or a list, "
                          f"got {node!r}")
    (name, params), = node.items()
    if name == "cutoff":
        if isinstance(params, bool) or not isinstance(params, int):
            raise ConfigError(f"{where}: cutoff takes an integer, got {params!r}")
        if params < 1:
            raise ConfigError(f"{where}: cutoff must be >= 1, got {params}")
        return Cutoff(params)
    if name == "fuse":
        return _build_fuse(params, ctx, where)
    if not isinstance(name, str) or name not in STAGES:
        raise ConfigError(f"{where}: unknown stage {name!r}; known: "
                          f"{', '.join(sorted([*STAGES, 'cutoff', 'fuse']))}")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise ConfigError(f"{where}.{name}: parameters must be a mapping, got {params!r}")
    bad_keys = [key for key in params if not isinstance(key, str)]
    if bad_keys:
        raise ConfigError(f"{where}.{name}: parameter names must be strings, got {bad_keys!r}")
    try:
        return STAGES[name](ctx, dict(params))
    except (TypeError, ValueError) as exc:  # ParameterError: a value out of range
        raise ConfigError(f"{where}.{name}: {exc}") from exc


def _build_fuse(params: Any, ctx: BuildContext, where: str) -> Stage:
    if not isinstance(params, dict) or "inputs" not in params:
        raise ConfigError(f"{where}.fuse: needs 'inputs' (a list of branches)")
    bad_keys = [key for key in params if not isinstance(key, str)]
    if bad_keys:
        raise ConfigError(f"{where}.fuse: parameter names must be strings, got {bad_keys!r}")
    params = dict(params)
    method = params.pop("method", "rrf")
    if not isinstance(method, str) or method not in (*FUSERS, "dynamic"):
        raise ConfigError(f"{where}.fuse: unknown method {method!r}; use "
                          f"{', '.join(FUSERS)}, dynamic")
    inputs = params.pop("inputs")
    if not isinstance(inputs, list) or len(inputs) < 2:
        raise ConfigError(f"{where}.fuse: 'inputs' must list at least two branches")
    branches = [build_pipeline(b, ctx, f"{where}.fuse.inputs[{i}]") for i, b in enumerate(inputs)]
    if method == "dynamic":
        from intentrank.pipeline.dynamic_weights import DynamicWeightedFusion

        try:
            return DynamicWeightedFusion(branches, ctx.llm(), **params)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.fuse: {exc}") from exc
    try:
        return FUSERS[method](branches, **params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}.fuse: {exc}") from exc


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML/JSON pipeline config; it must have a ``pipeline`` key."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: cannot read pipeline config: {exc}") from exc
    if not isinstance(data, dict) or "pipeline" not in data:
        raise ConfigError(f"{path}: a pipeline config needs a top-level 'pipeline' key")
    check_config_keys(data, str(path))
    return data


CONFIG_KEYS = ("pipeline", "index", "description")


def check_config_keys(data: dict[str, Any], where: str) -> None:
    """Refuse unknown top-level keys (a typo such as ``indx:`` would otherwise be ignored)
    and an ``index`` that is not a path."""
    unknown = [k for k in data if k not in CONFIG_KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown top-level key(s) {unknown!r}; a pipeline config "
                          f"has {', '.join(CONFIG_KEYS)}")
    if data.get("index") is not None and not isinstance(data["index"], str):
        raise ConfigError(f"{where}: 'index' must be a path, got {data['index']!r}")


def pipeline_from_config(
    path: str | Path, index: Index | str | Path | None = None, **resources: Any
) -> Stage:
    """Build the pipeline a config file describes; ``index`` overrides the file's ``index``."""
    data = load_config(path)
    where = index if index is not None else data.get("index")
    if where is not None and not isinstance(where, Index):
        where = Index.open(Path(path).parent / where if not Path(where).is_absolute()
                           and index is None else where)
    return build_pipeline(data["pipeline"], BuildContext(where, dict(resources)))


BUILTIN_DIR = Path(__file__).resolve().parent.parent / "configs"


def builtin_pipelines() -> list[str]:
    """Names of the pipeline configs shipped with intentrank."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def resolve_pipeline(name_or_path: str | Path) -> Path:
    """A config file path, or the shipped config of that name (``bm25``, ``rrf``, ...)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = BUILTIN_DIR / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    raise ConfigError(f"no pipeline config {str(name_or_path)!r}: give a YAML file or one of "
                      f"{', '.join(builtin_pipelines())}")


def _parents(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    from intentrank.pipeline.parents import ParentDocuments

    return ParentDocuments(ctx.require_index("parents"), **params)


register_stage("parents")(_parents)


def _cross_encoder(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``cross_encoder: {model, k, batch_size, max_length, backend}``; the model defaults to
    the reranker ``intentrank train-reranker`` saves for SciFact."""
    from intentrank.models.cross_encoder import CrossEncoderReranker

    index = ctx.require_index("cross_encoder")
    model = params.pop("model", None)
    key = f"cross_encoder:{model}:{params.get('backend', 'torch')}:" \
          f"{params.get('max_length')}"
    if key in ctx.resources:  # one loaded model per config, however many stages use it
        return CrossEncoderReranker(index, ctx.resources[key], **params)
    stage = CrossEncoderReranker(index, model, **params)
    ctx.resources[key] = stage.scorer
    return stage


register_stage("cross_encoder")(_cross_encoder)


def _followups(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``followups: {m: 2, max_tokens: 160}``: LLM-predicted follow-up questions."""
    from intentrank.query.followups import FollowUpPredictor

    return FollowUpPredictor(ctx.llm(), **params)


def _fuq(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``fuq: {alpha, beta, gamma, k}`` or ``fuq: {params: <saved name>, k}``."""
    from intentrank.rerank.fuq import FollowUpReranker, FUQWeights
    from intentrank.tuning import load_params

    saved = params.pop("params", None)
    if saved is not None and (not isinstance(saved, str) or not saved.strip()):
        raise ConfigError(f"fuq: 'params' must name a saved parameter set (see `intentrank "
                          f"tune-fuq`), got {saved!r}")
    weights = {**(load_params(saved) if saved else {}),
               **{w: params.pop(w) for w in ("alpha", "beta", "gamma") if w in params}}
    return FollowUpReranker(ctx.require_index("fuq"), FUQWeights(**weights), **params)


def _multi_query(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``multi_query: {retriever: <node>, n: 3, k: 60}``: LLM query variants, RRF-fused."""
    from intentrank.query.multi_query import MultiQueryRetriever

    retriever = build_pipeline(params.pop("retriever", "dense"), ctx, "multi_query.retriever")
    return MultiQueryRetriever(ctx.llm(), retriever, **params)


def _with_index_and_llm(cls_path: str, name: str) -> StageFactory:
    module, cls = cls_path.rsplit(".", 1)

    def factory(ctx: BuildContext, params: dict[str, Any]) -> Stage:
        import importlib

        return getattr(importlib.import_module(module), cls)(ctx.require_index(name), ctx.llm(),
                                                             **params)

    factory.__doc__ = f"``{name}``: {cls} over the index with the shared LLM."
    return factory


register_stage("followups")(_followups)
register_stage("fuq")(_fuq)
register_stage("multi_query")(_multi_query)
register_stage("listwise")(_with_index_and_llm("intentrank.rerank.listwise.ListwiseReranker",
                                               "listwise"))
register_stage("compression")(_with_index_and_llm(
    "intentrank.rerank.compression.ContextualCompression", "compression"))
register_stage("llm_judge")(_with_index_and_llm("intentrank.llm.judge.LLMJudge", "llm_judge"))
