"""Pipelines described as data (YAML or JSON), so the CLI and Python run the same thing.

Grammar of a node::

    - a list of nodes              -> run them in order (``>>``)
    - "bm25"                       -> a registered stage with default parameters
    - {bm25: {depth: 100}}         -> a registered stage with parameters
    - {cutoff: 10}                 -> keep the top 10 (``% 10``)
    - {fuse: {method: rrf, rrf_k: 60, weights: [1, 1], inputs: [node, node, ...]}}
                                   -> fuse branches: rrf | weighted | interleave | dynamic

Parameter names mean one thing in every stage (``core/params.py`` ``MEANINGS``): ``depth``
how many documents a retriever returns, ``top_k`` how many incoming candidates a reranker
rescores, ``rrf_k`` the RRF constant; an old name (``k``, listwise ``depth``) is refused with
the new one.

A config file holds ``pipeline: <node>`` and optionally ``index: <path>``. Example::

    index: indexes/scifact
    pipeline:
      - fuse: {method: rrf, inputs: [{bm25: {depth: 100}}, {dense: {depth: 100}}]}
      - cutoff: 10
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from intentrank.core.params import refuse_renamed
from intentrank.core.registry import BuildContext, lookup
from intentrank.core.stage import Chain, Cutoff, Stage
from intentrank.errors import ConfigError


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
        if not isinstance(params, dict) or "inputs" not in params:
            raise ConfigError(f"{where}.fuse: needs 'inputs' (a list of branches)")
        return _build(params.get("method", "rrf"), params, ctx, f"{where}.fuse", fusion=True)
    return _build(name, params, ctx, where)


def _build(name: Any, params: Any, ctx: BuildContext, where: str, fusion: bool = False
           ) -> Stage:
    """The registered stage (``fusion``: fusion method) ``name`` built with ``params`` (a
    fusion's ``inputs`` built as branches first); errors name the place."""
    try:
        entry = lookup(name if isinstance(name, str) else repr(name), fusion)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    where = where if fusion else f"{where}.{name}"
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: parameters must be a mapping, got {params!r}")
    bad_keys = [key for key in params if not isinstance(key, str)]
    if bad_keys:
        raise ConfigError(f"{where}: parameter names must be strings, got {bad_keys!r}")
    refuse_renamed(where, params, entry.renamed)
    params = dict(params)
    if fusion:
        params.pop("method", None)
        inputs = params["inputs"]
        if not isinstance(inputs, list) or len(inputs) < 2:
            raise ConfigError(f"{where}: 'inputs' must list at least two branches")
        params["inputs"] = [build_pipeline(b, ctx, f"{where}.inputs[{i}]")
                            for i, b in enumerate(inputs)]
    try:
        return entry.factory(ctx, params)
    except (TypeError, ValueError) as exc:  # ParameterError: a value out of range
        raise ConfigError(f"{where}: {exc}") from exc


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


BUILTIN_DIR = Path(__file__).resolve().parent.parent / "configs"


def builtin_pipelines() -> list[str]:
    """Names of the pipeline configs shipped with intentrank."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def resolve_shipped(name_or_path: str | Path, directory: Path, what: str) -> Path:
    """A YAML file path, or the file of that name shipped in ``directory``; ``what`` names
    the kind of file in the error ("pipeline config", "experiment file")."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = directory / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in directory.glob("*.yaml")))
    raise ConfigError(f"no {what} {str(name_or_path)!r}: give a YAML file or one of {names}")


def resolve_pipeline(name_or_path: str | Path) -> Path:
    """A config file path, or the shipped config of that name (``bm25``, ``rrf``, ...)."""
    return resolve_shipped(name_or_path, BUILTIN_DIR, "pipeline config")
