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

import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from intentrank.data.dataset import Dataset, load_dataset, refuse_test_split
from intentrank.errors import ConfigError, DataError
from intentrank.index.store import Index
from intentrank.training.run import (
    EMBEDDER_DEFAULTS,
    TrainingRun,
    TrainResult,
    draw_negatives,
    training_queries,
)
from intentrank.types import Query

Source = tuple[Dataset | str | Path, str]  # a dataset (or its directory) and a split
Triple = tuple[str, str, list[str]]  # query text, positive doc id, negative doc ids


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
    max_seq_length: int = 128,
    scale: float = 20.0,
    **settings: Any,
) -> TrainResult:
    """Fine-tune a MiniLM bi-encoder on ``split`` of ``dataset`` (plus ``extra`` (dataset,
    split) pairs over the same corpus, e.g. a generated set) and save it to ``out_dir``;
    ``settings``: the :class:`~intentrank.training.run.TrainSettings` fields (defaults
    :data:`~intentrank.training.run.EMBEDDER_DEFAULTS`).

    ``index``: the collection's index (default ``indexes/<dataset name>``, built if missing);
    hard negatives come from its BM25 and dense legs and its documents give the passage text
    (title + text, as the dense leg encodes them). ``batch_size`` counts queries per step; each
    brings its positive and ``negatives_per_query`` hard negatives. Texts are cut to
    ``max_seq_length`` tokens while training (the cost on CPU); the saved model encodes with
    the base model's length (256 for MiniLM), as the zero-shot index did. ``scale``: the
    loss's similarity scale.
    """
    s = replace(EMBEDDER_DEFAULTS, **settings)
    if s.negatives_per_query < 0 or s.depth < 1 or s.epochs < 1 or s.batch_size < 2:
        raise ConfigError(f"bad embedder training settings: negatives_per_query="
                          f"{s.negatives_per_query} (>= 0), depth={s.depth} (>= 1), epochs="
                          f"{s.epochs} (>= 1), batch_size={s.batch_size} (>= 2: in-batch "
                          f"negatives)")
    run = TrainingRun(s)
    for _, sp in [(dataset, split), *extra]:  # before loading anything
        refuse_test_split(sp, "train an embedder")
    sources = [(ds if isinstance(ds, Dataset) else load_dataset(ds), sp)
               for ds, sp in [(dataset, split), *extra]]
    idx = run.open_index(index, sources[0][0])
    queries, qrels, counts = _collect(sources, s.max_queries, s.seed, idx)
    pools = run.mine(idx, queries, qrels, "queries")
    rng = random.Random(s.seed)
    epoch_rows = [sample_triples(queries, qrels, pools, s.negatives_per_query, rng)
                  for _ in range(s.epochs)]
    rows = _columns([r for e in epoch_rows for r in e], s.negatives_per_query, idx)
    if not rows["anchor"]:
        raise DataError("no training rows: no query has a negative in the index (the corpus is "
                        "too small for hard negatives; use negatives_per_query=0)")
    run.require("fine-tuning the dense encoder")
    model = _fit(run, max_seq_length, rows, scale)
    info = run.record("bi-encoder", {
        "corpus_sha256": idx.corpus_sha256, "index": Path(getattr(idx, "path", "")).name,
        "sources": counts, "n_queries": len(queries),
        "rows_per_epoch": len(epoch_rows[0]), "rows_planned": len(rows["anchor"]),
        "rows_trained": min(len(rows["anchor"]), run.trainer.state.global_step * s.batch_size),
    }, {"loss": "MultipleNegativesRankingLoss", "scale": scale,
        "max_seq_length": max_seq_length, "saved_max_seq_length": model.max_seq_length,
        "batch_sampler": "no_duplicates",
        "trainer": "sentence-transformers SentenceTransformerTrainer"},
        10, excluded="documents judged relevant in the training split", in_batch=True)
    return run.save(out_dir, info, lambda tmp: model.save(str(tmp)))


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


def _fit(run: TrainingRun, max_seq_length: int, rows: dict[str, list[str]], scale: float
         ) -> Any:
    """The base model trained on ``rows`` with ``SentenceTransformerTrainer`` and
    ``MultipleNegativesRankingLoss`` (texts cut to ``max_seq_length``); it keeps the base's
    length for encoding."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    from intentrank.training.budget import BudgetSTTrainer

    model = run.load(lambda base: SentenceTransformer(base, device="cpu"), "embedder")
    base_length, model.max_seq_length = model.max_seq_length, max_seq_length
    run.train(BudgetSTTrainer, SentenceTransformerTrainingArguments, model, rows,
              MultipleNegativesRankingLoss(model, scale=scale),
              per_device_train_batch_size=run.settings.batch_size,
              batch_sampler=BatchSamplers.NO_DUPLICATES)
    model.max_seq_length = base_length  # encode as the base model did
    return model
