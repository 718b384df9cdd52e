"""Build runnable pipelines from config files: opens the index a config names and supplies
the shared LLM client (from an ``--llm`` spec) to the stages that need one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from intentrank.core.config import build_pipeline, load_config
from intentrank.core.registry import BuildContext
from intentrank.core.stage import Stage
from intentrank.index.store import Index


def build_context(index: Index | None = None, **resources: Any) -> BuildContext:
    """A build context whose LLM comes from ``resources['llm']``: an LLM client, a backend
    or a spec string such as ``embedded`` or ``openai:<model>@<url>`` (default
    ``embedded``), with ``resources['llm_options']`` for the client."""

    def make_llm() -> Any:
        from intentrank.llm.client import LLMClient, load_llm

        llm = resources.get("llm") or "embedded"
        options = resources.get("llm_options", {})
        if isinstance(llm, str):
            return load_llm(llm, **options)
        return llm if isinstance(llm, LLMClient) else LLMClient(llm, **options)

    shared = {k: v for k, v in resources.items() if k not in ("llm", "llm_options")}
    if resources.get("llm") is not None and not isinstance(resources["llm"], str):
        shared["llm"] = make_llm()
    return BuildContext(index, shared, make_llm)


def pipeline_from_config(
    path: str | Path, index: Index | str | Path | None = None, **resources: Any
) -> Stage:
    """Build the pipeline a config file describes; ``index`` overrides the file's ``index``."""
    data = load_config(path)
    where = index if index is not None else data.get("index")
    if where is not None and not isinstance(where, Index):
        where = Index.open(Path(path).parent / where if not Path(where).is_absolute()
                           and index is None else where)
    return build_pipeline(data["pipeline"], build_context(where, **resources))


def ends_with_answer(node: Any) -> bool:
    """Whether a config's pipeline node (a list of steps or one step) ends in an ``answer``
    stage."""
    last = node[-1] if isinstance(node, list) and node else node
    return (last == "answer") or (isinstance(last, dict) and "answer" in last)


def with_answer(node: Any, top_k: int = 10) -> Any:
    """The pipeline node with an ``answer: {top_k}`` step appended unless it ends in one."""
    if ends_with_answer(node):
        return node
    return [*(node if isinstance(node, list) else [node]), {"answer": {"top_k": top_k}}]
