"""The cross-encoder reranking stage (the scorers, torch and int8 ONNX, live in
``models/cross_encoder.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from intentrank.core.protocols import IndexLike
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import ModelError
from intentrank.models.cross_encoder import Pair, PairScorer, load_cross_encoder
from intentrank.rerank.base import rerank_head
from intentrank.types import Ranking, Trace


class CrossEncoderReranker(Stage):
    """Rescore the top ``top_k`` candidates of each ranking with a cross-encoder.

    Candidates below ``top_k`` keep their order beneath the rescored ones (with scores below the
    lowest cross-encoder score); every candidate keeps its earlier stage scores.
    """

    def __init__(
        self,
        index: IndexLike,
        model: str | Path | PairScorer | None = None,
        top_k: int = 100,
        batch_size: int = 8,
        max_length: int | None = None,
        backend: str | None = None,
        name: str = "cross_encoder",
        precision: str | None = None,
    ) -> None:
        if top_k < 1 or batch_size < 1:
            raise ModelError(f"cross-encoder top_k and batch_size must be >= 1 (got "
                             f"top_k={top_k}, batch_size={batch_size})")
        self.index, self.top_k, self.batch_size, self.name = index, top_k, batch_size, name
        self.scorer = model if hasattr(model, "predict") else \
            load_cross_encoder(model, backend, max_length,  # type: ignore[arg-type]
                               precision=precision)

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        pairs: list[Pair] = [(r.query.text, self.index.doc_text(d.doc_id))
                             for r in rankings for d in r.docs[:self.top_k]]
        scores = iter(self.scorer.predict(pairs, self.batch_size))
        path_id = trace.path_of(self)
        trace.count(path_id, "pairs", len(pairs))
        return [rerank_head(r, {d.doc_id: float(next(scores)) for d in r.docs[:self.top_k]},
                            path_id) for r in rankings]

    def describe(self) -> str:
        scorer = self.scorer  # the model, its runtime (torch or int8 ONNX) and its clipping
        return self.described(getattr(scorer, "name", "-"), type(scorer).__name__,
                              max_length=getattr(scorer, "max_length", None), top_k=self.top_k,
                              **({"precision": scorer.precision}
                                 if getattr(scorer, "precision", "int8") != "int8" else {}))


def _scorer_key(model: Any, backend: str | None, max_length: int | None,
                precision: str | None = None) -> str:
    """Where a build context keeps a loaded cross-encoder (one per model and settings)."""
    return f"cross_encoder:{model}:{backend}:{max_length}" + (
        f":{precision}" if precision else "")


def shared_scorer(ctx: BuildContext, model: Any = None, backend: str | None = None,
                  max_length: int | None = None, precision: str | None = None) -> PairScorer:
    """The cross-encoder a build context loads once for every stage that uses it (a
    `cross_encoder` stage with the same model and settings shares it)."""
    key = _scorer_key(model, backend, max_length, precision)
    if key not in ctx.resources:
        ctx.resources[key] = load_cross_encoder(model, backend, max_length,
                                                precision=precision)
    return ctx.resources[key]


@register_stage("cross_encoder", renamed={"k": "top_k"})
def _cross_encoder(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    """``cross_encoder: {model, top_k, batch_size, max_length, backend, precision}``; the
    model defaults to the bundled one (int8 ONNX), the backend to onnx for a directory with an
    ONNX file, the precision to int8 (``fp32``: the same weights with fp32 activations)."""
    index = ctx.require_index("cross_encoder")
    model = params.pop("model", None)
    key = _scorer_key(model, params.get("backend"), params.get("max_length"),
                      params.get("precision"))
    if key in ctx.resources:  # one loaded model per config, however many stages use it
        return CrossEncoderReranker(index, ctx.resources[key], **params)
    stage = CrossEncoderReranker(index, model, **params)
    ctx.resources[key] = stage.scorer
    return stage
