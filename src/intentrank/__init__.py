"""intentrank: intent-aware retrieval and reranking for RAG.

The everyday names, importable from the package itself::

    import intentrank as ir

    ds = ir.load_dataset("data/scifact")
    index = ir.open_or_build(ds.corpus, "indexes/scifact")
    pipeline = ir.pipeline_from_config("my-pipeline.yaml", index=index)
    print(pipeline.search("ALDH1 expression in breast cancer", k=5))

Each name is imported on first use (module ``__getattr__``), so ``import intentrank`` stays
light: no torch, no sentence-transformers, no index code until a name needs them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it (a re-export: the package itself imports nothing eagerly)
_LAZY: dict[str, str] = {
    "Query": "intentrank.types",
    "Ranking": "intentrank.types",
    "load_dataset": "intentrank.data.dataset",
    "Index": "intentrank.index.store",
    "build_index": "intentrank.index.build",
    "open_or_build": "intentrank.index.build",
    "BM25Retriever": "intentrank.retrieve.retrievers",
    "DenseRetriever": "intentrank.retrieve.retrievers",
    "CrossEncoderReranker": "intentrank.rerank.cross_encoder",
    "pipeline_from_config": "intentrank.pipelines",
    "evaluate": "intentrank.measures.metrics",
}

__all__ = [  # _LAZY's names (a test checks they agree)
    "BM25Retriever", "CrossEncoderReranker", "DenseRetriever", "Index", "Query", "Ranking",
    "__version__", "build_index", "evaluate", "load_dataset", "open_or_build",
    "pipeline_from_config",
]

if TYPE_CHECKING:  # what type checkers and IDEs see (py.typed)
    from intentrank.data.dataset import load_dataset
    from intentrank.index.build import build_index, open_or_build
    from intentrank.index.store import Index
    from intentrank.measures.metrics import evaluate
    from intentrank.pipelines import pipeline_from_config
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.retrieve.retrievers import BM25Retriever, DenseRetriever
    from intentrank.types import Query, Ranking


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'intentrank' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
