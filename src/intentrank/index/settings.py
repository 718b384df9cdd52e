"""Settings of an on-disk index; recorded in its manifest and checked on reopening."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from intentrank.index.errors import IndexSettingsError
from intentrank.models.embedder import PRECISIONS

LEGS = ("bm25", "dense", "tfidf", "graph")
BM25_METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")
BM25_TOKENS = ("bm25s", "lucene")  # words of 2+ characters (bm25s), or of 1+ (Lucene's)
BM25_BACKENDS = ("numpy", "numba")  # bm25s retrieval backends (numba: the scale extra)
# settings that only change how an index is searched, not its files: not a mismatch
SEARCH_TIME = ("bm25.backend",)
DENSE_BACKENDS = ("sentence-transformers", "st", "onnx")
ANN_METHODS = ("exact", "hnsw", "ivfpq")
# The stopword list names bm25s 0.2 knows (bm25s.tokenization._infer_stopwords); a name not
# listed here is still accepted if the installed bm25s accepts it.
BM25_STOPWORDS = ("english", "en", "english_plus", "en_plus", "german", "de", "dutch", "nl",
                  "french", "fr", "spanish", "es", "portuguese", "pt", "italian", "it",
                  "russian", "ru", "swedish", "sv", "norwegian", "no", "chinese", "zh",
                  "turkish", "tr", "korean", "ko", "danish", "da")


def _bad(message: str) -> IndexSettingsError:
    return IndexSettingsError(f"invalid index settings: {message}")


def check_bm25_backend(backend: str) -> str:
    """``backend`` if it names a bm25s retrieval backend, else a named settings error."""
    if backend not in BM25_BACKENDS:
        raise _bad(f"bm25.backend {backend!r} is not one of {list(BM25_BACKENDS)}")
    return backend


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _from_mapping(cls: type, name: str, value: Any, what: str = "a mapping") -> Any:
    """``cls(**value)``; ``value`` must be a mapping of fields of ``cls``."""
    if not isinstance(value, dict):
        raise _bad(f"{name} must be {what}, got {value!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise _bad(f"unknown {name} setting(s) {unknown}; known: {sorted(known)}")
    return cls(**value)


def _stopwords_known(name: str) -> bool:
    if name in BM25_STOPWORDS:
        return True
    try:
        from bm25s.tokenization import _infer_stopwords
    except ImportError:  # pragma: no cover - bm25s moved it: trust the name
        return True
    try:
        _infer_stopwords(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class BM25Settings:
    method: str = "lucene"
    k1: float = 1.5
    b: float = 0.75
    stemmer: str | None = "english"  # a PyStemmer language, or None
    stopwords: str | None = "en"  # a bm25s stopword list name, or None
    # "lucene" also keeps one-character words, as Lucene's StandardTokenizer does: with
    # stemmer porter, k1 0.9, b 0.4 this is Anserini's analyser and BM25 (docs/benchmarks.md
    # "peers": nDCG@10 within 0.2 points of Anserini on SciFact, Cranfield and Vaswani)
    tokens: str = "bm25s"
    # retrieval only (search time; Index.set_bm25_backend switches it on an open index)
    backend: str = "numpy"

    def __post_init__(self) -> None:
        if self.method not in BM25_METHODS:
            raise _bad(f"bm25.method {self.method!r} is not one of {list(BM25_METHODS)}")
        check_bm25_backend(self.backend)
        if self.tokens not in BM25_TOKENS:
            raise _bad(f"bm25.tokens {self.tokens!r} is not one of {list(BM25_TOKENS)}")
        if _number("bm25.k1", self.k1) < 0:
            raise _bad(f"bm25.k1 must be >= 0, got {self.k1!r}")
        if not 0 <= _number("bm25.b", self.b) <= 1:
            raise _bad(f"bm25.b must be between 0 and 1, got {self.b!r}")
        if self.stemmer is not None:
            import Stemmer

            if self.stemmer not in Stemmer.algorithms():
                raise _bad(f"unknown bm25.stemmer language {self.stemmer!r}; choose one of "
                           f"{Stemmer.algorithms()} or None")
        if self.stopwords is not None and (not isinstance(self.stopwords, str)
                                           or not _stopwords_known(self.stopwords)):
            raise _bad(f"unknown bm25.stopwords list {self.stopwords!r}; choose one of "
                       f"{list(BM25_STOPWORDS)} or None")


@dataclass(frozen=True)
class AnnSettings:
    """How the dense leg is searched: ``exact`` (the default: every vector, memory-mapped),
    ``hnsw`` (faiss HNSW graph over the full vectors) or ``ivfpq`` (faiss inverted lists of
    product-quantised codes, candidates rescored with the exact vectors)."""

    method: str = "exact"
    hnsw_m: int = 16  # graph neighbours per node (hnsw)
    ef_construction: int = 64  # candidate list while building the graph (hnsw)
    ef_search: int = 128  # candidate list while searching (hnsw; raised to k if smaller)
    nlist: int = 0  # inverted lists (ivfpq); 0 = 4 * sqrt(n), at most n / 39
    nprobe: int = 32  # lists visited per query (ivfpq)
    pq_m: int = 48  # sub-quantizers (ivfpq); must divide the vector dimension
    pq_bits: int = 8  # bits per sub-quantizer code (ivfpq)
    refine: int = 4  # ivfpq: rescore refine * k candidates with the exact vectors (1 = off)

    def __post_init__(self) -> None:
        if self.method not in ANN_METHODS:
            raise _bad(f"dense.ann.method {self.method!r} is not one of {list(ANN_METHODS)}")
        for name, minimum in (("hnsw_m", 2), ("ef_construction", 1), ("ef_search", 1),
                              ("nlist", 0), ("nprobe", 1), ("pq_m", 1), ("refine", 1)):
            _integer(f"dense.ann.{name}", getattr(self, name), minimum)
        if _integer("dense.ann.pq_bits", self.pq_bits, 1) > 16:
            raise _bad(f"dense.ann.pq_bits must be at most 16, got {self.pq_bits!r}")

    @classmethod
    def from_value(cls, value: Any) -> AnnSettings:
        """An AnnSettings, a dict of its fields, or a method name."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(method=value)
        return _from_mapping(cls, "dense.ann", value, "a method name or a mapping")


@dataclass(frozen=True)
class DenseSettings:
    model: str = "minilm"  # "minilm" (bundled), a hub name or a local directory
    backend: str = "sentence-transformers"  # or "onnx"
    # passages and queries: an int8 ONNX export (docs/benchmarks.md "speed") or "fp32"
    # (passages on torch, queries on an fp32 export)
    precision: str = "int8"
    title_sep: str = " "  # passages are encoded as title + sep + text
    query_prefix: str = ""
    passage_prefix: str = ""
    batch_size: int = 64
    ann: AnnSettings = field(default_factory=AnnSettings)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ann", AnnSettings.from_value(self.ann))
        if not isinstance(self.model, str) or not self.model.strip():
            raise _bad(f"dense.model must be a model name or directory, got {self.model!r}")
        if self.backend not in DENSE_BACKENDS:
            raise _bad(f"unknown dense.backend {self.backend!r}; use 'sentence-transformers' "
                       f"or 'onnx'")
        if self.precision not in PRECISIONS:
            raise _bad(f"unknown dense.precision {self.precision!r}; use one of "
                       f"{list(PRECISIONS)}")
        if self.backend == "onnx" and self.precision != "int8":
            raise _bad("dense.backend 'onnx' runs the packaged int8 model only; for fp32 "
                       "passages use backend 'sentence-transformers' with precision 'fp32'")
        _integer("dense.batch_size", self.batch_size, 1)

    def load_embedder(self, **extra: Any) -> Any:
        """The embedder these settings name, encoding passages at :attr:`precision`."""
        from intentrank.models.embedder import load_embedder

        if self.backend != "onnx":
            extra["precision"] = self.precision
        return load_embedder(self.model, self.backend, query_prefix=self.query_prefix,
                             passage_prefix=self.passage_prefix, **extra)


@dataclass(frozen=True)
class TfidfSettings:
    ngram_max: int = 2
    max_features: int = 50_000
    stop_words: str | None = "english"
    sublinear_tf: bool = False

    def __post_init__(self) -> None:
        _integer("tfidf.ngram_max", self.ngram_max, 1)
        if self.max_features is not None:
            _integer("tfidf.max_features", self.max_features, 1)


@dataclass(frozen=True)
class GraphSettings:
    window: int = 50  # each document is compared with the next `window` documents
    min_shared: int = 2  # entities two documents must share to be linked
    damping: float = 0.85

    def __post_init__(self) -> None:
        _integer("graph.window", self.window, 1)
        _integer("graph.min_shared", self.min_shared, 1)
        if not 0 < _number("graph.damping", self.damping) < 1:
            raise _bad(f"graph.damping must be between 0 and 1 (exclusive), got "
                       f"{self.damping!r}")


@dataclass(frozen=True)
class IndexSettings:
    """Everything that determines an index's contents (besides the corpus itself)."""

    legs: tuple[str, ...] = LEGS
    bm25: BM25Settings = field(default_factory=BM25Settings)
    dense: DenseSettings = field(default_factory=DenseSettings)
    tfidf: TfidfSettings = field(default_factory=TfidfSettings)
    graph: GraphSettings = field(default_factory=GraphSettings)
    chunk_size: int | None = None  # words per passage; None keeps documents whole
    chunk_overlap: int = 50
    shards: int = 1  # the bm25 and dense legs are built and searched as this many row ranges

    def __post_init__(self) -> None:
        if isinstance(self.legs, str) or not isinstance(self.legs, tuple | list):
            raise _bad(f"legs must be a tuple of leg names, got {self.legs!r}")
        object.__setattr__(self, "legs", tuple(self.legs))
        if not self.legs:
            raise _bad(f"legs is empty; choose at least one of {LEGS}")
        unknown = set(self.legs) - set(LEGS)
        if unknown:
            raise _bad(f"unknown index legs {sorted(unknown)}; choose from {LEGS}")
        duplicates = sorted({leg for leg in self.legs if list(self.legs).count(leg) > 1})
        if duplicates:
            raise _bad(f"duplicate index legs {duplicates} in {list(self.legs)}")
        if self.chunk_size is not None:
            _integer("chunk_size", self.chunk_size, 0)
        _integer("chunk_overlap", self.chunk_overlap, 0)
        _integer("shards", self.shards, 1)
        if self.chunk_size and self.chunk_overlap >= self.chunk_size:
            raise _bad(f"chunk_overlap must be smaller than chunk_size, got chunk_overlap="
                       f"{self.chunk_overlap} with chunk_size={self.chunk_size}")
        for name, cls in _SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise _bad(f"{name} must be a {cls.__name__}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "legs": list(self.legs)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IndexSettings:
        kwargs = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        for name, section in _SECTIONS.items():
            if name in kwargs:
                kwargs[name] = _from_mapping(section, name, kwargs[name])
        return cls(**kwargs)

    def differences(self, other: IndexSettings) -> list[str]:
        """Human-readable list of settings that differ from ``other`` (search-time-only
        settings, :data:`SEARCH_TIME`, do not count: the index's files are the same)."""
        a, b = _flatten(self.to_dict()), _flatten(other.to_dict())
        return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k) and k not in SEARCH_TIME]


_SECTIONS = {"bm25": BM25Settings, "dense": DenseSettings, "tfidf": TfidfSettings,
             "graph": GraphSettings}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
