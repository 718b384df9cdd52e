"""What the framework adapters share, free of any framework: a search pipeline with the
index its documents come from (:class:`PipelineSearch`), and a reranking pipeline over a
caller's own passages (:class:`PassageReranker`, the service's ``/rerank`` in-process: the
passages become a :class:`~intentrank.service.engine.CandidateIndex`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from intentrank.core.config import build_pipeline, load_config, resolve_pipeline
from intentrank.core.registry import BuildContext, stage_factory
from intentrank.core.stage import Stage
from intentrank.errors import ConfigError
from intentrank.filters import Filter
from intentrank.index.store import Index
from intentrank.pipelines import build_context
from intentrank.service.engine import CandidateIndex, given_order
from intentrank.types import Document, Query, ScoredDoc, Trace

PipelineSpec = Stage | str | Path | dict | list
"""A search pipeline: a built :class:`Stage`, a shipped config name (``bm25``, ``rrf``,
``cascade``, ...), a YAML config file, or a config node (``[bm25, {cross_encoder: {top_k:
30}}]``)."""

RerankerSpec = Stage | str | Path | dict | list | Callable[[Any], Stage]
"""A reranking pipeline: a config node (``cross_encoder``, ``{cross_encoder: {top_k: 30}}``,
a list of steps), a YAML file or shipped config name whose ``pipeline`` reranks, or a
function from a candidate index to a Stage; each is built over the passages of every call.
A built :class:`Stage` is run as it is: it reads its own index, so the passages must carry
that index's doc ids."""


def _open_index(where: Any) -> Any:
    return Index.open(where) if isinstance(where, (str, Path)) else where


def open_pipeline(pipeline: PipelineSpec, index: Any = None, **resources: Any
                  ) -> tuple[Stage, Any]:
    """The stage and the index its documents come from. ``index`` is an open index or its
    directory; a config file's own ``index:`` is used when none is given. ``resources``
    go to the build context (``llm``, ``llm_options``, as for
    :func:`~intentrank.pipelines.pipeline_from_config`)."""
    if isinstance(pipeline, Stage):
        if index is None:
            raise ConfigError("a built Stage needs index=, the index its documents come from")
        return pipeline, _open_index(index)
    if isinstance(pipeline, (str, Path)):
        path = resolve_pipeline(pipeline)
        data = load_config(path)
        if index is None:
            if data.get("index") is None:
                raise ConfigError(f"{path}: no index: pass index= or set 'index:' in the config")
            index = path.parent / data["index"]  # relative to the config (an absolute stays)
        pipeline = data["pipeline"]
    elif not isinstance(pipeline, (dict, list)):
        raise ConfigError(f"pipeline: expected a Stage, a config name or file, or a config "
                          f"node, got {type(pipeline).__name__}")
    elif index is None:
        raise ConfigError("a pipeline config node needs index=")
    idx = _open_index(index)
    return build_pipeline(pipeline, build_context(idx, **resources)), idx


@dataclass(frozen=True)
class Hit:
    """One result of a search: its rank (1-based), the pipeline's score, every stage's
    score by path id, and the document."""

    rank: int
    doc_id: str
    score: float
    stage_scores: dict[str, float]
    document: Document

    @property
    def metadata(self) -> dict[str, Any]:
        """The document's metadata plus doc_id, title, score, rank and stage_scores."""
        return {**self.document.metadata, "doc_id": self.doc_id, "title": self.document.title,
                "score": self.score, "rank": self.rank, "stage_scores": self.stage_scores}


class PipelineSearch:
    """A search pipeline over an index, answering one query string at a time."""

    def __init__(self, pipeline: PipelineSpec, index: Any = None, **resources: Any) -> None:
        self.stage, self.index = open_pipeline(pipeline, index, **resources)

    def search(self, text: str, k: int | None = None,
               filter: Filter | None = None) -> list[Hit]:  # noqa: A002 (Query.filter)
        """The top ``k`` (all when None) of the pipeline's ranking for ``text``, among the
        documents ``filter`` lets through when given."""
        ranking = self.stage.run([Query("q", text, filter=filter)]).rankings[0]
        docs = ranking.docs if k is None else ranking.docs[:k]
        return [Hit(rank, d.doc_id, float(d.score), dict(d.stage_scores),
                    self.index.doc(d.doc_id))
                for rank, d in enumerate(docs, 1)]


class PassageReranker:
    """A reranking pipeline over the passages a caller hands it.

    The passages are ranked in the order given (score ``n - i``, also recorded as the
    stage score ``input``, as the service's ``/rerank`` does), then the pipeline reorders
    them. A config node, file or function is built over a
    :class:`~intentrank.service.engine.CandidateIndex` of the passages on every call, with
    loaded models kept in one resources map (the cross-encoder is loaded once). ``index``
    (optional) encodes queries for rerankers that need embeddings."""

    def __init__(self, pipeline: RerankerSpec = "cross_encoder", index: Any = None,
                 **resources: Any) -> None:
        self.base = _open_index(index)
        self.stage: Stage | None = None
        self.node: Any = None
        self.factory: Callable[[Any], Stage] | None = None
        if isinstance(pipeline, Stage):
            self.stage = pipeline
        elif isinstance(pipeline, (dict, list)):
            self.node = pipeline
        elif isinstance(pipeline, str) and stage_factory(pipeline) is not None:
            self.node = pipeline  # a stage name: one step with its defaults
        elif isinstance(pipeline, (str, Path)):
            self.node = load_config(resolve_pipeline(pipeline))["pipeline"]
        elif callable(pipeline):
            self.factory = pipeline
        else:
            raise ConfigError(f"reranker: expected a config node, a config file, a function "
                              f"of an index or a Stage, got {type(pipeline).__name__}")
        self._template = build_context(None, **resources)
        if self.node is not None:  # build once now: checks the config and loads its models
            self._build(CandidateIndex([Document("probe", "probe")], self.base))

    def _build(self, candidates: CandidateIndex) -> Stage:
        if self.factory is not None:
            return self.factory(candidates)
        ctx = BuildContext(candidates, self._template.resources, self._template.make_llm)
        return build_pipeline(self.node, ctx)

    def rerank(self, query: str, docs: Sequence[Document], top_n: int | None = None
               ) -> list[tuple[int, ScoredDoc]]:
        """(position in ``docs``, the pipeline's scored document) for each passage the
        pipeline returns, best first, at most ``top_n`` (None: all). With a built Stage the
        passages' ids are its index's doc ids; otherwise ids are ignored."""
        if not docs:
            return []
        if self.stage is not None:
            ids = [d.id for d in docs]
            if not all(ids) or len(set(ids)) != len(ids):
                raise ConfigError("a built Stage reranks by its own index's doc ids: give each "
                                  "passage a distinct doc_id (as the intentrank retrievers "
                                  "do), or give the reranker as a config node instead")
            stage, run_docs = self.stage, list(docs)
        else:
            run_docs = [replace(d, id=str(i)) for i, d in enumerate(docs)]
            stage = self._build(CandidateIndex(run_docs, self.base))
        position = {d.id: i for i, d in enumerate(run_docs)}
        out = stage([given_order(query, run_docs)], Trace())[0]
        ranked = [(position[d.doc_id], d) for d in out.docs]
        return ranked if top_n is None else ranked[:top_n]


__all__ = ["Hit", "PassageReranker", "PipelineSearch", "PipelineSpec", "RerankerSpec",
           "open_pipeline"]
