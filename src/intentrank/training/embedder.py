"""Fine-tune the dense encoder (the bundled all-MiniLM-L6-v2 bi-encoder) per corpus, on CPU.

Training pairs are (query, judged-relevant document) from a labelled split (e.g. SciFact
``train``) and/or a generated question set (``intentrank generate``: split ``generated``, one
or two gold documents per question; the GPL / InPars line of work, no labels of the
collection). Each pair gets ``negatives_per_query`` hard negatives mined from the BM25 and dense
top-``depth`` of its query (judged-relevant documents excluded), resampled every epoch.
sentence-transformers' ``SentenceTransformerTrainer`` trains with
``MultipleNegativesRankingLoss`` (the other pairs of a batch are negatives too; no batch holds
the same text twice). The test split is refused and queries that also appear in the test
qrels are dropped. The output is a sentence-transformers model directory (usable as the
index setting ``dense.model``) with ``training.json`` (settings, data counts, time).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from intentrank.data.dataset import Dataset, load_dataset, refuse_test_split
from intentrank.errors import ConfigError, DataError
from intentrank.extras import require
from intentrank.index.store import Index
from intentrank.training.reranker import (
    MINING_DEPTH,
    TRAINING_JSON,
    Log,
    TrainResult,
    _hf_quiet,
    _open_index,
    _versions,
    base_model_record,
    draw_negatives,
    load_base,
    mine_negatives,
    negative_ranks,
    run_record,
    run_trainer,
    swap_into_place,
    time_budget,
    training_queries,
)
from intentrank.types import Query

Source = tuple[Dataset | str | Path, str]  # a dataset (or its directory) and a split
Triple = tuple[str, str, list[str]]  # query text, positive doc id, negative doc ids


def _sources(dataset: Dataset | str | Path, split: str, extra: Sequence[Source]
             ) -> list[tuple[Dataset, str]]:
    out = []
    for ds, sp in [(dataset, split), *extra]:
        out.append((ds if isinstance(ds, Dataset) else load_dataset(ds), sp))
    return out


def _collect(sources: list[tuple[Dataset, str]], max_queries: int | None, seed: int, idx: Index
             ) -> tuple[list[Query], dict[str, dict[str, int]], list[dict[str, Any]]]:
    """Every source's training queries (ids prefixed by source number when there are several)
    with their gold documents that the index holds; per-source counts."""
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    counts = []
    for n, (ds, split) in enumerate(sources):
        qs, qr, dropped = training_queries(ds, split, max_queries, seed)
        kept = missing = 0
        for q in qs:
            gold = {d: g for d, g in qr[q.id].items() if g > 0}
            known = {d: g for d, g in gold.items() if d in idx.row_of}
            missing += len(gold) - len(known)
            if not known:
                continue
            qid = q.id if len(sources) == 1 else f"{n}:{q.id}"
            queries.append(Query(qid, q.text))
            qrels[qid] = known
            kept += 1
        counts.append({"dataset": ds.name, "split": split,  # no path: shipped as is
                       "queries": kept, "queries_dropped_in_test": dropped,
                       "gold_docs_not_in_index": missing})
    if not queries:
        named = ", ".join(f"{ds.root} {sp!r}" for ds, sp in sources)
        raise DataError(f"no training pairs: no query of {named} has a judged-relevant "
                        f"document that the index holds")
    return queries, qrels, counts


def sample_triples(queries: list[Query], qrels: dict[str, dict[str, int]],
                   pools: dict[str, dict[str, list[str]]], n_neg: int, rng: random.Random
                   ) -> list[Triple]:
    """One (query, positive, negatives) row per gold document; negatives drawn alternately
    from each leg's pool (a query with too few negatives repeats some)."""
    rows: list[Triple] = []
    for q in queries:
        for pos in sorted(qrels[q.id]):
            chosen = draw_negatives(pools[q.id], n_neg, rng)
            if n_neg and not chosen:
                continue  # no negative at all (a tiny corpus): skip rather than pad with text
            while len(chosen) < n_neg:
                chosen.append(chosen[len(chosen) % max(len(chosen), 1)])
            rows.append((q.text, pos, chosen))
    rng.shuffle(rows)
    return rows


def train_embedder(
    dataset: Dataset | str | Path,
    out_dir: str | Path,
    index: Index | str | Path | None = None,
    *,
    split: str = "train",
    extra: Sequence[Source] = (),
    negatives_per_query: int = 1,
    depth: int = MINING_DEPTH,
    skip_top: int = 0,
    epochs: int = 1,
    batch_size: int = 32,
    max_seq_length: int = 128,
    lr: float = 2e-5,
    warmup: float = 0.1,
    scale: float = 20.0,
    time_budget_s: float | None = 900.0,
    seed: int = 13,
    max_queries: int | None = None,
    base_model: str | None = None,
    progress: bool = True,
    log: Log | None = None,
) -> TrainResult:
    """Fine-tune a MiniLM bi-encoder on ``split`` of ``dataset`` (plus ``extra`` (dataset,
    split) pairs over the same corpus, e.g. a generated set) and save it to ``out_dir``.

    ``index``: the collection's index (default ``indexes/<dataset name>``, built if missing);
    hard negatives come from its BM25 and dense legs and its documents give the passage text
    (title + text, as the dense leg encodes them). ``batch_size`` counts queries per step; each
    brings its positive and ``negatives_per_query`` hard negatives. Texts are cut to
    ``max_seq_length`` tokens while training (the cost on CPU); the saved model encodes with
    the base model's length (256 for MiniLM), as the zero-shot index did. The learning rate warms up
    over ``warmup`` of the run, then decays to 0 at the last step or at ``time_budget_s``
    (counted from opening the index, mining included), whichever comes first; what was trained
    is saved either way.
    """
    if negatives_per_query < 0 or depth < 1 or epochs < 1 or batch_size < 2:
        raise ConfigError(f"bad embedder training settings: negatives_per_query="
                          f"{negatives_per_query} (>= 0), depth={depth} (>= 1), epochs={epochs} "
                          f"(>= 1), batch_size={batch_size} (>= 2: in-batch negatives)")
    where = negative_ranks(depth, skip_top)
    say = log or (lambda msg: None)
    for _, sp in [(dataset, split), *extra]:  # before loading anything
        refuse_test_split(sp, "train an embedder")
    sources = _sources(dataset, split, extra)
    start = time.perf_counter()
    idx = _open_index(index, sources[0][0], say)
    queries, qrels, counts = _collect(sources, max_queries, seed, idx)
    say(f"mining hard negatives for {len(queries)} queries "
        f"(BM25 + dense {where})")
    pools = mine_negatives(idx, queries, qrels, depth, skip_top)
    mining_s = time.perf_counter() - start
    rng = random.Random(seed)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    epoch_rows = [sample_triples(queries, qrels, pools, negatives_per_query, rng)
                  for _ in range(epochs)]
    rows = _columns([r for e in epoch_rows for r in e], negatives_per_query, idx)
    if not rows["anchor"]:
        raise DataError("no training rows: no query has a negative in the index (the corpus is "
                        "too small for hard negatives; use negatives_per_query=0)")
    for module in ("accelerate", "datasets", "sentence_transformers"):
        require(module, "train", "fine-tuning the dense encoder")
    import torch

    from intentrank.models.inputs import minilm_path

    budget = time_budget(start, time_budget_s, warmup)
    base = base_model or minilm_path()
    options = dict(per_device_train_batch_size=batch_size, learning_rate=lr, seed=seed,
                   disable_tqdm=not progress)
    with _hf_quiet(not progress):
        model, trainer, train_s = _fit(base, max_seq_length, rows, budget, scale, options)
    steps, total = trainer.state.global_step, trainer.state.max_steps
    say(f"trained {steps}/{total} steps in {train_s:.0f}s; stopped by {budget.stopped_by}")
    info: dict[str, Any] = {
        "kind": "bi-encoder",
        "base_model": base_model_record(base_model),
        "corpus_sha256": idx.corpus_sha256, "index": Path(getattr(idx, "path", "")).name,
        "sources": counts, "n_queries": len(queries),
        "rows_per_epoch": len(epoch_rows[0]), "rows_planned": len(rows["anchor"]),
        "rows_trained": min(len(rows["anchor"]), steps * batch_size),
        "negatives": {"sources": [f"{leg} {where}" for leg in pools[queries[0].id]],
                      "excluded": "documents judged relevant in the training split",
                      "per_query": negatives_per_query, "resampled_each_epoch": True,
                      "in_batch": True},
        "settings": {"loss": "MultipleNegativesRankingLoss", "scale": scale, "epochs": epochs,
                     "batch_size": batch_size, "max_seq_length": max_seq_length,
                     "saved_max_seq_length": options["base_max_seq_length"], "lr": lr,
                     "warmup": warmup, "time_budget_s": time_budget_s, "seed": seed,
                     "max_queries": max_queries, "batch_sampler": "no_duplicates",
                     "trainer": "sentence-transformers SentenceTransformerTrainer",
                     "threads": torch.get_num_threads(), "device": "cpu"},
        **run_record(trainer, budget, mining_s, train_s, 10),
        "versions": _versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
    }
    with _hf_quiet(not progress):
        out = _save(model, Path(out_dir), info)
    return TrainResult(out, info)


def _columns(rows: list[Triple], n_neg: int, idx: Index) -> dict[str, list[str]]:
    """anchor / positive / negative_1..n columns (the order MultipleNegativesRankingLoss
    reads them in), documents as the dense leg encodes them (title + sep + text)."""
    text: dict[str, str] = {}

    def doc(d: str) -> str:
        if d not in text:
            text[d] = idx.doc_text(d)
        return text[d]

    cols: dict[str, list[str]] = {"anchor": [q for q, _, _ in rows],
                                  "positive": [doc(p) for _, p, _ in rows]}
    for i in range(n_neg):
        cols[f"negative_{i + 1}"] = [doc(negs[i]) for _, _, negs in rows]
    return cols


def _fit(base: str, max_seq_length: int, rows: dict[str, list[str]], budget: Any, scale: float,
         options: dict[str, Any]) -> tuple[Any, Any, float]:
    """Train ``base`` on ``rows`` with ``SentenceTransformerTrainer``; returns the model, the
    trainer and the seconds trained."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    model = load_base(lambda: SentenceTransformer(base, device="cpu"), base, "embedder",
                      options["seed"])
    model.max_seq_length, options["base_max_seq_length"] = (max_seq_length,
                                                             model.max_seq_length)
    loss = MultipleNegativesRankingLoss(model, scale=scale)
    trainer, seconds = run_trainer(
        _budget_trainer(), SentenceTransformerTrainingArguments, model, rows, loss, budget,
        {k: v for k, v in options.items() if k != "base_max_seq_length"}
        | {"batch_sampler": BatchSamplers.NO_DUPLICATES}, "intentrank-train-embedder-")
    model.max_seq_length = options["base_max_seq_length"]  # encode as the base model did
    return model, trainer, seconds


def _save(model: Any, out: Path, info: dict[str, Any]) -> Path:
    """The model and ``training.json``, swapped into place."""

    def write(tmp: Path) -> None:
        model.save(str(tmp))
        (tmp / TRAINING_JSON).write_text(json.dumps(info, indent=1))

    return swap_into_place(out, write)


def _budget_trainer() -> type:
    """A ``SentenceTransformerTrainer`` with the reranker trainer's time budget and schedule
    (:class:`intentrank.training.budget.BudgetSchedule`), printing nothing but its bar."""
    from sentence_transformers import SentenceTransformerTrainer

    from intentrank.training.budget import BudgetSchedule

    class BudgetSTTrainer(BudgetSchedule, SentenceTransformerTrainer):
        pass

    return BudgetSTTrainer
