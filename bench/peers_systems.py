"""The peers of bench_peers.py, each as a user would call it, on local files only: BM25 by
bm25s, Lucene (Anserini, in process through intentrank's ``lucene`` stage) and tantivy;
sentence-transformers and fastembed embedders; sentence-transformers and rerankers
cross-encoders over an fp32 copy of the shipped int8 reranker (:func:`fp32_reranker`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

WORDS = re.compile(r"\w+")
LUCENE_TOKENS = r"(?u)\b\w+\b"  # one-letter tokens too, as Lucene's StandardTokenizer keeps


# -- BM25 ------------------------------------------------------------------------------------
class Bm25s:
    """bm25s directly: tokenise (stopwords ``en``, a PyStemmer stemmer), index, retrieve
    (numpy backend). The defaults are intentrank's BM25 settings; ``lucene=True`` is
    Anserini's analyser as far as bm25s goes (one-letter tokens, Porter, k1 0.9, b 0.4)."""

    def __init__(self, lucene: bool = False) -> None:
        import Stemmer

        self.stemmer = Stemmer.Stemmer("porter" if lucene else "english")
        self.pattern = LUCENE_TOKENS if lucene else r"(?u)\b\w\w+\b"
        self.k1, self.b = (0.9, 0.4) if lucene else (1.5, 0.75)
        self.model: Any = None

    def _tokens(self, texts: Sequence[str], ids: bool) -> Any:
        import bm25s

        return bm25s.tokenize(list(texts), stopwords="en", stemmer=self.stemmer,
                              token_pattern=self.pattern, return_ids=ids, show_progress=False)

    def build(self, texts: Sequence[str], out: Path | None = None) -> Bm25s:
        import bm25s

        corpus = self._tokens(texts, True)
        self.vocab = corpus.vocab
        self.model = bm25s.BM25(method="lucene", k1=self.k1, b=self.b)
        self.model.index(corpus, show_progress=False)
        if out is not None:
            self.model.save(str(out))
        return self

    def search(self, texts: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        ids = [[self.vocab[w] for w in t if w in self.vocab]
               for t in self._tokens(texts, False)]
        live = [i for i, t in enumerate(ids) if t]
        out: list[list[tuple[int, float]]] = [[] for _ in texts]
        if live:
            rows, scores = self.model.retrieve([ids[i] for i in live], k=k, show_progress=False)
            for j, i in enumerate(live):
                out[i] = [(int(r), float(s)) for r, s in zip(rows[j], scores[j], strict=True)
                          if s > 0]
        return out

    def posting_bytes(self, texts: Sequence[str]) -> list[int]:
        """Bytes a query's scoring must read: its terms' postings (float32 score + int32
        row each) and one float32 accumulator per document, written and read for top-k."""
        indptr = np.asarray(self.model.scores["indptr"])
        n = int(self.model.scores["num_docs"])
        out = []
        for t in self._tokens(texts, False):
            cols = [self.vocab[w] for w in t if w in self.vocab]
            out.append(int(sum(indptr[c + 1] - indptr[c] for c in cols)) * 8 + 2 * 4 * n)
        return out


class Tantivy:
    """tantivy: one stored id field and one text field with its English stemming tokenizer
    (``en_stem``: lower case, Snowball English; no stopwords; BM25 k1 1.2, b 0.75, fixed)."""

    def build(self, ids: Sequence[str], texts: Sequence[str], out: Path) -> Tantivy:
        import tantivy

        builder = tantivy.SchemaBuilder()
        builder.add_text_field("id", stored=True, tokenizer_name="raw")
        builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
        out.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(builder.build(), path=str(out))
        writer = index.writer(heap_size=200_000_000, num_threads=2)
        for i, t in zip(ids, texts, strict=True):
            writer.add_document(tantivy.Document(id=i, body=t))
        writer.commit()
        writer.wait_merging_threads()
        return self.open(out)

    def open(self, out: Path) -> Tantivy:
        import tantivy

        self.index = tantivy.Index.open(str(out))
        self.index.reload()
        self.searcher = self.index.searcher()
        return self

    def search(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        out = []
        for text in texts:  # its Python API searches one query at a time
            words = " ".join(WORDS.findall(text))  # no query-parser syntax reaches it
            if not words:
                out.append([])
                continue
            query = self.index.parse_query(words, ["body"])
            hits = self.searcher.search(query, k).hits
            out.append([(self.searcher.doc(a)["id"][0], float(s)) for s, a in hits])
        return out


def lucene_like_bm25() -> Any:
    """intentrank's BM25 settings nearest Anserini's: Lucene's one-character words
    (``bm25.tokens: lucene``), Porter (Lucene's PorterStemFilter; PyStemmer ``porter``),
    k1 0.9, b 0.4; the ``en`` stopwords are Lucene's 33 already."""
    from dataclasses import replace

    from intentrank.index.settings import BM25Settings

    return replace(BM25Settings(), tokens="lucene", stemmer="porter", k1=0.9, b=0.4)


def peak_rss_mib() -> float:
    """This process's own resident-memory high-water mark (VmHWM: not the image it was
    forked from, which ru_maxrss counts)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def lucene_build(docs: Sequence[Any], out: Path, java: list[str]) -> float:
    """Anserini's IndexCollection over a JSON collection of ``docs`` (2 threads, raw stored),
    as :func:`intentrank.retrieve.lucene.build_lucene_index` runs it; ``java`` is its
    ``java_command`` prefix (computed by the parent: importing the stage here would load
    intentrank's stages into the process whose memory is measured). Returns the JVM's peak
    RSS in MiB (sampled every 50 ms)."""
    import subprocess
    import tempfile

    from lib.timing import RSSSampler

    with tempfile.TemporaryDirectory() as tmp:
        with open(Path(tmp) / "docs.jsonl", "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"id": d.id, "contents": d.full_text()}) + "\n")
        proc = subprocess.Popen([*java, "-collection", "JsonCollection", "-input", tmp,
                                 "-index", str(out), "-generator",
                                 "DefaultLuceneDocumentGenerator", "-threads", "2",
                                 "-storeRaw"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        rss = RSSSampler(proc.pid, 0.05)
        _, err = proc.communicate()
        rss.stop.set()
    if proc.returncode != 0:
        raise RuntimeError(f"IndexCollection failed: {err.decode()[-2000:]}")
    return max((b for _, b in rss.samples), default=0) / 2**20


def lucene_searcher(path: Path) -> Any:
    from intentrank.retrieve.lucene import LuceneSearcher

    return LuceneSearcher(path)  # Anserini's defaults: k1 0.9, b 0.4


# -- embedders -------------------------------------------------------------------------------
def st_embedder() -> Any:
    """sentence-transformers fp32 on torch, the bundled all-MiniLM-L6-v2 weights."""
    from sentence_transformers import SentenceTransformer

    from intentrank.models.inputs import minilm_path

    return SentenceTransformer(minilm_path(), device="cpu")


def fastembed_embedder(cache: Path) -> Any:
    """fastembed over intentrank's fp32 ONNX export of the same weights (a local folder with
    the export and MiniLM's tokenizer files; fastembed mean-pools and normalises)."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    from intentrank.models.embedder import load_embedder
    from intentrank.models.inputs import minilm_path

    emb = load_embedder()
    export = emb.onnx.get(emb, "fp32")
    folder = cache / "fastembed-minilm"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "config.json", "special_tokens_map.json"):
        _link(Path(minilm_path()) / name, folder / name)
    config = json.loads((Path(minilm_path()) / "tokenizer_config.json").read_text())
    st = json.loads((Path(minilm_path()) / "sentence_bert_config.json").read_text())
    config["model_max_length"] = st["max_seq_length"]  # sentence-transformers' 256, not 512
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    _link(Path(export.onnx_path), folder / "model.onnx")
    pooled = len(_onnx_output_shape(folder / "model.onnx")) == 2
    name = "intentrank/all-minilm-l6-v2-local"
    with contextlib.suppress(ValueError):  # registered already in this process
        TextEmbedding.add_custom_model(
            name, pooling=PoolingType.DISABLED if pooled else PoolingType.MEAN,
            normalization=True, sources=ModelSource(hf="none/none"), dim=384,
            model_file="model.onnx")
    return TextEmbedding(name, specific_model_path=str(folder), threads=2)


def _onnx_output_shape(path: Path) -> list:
    import onnx

    out = onnx.load(str(path), load_external_data=False).graph.output[0]
    return list(out.type.tensor_type.shape.dim)


def _link(src: Path, dst: Path) -> None:
    if not dst.exists():
        os.symlink(src, dst)


# -- cross-encoders --------------------------------------------------------------------------
def fp32_reranker(cache: Path) -> Path:
    """The shipped int8 reranker's weights dequantised to fp32 (``(q - zero_point) *
    scale``) into a BertForSequenceClassification folder that sentence-transformers and
    rerankers load: the same function up to int8 activation rounding. Made once."""
    out = cache / "reranker-fp32-dequantised-128"
    if (out / "model.safetensors").is_file():
        return out
    import onnx
    import torch
    from onnx import numpy_helper
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from intentrank.models.cross_encoder import bundled_reranker_dir
    from intentrank.models.inputs import minilm_path

    graph = onnx.load(str(bundled_reranker_dir() / "model_int8.onnx")).graph
    init = {i.name: numpy_helper.to_array(i) for i in graph.initializer}

    def deq(stem: str) -> np.ndarray:
        q, s, z = (init[f"{stem}_{x}"] for x in ("quantized", "scale", "zero_point"))
        return (q.astype(np.float32) - z.astype(np.float32)) * s.astype(np.float32)

    state = {k.removeprefix("inner."): torch.from_numpy(v.copy()) for k, v in init.items()
             if k.startswith("inner.") and k.endswith(("bias", "LayerNorm.weight"))}
    for name in ("word", "position", "token_type"):
        state[f"bert.embeddings.{name}_embeddings.weight"] = torch.from_numpy(
            deq(f"inner.bert.embeddings.{name}_embeddings.weight"))
    for node in graph.node:
        if node.op_type == "MatMulInteger":  # /inner/bert/.../query/MatMul_quant -> [in, out]
            layer = node.name.removeprefix("/inner/").rsplit("/", 1)[0].replace("/", ".")
            state[f"{layer}.weight"] = torch.from_numpy(
                deq(node.input[1].removesuffix("_quantized")).T.copy())
    config = BertConfig.from_pretrained(minilm_path(), num_labels=1)
    model = BertForSequenceClassification(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "position_ids" not in m]:
        raise RuntimeError(f"dequantised reranker: missing {missing}, unexpected {unexpected}")
    model.save_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    tokenizer.model_max_length = 128  # as trained (training.json); rerankers truncates here
    tokenizer.save_pretrained(str(out))
    (out / "intentrank.json").write_text(json.dumps(
        {"from": "models/reranker/model_int8.onnx", "how": "dequantised to fp32"}))
    return out


def st_cross_encoder(path: Path) -> Any:
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(path), max_length=128, device="cpu")


def rerankers_cross_encoder(path: Path) -> Any:
    from rerankers import Reranker

    return Reranker(str(path), model_type="cross-encoder", dtype="float32", device="cpu",
                    verbose=0)
