"""Fine-tune a cross-encoder reranker from the bundled MiniLM weights, on CPU, within a budget
(the steps both trainers share are in :mod:`intentrank.training.run`).
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from intentrank.data.dataset import Dataset, load_dataset
from intentrank.errors import ConfigError, DataError, ModelError
from intentrank.index.store import Index
from intentrank.training.run import (
    Example,
    Log,
    TrainingRun,
    TrainResult,
    TrainSettings,
    sample_epoch,
    training_queries,
)

INT8_ONNX = "model_int8.onnx"
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
