"""RRF over the rankings of several reformulations of a conversational turn: one stage,
any inner methods (the raw turn, the no-LLM expansions, the LLM rewrites, HyDE).

``fused_reformulations: {methods: [raw, history_terms, rewrite_full], retriever: {bm25:
{depth: 100}}, rrf_k: 60, text_from: rewrite_full}`` runs the retriever once per method on
that method's text (``raw``: the turn as it is) and fuses the lists by reciprocal rank
fusion (``fuse/rrf.py``). A reformulation that goes wrong then costs one list of several,
and one that finds the topic lifts documents the others also found. Later stages (a
cross-encoder) see the text of ``text_from`` (default: the last method).
"""

from __future__ import annotations

from typing import Any

from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import ConfigError
from intentrank.fuse.rrf import RRFFusion

RAW = "raw"
DEFAULT_METHODS = (RAW, "history_terms")
DEFAULT_RETRIEVER = {"bm25": {"depth": 100}}


def method_name(node: Any) -> str:
    """The stage name of a method node (``raw``, ``rewrite_full``, ``{hyde_doc: {...}}``)."""
    if isinstance(node, str):
        return node
    if isinstance(node, dict) and len(node) == 1:
        return str(next(iter(node)))
    raise ConfigError(f"fused_reformulations: a method is a stage name or a one-key mapping, "
                      f"got {node!r}")


@register_stage("fused_reformulations", renamed={"k": "rrf_k"})
def _fused_reformulations(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``fused_reformulations: {methods: [raw, history_terms], retriever: {bm25: {depth:
    100}}, rrf_k: 60, text_from: <a method>}``: RRF over the retriever's list for each
    reformulation of the turn."""
    from intentrank.core.config import build_pipeline

    params = dict(params)
    methods = params.pop("methods", list(DEFAULT_METHODS))
    retriever = params.pop("retriever", DEFAULT_RETRIEVER)
    rrf_k = params.pop("rrf_k", 60)
    if not isinstance(methods, list) or not methods:
        raise ConfigError(f"fused_reformulations: methods must be a non-empty list, got "
                          f"{methods!r}")
    names = [method_name(m) for m in methods]
    if len(set(names)) != len(names):
        raise ConfigError(f"fused_reformulations: a method is listed twice in {names}")
    text_from = params.pop("text_from", names[-1])
    if text_from not in names:
        raise ConfigError(f"fused_reformulations: text_from {text_from!r} is not one of the "
                          f"methods {names}")
    if params:
        raise ConfigError(f"fused_reformulations: unknown parameter(s) {sorted(params)}; "
                          f"known: methods, retriever, rrf_k, text_from")
    branches = {}
    for i, (name, node) in enumerate(zip(names, methods, strict=True)):
        where = f"fused_reformulations.methods[{i}]"
        branches[name] = build_pipeline(retriever if name == RAW else [node, retriever],
                                        ctx, where)
    # the fused query is the first branch's (RRF itself does not depend on the order)
    ordered = [branches[text_from], *(b for n, b in branches.items() if n != text_from)]
    return RRFFusion(ordered, rrf_k=rrf_k, name="fused_reformulations")
