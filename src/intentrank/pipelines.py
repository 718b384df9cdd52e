"""Build runnable pipelines from config files: opens the index a config names and supplies
the shared LLM client (from an ``--llm`` spec) to the stages that need one.

Importing this module gives the stage registry the built-in stage packages
(:data:`BUILTIN_PACKAGES`, imported on the first lookup), so ``build_pipeline`` from here
(the config grammar of ``core/config.py``) knows every built-in stage; the core itself names
no package above it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from intentrank.core.config import build_pipeline, load_config, resolve_pipeline
from intentrank.core.registry import BuildContext, add_stage_packages, known_names
from intentrank.core.stage import Stage
from intentrank.index.postgres import is_postgres_uri
from intentrank.index.store import Index
from intentrank.retrieve.postgres import open_table

__all__ = ["BUILTIN_PACKAGES", "build_context", "build_pipeline", "ends_with_answer",
           "known_names", "pipeline_from_config", "with_answer"]

# The packages whose modules register the built-in stages and fusion methods.
BUILTIN_PACKAGES = ("intentrank.retrieve", "intentrank.fuse", "intentrank.query",
                    "intentrank.rerank", "intentrank.answer")
add_stage_packages(*BUILTIN_PACKAGES)


def build_context(index: Index | None = None, **resources: Any) -> BuildContext:
    """A build context whose LLM comes from ``resources['llm']``: an LLM client, a backend
    or a spec string such as ``embedded`` or ``openai:<model>@<url>`` (default
    ``embedded``: each step on its role's measured model, ``llm/roles.py``), with
    ``resources['llm_options']`` for the client. One client per distinct model."""
    clients: dict[str, Any] = {}

    def make_llm(role: str | None = None, spec: str | None = None) -> Any:
        from intentrank.llm.client import LLMClient, check_spec, load_llm
        from intentrank.llm.roles import role_spec

        llm = resources.get("llm") or "embedded"
        options = resources.get("llm_options", {})
        if spec is None and not isinstance(llm, str):
            return llm if isinstance(llm, LLMClient) else LLMClient(llm, **options)
        chosen = check_spec(spec) if spec is not None else role_spec(llm, role)
        if chosen not in clients:
            clients[chosen] = load_llm(chosen, **options)
        return clients[chosen]

    shared = {k: v for k, v in resources.items() if k not in ("llm", "llm_options")}
    if resources.get("llm") is not None and not isinstance(resources["llm"], str):
        shared["llm"] = make_llm()
    return BuildContext(index, shared, make_llm)


def pipeline_from_config(
    path: str | Path, index: Index | str | Path | None = None, **resources: Any
) -> Stage:
    """Build the pipeline a config file (or a shipped config's name: ``cascade``, ``rrf``,
    ...) describes; ``index`` overrides the file's ``index``."""
    path = resolve_pipeline(path)
    data = load_config(path)
    where = index if index is not None else data.get("index")
    if isinstance(where, str) and is_postgres_uri(where):  # a Postgres table (pgvector, ...)
        where = open_table(where)
    elif isinstance(where, str | Path):
        where = Index.open(Path(path).parent / where if not Path(where).is_absolute()
                           and index is None else where)
    return build_pipeline(data["pipeline"], build_context(where, **resources))


def ends_with_answer(node: Any) -> bool:
    """Whether a config's pipeline node (one step, or a list of nodes run in order) ends in
    an ``answer`` stage."""
    while isinstance(node, list) and node:
        node = node[-1]
    return node == "answer" or (isinstance(node, dict) and "answer" in node)


def with_answer(node: Any, top_k: int = 10, **options: Any) -> Any:
    """The pipeline node with an ``answer: {top_k, **options}`` step appended unless it ends
    in one; ``options`` (e.g. ``cite: llm``) also override a final answer step's own."""
    steps = list(node) if isinstance(node, list) else [node]
    if not ends_with_answer(node):
        return [*steps, {"answer": {"top_k": top_k, **options}}]
    if not options:
        return node
    last = steps[-1]
    if isinstance(last, list):  # a nested list of steps ends in it
        return [*steps[:-1], with_answer(last, top_k, **options)]
    params = dict(last["answer"] or {}) if isinstance(last, dict) else {}
    return [*steps[:-1], {"answer": {**params, **options}}]
