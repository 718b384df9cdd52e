"""Settings of an on-disk index; recorded in its manifest and checked on reopening."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

LEGS = ("bm25", "dense", "tfidf", "graph")


@dataclass(frozen=True)
class BM25Settings:
    method: str = "lucene"
    k1: float = 1.5
    b: float = 0.75
    stemmer: str | None = "english"  # a PyStemmer language, or None
    stopwords: str | None = "en"  # a bm25s stopword list name, or None


@dataclass(frozen=True)
class DenseSettings:
    model: str = "minilm"  # "minilm" (bundled), a hub name or a local directory
    backend: str = "sentence-transformers"  # or "onnx"
    title_sep: str = " "  # passages are encoded as title + sep + text
    query_prefix: str = ""
    passage_prefix: str = ""
    batch_size: int = 64


@dataclass(frozen=True)
class TfidfSettings:
    ngram_max: int = 2
    max_features: int = 50_000
    stop_words: str | None = "english"
    sublinear_tf: bool = False


@dataclass(frozen=True)
class GraphSettings:
    window: int = 50  # each document is compared with the next `window` documents
    min_shared: int = 2  # entities two documents must share to be linked
    damping: float = 0.85


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

    def __post_init__(self) -> None:
        unknown = set(self.legs) - set(LEGS)
        if unknown:
            raise ValueError(f"unknown index legs {sorted(unknown)}; choose from {LEGS}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["legs"] = list(self.legs)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IndexSettings:
        sub = {"bm25": BM25Settings, "dense": DenseSettings, "tfidf": TfidfSettings,
               "graph": GraphSettings}
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                continue
            value = d[f.name]
            if f.name in sub:
                value = sub[f.name](**value)
            elif f.name == "legs":
                value = tuple(value)
            kwargs[f.name] = value
        return cls(**kwargs)

    def differences(self, other: IndexSettings) -> list[str]:
        """Human-readable list of settings that differ from ``other``."""
        a, b = _flatten(self.to_dict()), _flatten(other.to_dict())
        return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
