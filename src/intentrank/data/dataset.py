"""A test collection in BEIR layout: corpus, queries and qrels per split."""

from __future__ import annotations

import random
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from intentrank.data.corpus import iter_corpus, load_queries
from intentrank.data.trec import Qrels, load_qrels
from intentrank.errors import DataError
from intentrank.types import Document, Query

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz", "corpus.jsonl.zip", "corpus.csv",
                "corpus.csv.gz")
QUERY_NAMES = ("queries.jsonl", "queries.jsonl.gz", "queries.csv", "queries.tsv")


def _first_existing(root: Path, names: tuple[str, ...], what: str) -> Path:
    for n in names:
        if (root / n).exists():
            return root / n
    raise DataError(f"no {what} file (looked for {', '.join(names)})", root)


@dataclass
class Dataset:
    """A BEIR-layout collection on disk; the corpus is streamed, queries and qrels are small."""

    root: Path
    corpus_path: Path
    queries: dict[str, Query]
    qrels: dict[str, Qrels] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def splits(self) -> list[str]:
        return sorted(self.qrels)

    def corpus(self) -> Iterator[Document]:
        return iter_corpus(self.corpus_path)

    def split(self, split: str) -> tuple[list[Query], Qrels]:
        """Queries that have judgments in ``split`` (in qrels order) and those judgments."""
        if split not in self.qrels:
            raise DataError(f"no qrels for split {split!r}; available: {self.splits}", self.root)
        qrels = self.qrels[split]
        return [self.queries[q] for q in qrels], qrels

    def sample(self, split: str, n: int, seed: int = 0) -> tuple[list[Query], Qrels]:
        """A fixed-seed sample of ``n`` judged queries of ``split`` (all of them if fewer),
        in id order, with their judgments: the same queries for every system and run."""
        queries, qrels = self.split(split)
        if 0 < n < len(queries):
            queries = sorted(random.Random(seed).sample(queries, n), key=lambda q: q.id)
        return queries, {q.id: qrels[q.id] for q in queries}

    def check_qrels(self, doc_ids: set[str]) -> None:
        """Raise if any split's qrels name queries or documents this collection lacks."""
        for split, qrels in self.qrels.items():
            bad_q = [q for q in qrels if q not in self.queries]
            bad_d = sorted({d for judged in qrels.values() for d in judged} - doc_ids)
            if bad_q or bad_d:
                parts = []
                if bad_q:
                    parts.append(f"{len(bad_q)} unknown query ids (e.g. {bad_q[:3]})")
                if bad_d:
                    parts.append(f"{len(bad_d)} unknown document ids (e.g. {bad_d[:3]})")
                raise DataError("qrels name " + " and ".join(parts),
                                self.root / "qrels" / f"{split}.tsv")


def load_dataset(root: str | Path) -> Dataset:
    """Open a BEIR-layout directory (corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv).

    Qrels naming query ids that are not in queries.jsonl raise a :class:`DataError`
    (document ids are checked against the corpus by :meth:`Dataset.check_qrels`).
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError("dataset directory not found", root)
    corpus_path = _first_existing(root, CORPUS_NAMES, "corpus")
    queries = load_queries(_first_existing(root, QUERY_NAMES, "queries"))
    qrels: dict[str, Qrels] = {}
    qdir = root / "qrels"
    if qdir.is_dir():
        for f in sorted(qdir.iterdir()):
            if f.name.endswith((".tsv", ".tsv.gz", ".txt", ".qrels")):
                split = f.name.split(".")[0]
                qrels[split] = load_qrels(f)
                unknown = [q for q in qrels[split] if q not in queries]
                if unknown:
                    raise DataError(f"qrels name {len(unknown)} query ids missing from the "
                                    f"queries file (e.g. {unknown[:3]})", f)
    return Dataset(root, corpus_path, queries, qrels)


def download_beir(name: str, dest: str | Path, url: str | None = None) -> Path:
    """Download and unpack a public BEIR dataset (needs internet; tests use ../shared/data).

    Returns the dataset directory ``dest/name``; an existing one is reused.
    """
    dest = Path(dest)
    target = dest / name
    if (target / "queries.jsonl").exists():
        return target
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        archive = Path(tmp) / f"{name}.zip"
        urllib.request.urlretrieve(url or BEIR_URL.format(name=name), archive)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        shutil.move(str(Path(tmp) / name), target)
    return target
