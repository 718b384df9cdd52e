"""Corpus encoding with Ray Data: ``map_batches`` over an actor pool of embedders."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from intentrank.index.settings import DenseSettings


class _EmbedActor:
    """One embedder per actor, loaded once; encodes batches of {"row", "text"}."""

    def __init__(self, settings: dict[str, Any], threads: int) -> None:
        s = DenseSettings(**settings)
        self.batch_size = s.batch_size
        if s.backend != "onnx":
            import torch

            torch.set_num_threads(threads)
        self.embedder = s.load_embedder(threads=threads)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vecs = self.embedder.encode_passages([str(t) for t in batch["text"]],
                                             batch_size=self.batch_size)
        return {"row": batch["row"], "vector": vecs}


def ray_encode(texts: Sequence[str], settings: DenseSettings | None = None, *,
               workers: int = 2, batch_size: int = 256, threads_per_worker: int = 1,
               address: str | None = None) -> np.ndarray:
    """Encode ``texts`` as passages with the dense settings' model on ``workers`` Ray actors
    (one embedder each); rows come back in the order of ``texts``."""
    from intentrank.scale.cluster import connect

    ray = connect(address)
    s = settings or DenseSettings()
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    params = {k: v for k, v in s.__dict__.items() if k != "ann"}
    ds = ray.data.from_items([{"row": i, "text": t} for i, t in enumerate(texts)])
    out = ds.map_batches(_EmbedActor, fn_constructor_kwargs={"settings": params,
                                                             "threads": threads_per_worker},
                         batch_size=batch_size, batch_format="numpy",
                         compute=ray.data.ActorPoolStrategy(size=workers),
                         num_cpus=threads_per_worker)
    batches = list(out.iter_batches(batch_size=None, batch_format="numpy"))
    got = np.concatenate([b["row"] for b in batches]) if batches else np.zeros(0, np.int64)
    order = np.argsort(got, kind="stable")
    result = np.concatenate([np.asarray(b["vector"], dtype=np.float32) for b in batches])[order]
    # exactly one vector per passage, even after Ray retried tasks or restarted actors
    if len(result) != len(texts) or not np.array_equal(got[order], np.arange(len(texts))):
        seen = np.bincount(got, minlength=len(texts)) if len(got) else np.zeros(len(texts))
        raise RuntimeError(f"Ray encoding returned {len(result)} vectors for {len(texts)} "
                           f"passages ({int((seen == 0).sum())} missing, "
                           f"{int((seen > 1).sum())} more than once)")
    return np.ascontiguousarray(result)


def ray_encoder(settings: DenseSettings, *, workers: int = 2, batch_size: int = 256,
                threads_per_worker: int = 1, address: str | None = None) -> Any:
    """An ``encoder`` for :func:`intentrank.index.build_index` that encodes on Ray."""
    return partial(ray_encode, settings=settings, workers=workers, batch_size=batch_size,
                   threads_per_worker=threads_per_worker, address=address)
