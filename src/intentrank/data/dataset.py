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
from typing import Any

from intentrank.data.conversations import Conversation, load_conversations
from intentrank.data.corpus import _records, iter_corpus, load_queries
from intentrank.data.readers import check_file
from intentrank.data.trec import Qrels, load_qrels
from intentrank.errors import DataError
from intentrank.types import Document, Query

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz", "corpus.jsonl.zip", "corpus.csv",
                "corpus.csv.gz")
QUERY_NAMES = ("queries.jsonl", "queries.jsonl.gz", "queries.csv", "queries.tsv")
CONVERSATION_NAMES = ("conversations.jsonl", "conversations.jsonl.gz")


def _first_existing(root: Path, names: tuple[str, ...], what: str) -> Path:
    for n in names:
        if (root / n).exists():
            return root / n
    raise DataError(f"no {what} file (looked for {', '.join(names)})", root)


def corpus_file(source: str | Path) -> Path:
    """The corpus file of ``source``: the one a BEIR directory holds (a DataError if none),
    or ``source`` itself when it is not a directory."""
    source = Path(source)
    return _first_existing(source, CORPUS_NAMES, "corpus") if source.is_dir() else source


QRELS_SUFFIXES = (".tsv", ".tsv.gz", ".txt", ".txt.gz", ".qrels", ".qrels.gz")


def _few(ids: list[str], n: int = 5) -> list[str]:
    return sorted(ids)[:n]


@dataclass
class Dataset:
    """A BEIR-layout collection on disk; the corpus is streamed, queries and qrels are small.

    ``warnings`` collects what was loaded with a caveat (judgments dropped or kept for ids the
    collection lacks, grades rounded); callers print them. ``conversations`` is set when the
    queries are the turns of ``conversations.jsonl`` (each query then has its history).
    """

    root: Path
    corpus_path: Path
    queries: dict[str, Query]
    qrels: dict[str, Qrels] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    qrels_paths: dict[str, Path] = field(default_factory=dict)
    conversations: list[Conversation] | None = None

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def splits(self) -> list[str]:
        return sorted(self.qrels)

    def corpus(self) -> Iterator[Document]:
        return iter_corpus(self.corpus_path)

    def gold_rewrites(self) -> dict[str, str]:
        """``{turn id: gold standalone rewrite}`` for every turn that has one (empty when
        the dataset has no conversations)."""
        return {t.id: t.rewrite for c in self.conversations or () for t in c.turns
                if t.rewrite is not None}

    def query_metadata(self) -> dict[str, dict[str, Any]]:
        """``{query id: metadata}`` from a JSONL queries file's ``metadata`` objects (what
        ``intentrank generate`` writes: ``answer``, ``kind``, ``documents``, ...); empty for
        other query files. A line whose ``metadata`` is not an object is a DataError."""
        path = next((self.root / n for n in QUERY_NAMES if (self.root / n).is_file()), None)
        if path is None or ".jsonl" not in path.name:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for line, rec in _records(path, "utf-8"):
            meta = rec.get("metadata")
            if meta is None:
                continue
            if not isinstance(meta, dict):
                raise DataError(f"metadata must be an object, got {type(meta).__name__}",
                                path, line, "metadata")
            out[str(rec.get("_id", rec.get("id")))] = meta
        return out

    def reference_answers(self) -> dict[str, str]:
        """``{query id: reference answer}`` for the queries whose metadata has a non-empty
        ``answer`` string (generated question sets)."""
        return {q: m["answer"].strip() for q, m in self.query_metadata().items()
                if isinstance(m.get("answer"), str) and m["answer"].strip()}

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _qrels_path(self, split: str) -> Path:
        return self.qrels_paths.get(split, self.root / "qrels" / f"{split}.tsv")

    def split(self, split: str) -> tuple[list[Query], Qrels]:
        """Queries that have judgments in ``split`` (in qrels order) and those judgments.

        Judged query ids missing from the queries (only possible for a Dataset built by hand;
        :func:`load_dataset` drops them) are skipped with a warning; if none is left, a
        :class:`DataError`.
        """
        if split not in self.qrels:
            raise DataError(f"no qrels for split {split!r}; available: {self.splits}", self.root)
        qrels = self.qrels[split]
        missing = [q for q in qrels if q not in self.queries]
        if missing:
            if len(missing) == len(qrels):
                raise DataError(f"none of the {len(qrels)} judged query ids of split {split!r} "
                                f"is in the queries (e.g. {_few(missing)}); nothing to "
                                f"evaluate", self._qrels_path(split))
            self._warn(f"{self._qrels_path(split)}: {len(missing)} judged query ids are not in "
                       f"the queries (e.g. {_few(missing)}); they are not evaluated")
            qrels = {q: j for q, j in qrels.items() if q in self.queries}
        return [self.queries[q] for q in qrels], qrels

    def sample(self, split: str, n: int, seed: int = 0) -> tuple[list[Query], Qrels]:
        """A fixed-seed sample of ``n`` judged queries of ``split`` (all of them if fewer),
        in id order, with their judgments: the same queries for every system and run."""
        queries, qrels = self.split(split)
        if 0 < n < len(queries):
            queries = sorted(random.Random(seed).sample(queries, n), key=lambda q: q.id)
        return queries, {q.id: qrels[q.id] for q in queries}

    def check_qrels(self, doc_ids: set[str], strict: bool = False) -> list[str]:
        """Warnings for judgments naming documents that are not in ``doc_ids`` (the index).

        Those judgments stay in the qrels: a relevant document the system cannot retrieve
        still counts against recall and nDCG, as in trec_eval. Each message is also appended
        to :attr:`warnings`. With ``strict=True`` a :class:`DataError` is raised instead.
        """
        messages = []
        for split in self.splits:
            qrels = self.qrels[split]
            judged_ids = {d for judged in qrels.values() for d in judged}
            unknown = judged_ids - doc_ids
            if not unknown:
                continue
            relevant = sum(1 for judged in qrels.values() for d, g in judged.items()
                           if d in unknown and g > 0)
            text = (f"{len(unknown)} of {len(judged_ids)} judged document ids are not in the "
                    f"index (e.g. {_few(list(unknown))})")
            if strict:
                raise DataError(f"{text}; strict mode refuses to evaluate against documents "
                                f"the index lacks", self._qrels_path(split))
            text += (f"; their {relevant} relevant judgment(s) are kept, so they count as "
                     f"relevant documents the system cannot retrieve (as in trec_eval)")
            message = f"{self._qrels_path(split)}: {text}"
            messages.append(message)
            self._warn(message)
        return messages


def refuse_test_split(split: str, purpose: str) -> str:
    """``split``, unless it is the test split: training and tuning must never see test
    judgments (``purpose``: e.g. "tune FUQ weights")."""
    if str(split).strip().lower() == "test":
        raise DataError(f"refusing to {purpose} on the test split: use 'train' (or 'dev' / "
                        f"'validation', or cross-validation over queries) and keep test for "
                        f"evaluation")
    return split


def load_dataset(root: str | Path, *, strict: bool = False, round_grades: bool = False
                 ) -> Dataset:
    """Open a BEIR-layout directory (corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv).

    Instead of a queries file the directory may hold ``conversations.jsonl`` (see
    :mod:`intentrank.data.conversations`; both is a DataError): the queries are then its turns,
    each with the earlier turns as history, and without a ``qrels/`` directory the turns'
    ``relevant`` judgments form the split ``test``.

    Judgments naming query ids that are not in the queries file are dropped from their split,
    with a message in :attr:`Dataset.warnings` (``strict=True``: a :class:`DataError`); a
    split none of whose judged queries is known is a DataError either way (nothing to
    evaluate). Non-integer grades are an error unless ``round_grades=True`` (see
    :func:`~intentrank.data.trec.load_qrels`). Document ids are checked against an index by
    :meth:`Dataset.check_qrels`.
    """
    root = Path(root)
    if not root.exists():
        raise DataError("dataset directory not found", root)
    if not root.is_dir():
        raise DataError("is a file, expected a dataset directory (corpus.jsonl, "
                        "queries.jsonl, qrels/)", root)
    corpus_path = _first_existing(root, CORPUS_NAMES, "corpus")
    check_file(corpus_path)
    conv_path = next((root / n for n in CONVERSATION_NAMES if (root / n).exists()), None)
    if conv_path is None:
        queries_path = _first_existing(root, QUERY_NAMES + CONVERSATION_NAMES, "queries")
        queries = load_queries(queries_path)
        ds = Dataset(root, corpus_path, queries)
    else:
        both = [n for n in QUERY_NAMES if (root / n).exists()]
        if both:
            raise DataError(f"both {both[0]} and {conv_path.name}: the queries come from one "
                            f"of them; keep one", root)
        queries_path = conv_path
        conversations = load_conversations(conv_path)
        queries = {q.id: q for c in conversations for q in c.queries()}
        ds = Dataset(root, corpus_path, queries, conversations=conversations)
    qdir = root / "qrels"
    if qdir.exists() and not qdir.is_dir():
        raise DataError("is a file, expected a directory of qrels files", qdir)
    if not qdir.is_dir():
        judged = {t.id: dict(t.relevant) for c in ds.conversations or () for t in c.turns
                  if t.relevant is not None}
        if judged:
            ds.qrels["test"], ds.qrels_paths["test"] = judged, queries_path
        return ds
    ignored = []
    for f in sorted(qdir.iterdir()):
        if f.name.startswith("."):
            continue  # hidden files (.DS_Store, editor swap files)
        if not f.name.endswith(QRELS_SUFFIXES):
            ignored.append(f.name)
            continue
        split = f.name.split(".")[0]
        if split in ds.qrels:
            raise DataError(f"two qrels files for split {split!r} "
                            f"({ds.qrels_paths[split].name} and {f.name}); keep one", f)
        notes: list[str] = []
        qrels = load_qrels(f, round_grades=round_grades, warnings=notes)
        for note in notes:
            ds._warn(note)
        unknown = [q for q in qrels if q not in queries]
        if unknown and len(unknown) == len(qrels):
            raise DataError(f"none of the {len(qrels)} judged query ids is in "
                            f"{queries_path.name} (e.g. {_few(unknown)}); nothing to "
                            f"evaluate", f)
        if unknown:
            text = (f"{len(unknown)} judged query ids are not in {queries_path.name} "
                    f"(e.g. {_few(unknown)})")
            if strict:
                raise DataError(f"{text}; strict mode refuses to drop their judgments", f)
            ds._warn(f"{f}: {text}; they are not evaluated")
            qrels = {q: j for q, j in qrels.items() if q in queries}
        ds.qrels[split] = qrels
        ds.qrels_paths[split] = f
    if ignored:
        ds._warn(f"{qdir}: ignored file(s) {ignored[:5]} (qrels files end in "
                 f"{', '.join(QRELS_SUFFIXES)})")
    return ds


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
