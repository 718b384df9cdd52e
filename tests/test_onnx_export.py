"""The real MiniLM's ONNX exports: the fp32 one equal to torch within float32 noise, the
int8 one (passages and queries by default) within cosine 0.98, each text the same alone as in
a list, and torch kept (with a warning) when an export cannot be used."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from intentrank.errors import ModelError
from intentrank.models import onnx_export
from intentrank.models.embedder import SentenceTransformerEmbedder, load_embedder
from intentrank.models.onnx_export import OnnxEncoders, local_key, mean_pooled


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    emb = load_embedder("minilm")
    assert isinstance(emb, SentenceTransformerEmbedder)
    return emb


@pytest.fixture(scope="module")
def queries(scifact) -> list[str]:
    return [q.text for _, q in zip(range(40), scifact.queries.values(), strict=False)]


def test_real_fp32_queries_equal_torch(queries) -> None:
    minilm = load_embedder("minilm", precision="fp32")
    assert minilm.query_backend == "onnx"
    fast = minilm.onnx.get(minilm, "fp32")
    assert fast is not None, "the bundled MiniLM should qualify for ONNX queries"
    onnx_vecs = minilm.encode_queries(queries)
    assert np.array_equal(onnx_vecs, fast.encode_queries(queries))
    torch_vecs = minilm.torch_encode(queries)
    assert onnx_vecs.shape == torch_vecs.shape == (len(queries), 384)
    assert onnx_vecs.dtype == np.float32
    assert np.abs(onnx_vecs - torch_vecs).max() < 1e-5
    # each query is run alone: its vector does not depend on what it is encoded with
    alone = np.vstack([minilm.encode_queries([q]) for q in queries[:8]])
    assert np.array_equal(alone, onnx_vecs[:8])
    assert np.array_equal(minilm.encode_queries(queries[::-1])[::-1], onnx_vecs)


def test_export_is_cached_per_weights(minilm, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path))
    first, second = OnnxEncoders(), OnnxEncoders()
    assert first.get(minilm) is not None and first.get(minilm, "int8") is not None
    files = sorted((tmp_path / "models" / "onnx").glob("*/model*.onnx"))
    assert [f.name for f in files] == ["model-int8.onnx", "model.onnx"]
    stamps = [f.stat().st_mtime_ns for f in files]
    for kind in ("fp32", "int8"):  # reuses the files
        assert second.get(minilm, kind) is not None
    assert [f.stat().st_mtime_ns for f in files] == stamps
    probe = ["coronary heart disease"]
    for kind in ("fp32", "int8"):
        assert np.array_equal(first.get(minilm, kind).encode_queries(probe),
                              second.get(minilm, kind).encode_queries(probe))


def test_failed_export_keeps_torch_with_a_warning(minilm, tmp_path, monkeypatch,
                                                   caplog) -> None:
    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path))  # no checked export there

    def broken(*_args: object, **_kw: object) -> None:
        raise RuntimeError("no exporter here")

    monkeypatch.setattr(onnx_export, "export", broken)
    encoders = OnnxEncoders()
    with caplog.at_level(logging.WARNING, logger="intentrank.models.onnx_export"):
        assert encoders.get(minilm) is None
        assert encoders.get(minilm) is None  # decided once
        assert encoders.get(minilm, "int8") is None  # no export: no int8 model either
    assert [r.getMessage() for r in caplog.records].count(
        "the ONNX export of minilm failed (RuntimeError: no exporter here): texts stay on "
        "torch") == 1
    with pytest.raises(ValueError, match="unknown ONNX precision 'int4'"):
        encoders.get(minilm, "int4")


def test_real_passages_int8_close_to_torch(minilm, scifact) -> None:
    """SciFact abstracts through the int8 export: close to torch, and a passage's vector is
    the same alone, in a list and in another order (one passage per run)."""
    docs = [f"{d.title} {d.text}" for _, d in zip(range(24), scifact.corpus(), strict=False)]
    assert minilm.precision == "int8"
    assert minilm.onnx.get(minilm, "int8") is not None
    vecs = minilm.encode_passages(docs)
    torch_vecs = minilm.torch_encode(docs)
    assert vecs.shape == (len(docs), 384) and vecs.dtype == np.float32
    cosines = (vecs * torch_vecs).sum(axis=1)
    assert cosines.min() > 0.98 and cosines.mean() > 0.99
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    alone = np.vstack([minilm.encode_passages([d]) for d in docs[:6]])
    assert np.array_equal(alone, vecs[:6])
    assert np.array_equal(minilm.encode_passages(docs[::-1])[::-1], vecs)


def test_real_queries_int8_by_default(minilm, queries) -> None:
    """Queries follow the precision: int8 by default, close to torch, each run alone."""
    vecs = minilm.encode_queries(queries)
    assert np.array_equal(vecs, minilm.onnx.get(minilm, "int8").encode_queries(queries))
    cosines = (vecs * minilm.torch_encode(queries)).sum(axis=1)
    assert cosines.min() > 0.98 and cosines.max() < 1.0 - 1e-6  # quantised, not the fp32 copy
    alone = np.vstack([minilm.encode_queries([q]) for q in queries[:6]])
    assert np.array_equal(alone, vecs[:6])


def test_int8_failure_keeps_queries_on_the_fp32_export(queries, tmp_path, monkeypatch,
                                                       caplog) -> None:
    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path))

    def broken(*_args: object, **_kw: object) -> None:
        raise RuntimeError("no quantiser here")

    monkeypatch.setattr(onnx_export, "quantize_int8", broken)
    emb = SentenceTransformerEmbedder()
    with caplog.at_level(logging.WARNING, logger="intentrank.models.onnx_export"):
        vecs = emb.encode_queries(queries[:4])
    assert np.array_equal(vecs, emb.onnx.get(emb, "fp32").encode_queries(queries[:4]))
    assert any("passages stay on torch, queries on the fp32 export" in r.getMessage()
               for r in caplog.records)


def test_torch_backend_and_bad_backend(minilm, queries) -> None:
    as_torch = SentenceTransformerEmbedder(query_backend="torch")
    assert np.array_equal(as_torch.encode_queries(queries[:3]), as_torch.torch_encode(queries[:3]))
    with pytest.raises(ModelError, match="unknown query_backend 'gpu'"):
        SentenceTransformerEmbedder(query_backend="gpu")
    with pytest.raises(ModelError, match="unknown precision 'int4'"):
        SentenceTransformerEmbedder(precision="int4")


def _module(name: str, **attrs: object) -> object:
    module = type(name, (), {})()
    module.__dict__.update(attrs)
    return module


@pytest.mark.parametrize(("modules", "expected"), [
    ([_module("Transformer"), _module("Pooling", pooling_mode="mean"), _module("Normalize")],
     True),
    ([_module("Transformer"), _module("Pooling", pooling_mode="cls")], False),
    ([_module("Transformer"), _module("Pooling", pooling_mode_mean_tokens=True)], True),
    ([_module("Transformer"), _module("Pooling", pooling_mode_mean_tokens=True,
                                      pooling_mode_max_tokens=True)], False),
    ([_module("Transformer"), _module("Pooling", pooling_mode="mean"), _module("Dense")],
     False),
])
def test_only_mean_pooled_models_qualify(modules, expected) -> None:
    assert mean_pooled(modules) is expected


def test_a_checked_export_serves_queries_without_torch(minilm, queries, tmp_path,
                                                       monkeypatch) -> None:
    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path))
    first = SentenceTransformerEmbedder()  # exports, checks against torch, keeps the check
    expected = first.encode_queries(queries[:5])
    passages = first.encode_passages(queries[5:8])
    checks = list((tmp_path / "models" / "onnx").glob("dir-*/check.json"))
    assert len(checks) == 1
    check = json.loads(checks[0].read_text())
    assert check["max_diff"] < 1e-5 and check["int8_min_cosine"] >= 0.98
    fresh = SentenceTransformerEmbedder()
    assert np.array_equal(fresh.encode_queries(queries[:5]), expected)
    assert np.array_equal(fresh.encode_passages(queries[5:8]), passages)
    assert fresh._model is None, "checked exports should not load the torch model"
    assert fresh.dim == 384 and fresh._model is None
    as_fp32 = SentenceTransformerEmbedder(precision="fp32")
    as_fp32.encode_passages(["an fp32 passage loads torch"])
    assert as_fp32._model is not None


@pytest.mark.parametrize("broken", ["model-int8.onnx", "model.onnx"])
def test_a_damaged_export_is_made_again(minilm, queries, tmp_path, monkeypatch, caplog,
                                        broken) -> None:
    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path))
    first = SentenceTransformerEmbedder()
    expected = first.encode_passages(queries[:3]), first.encode_queries(queries[:3])
    (damaged,) = (tmp_path / "models" / "onnx").glob(f"dir-*/{broken}")
    damaged.write_bytes(b"not an onnx model")
    fresh = SentenceTransformerEmbedder()
    with caplog.at_level(logging.WARNING, logger="intentrank.models.onnx_export"):
        again = fresh.encode_passages(queries[:3]), fresh.encode_queries(queries[:3])
    assert any("cannot be used" in r.getMessage() and "making it again" in r.getMessage()
               for r in caplog.records)
    assert fresh.onnx.get(fresh, "int8") is not None and fresh.onnx.get(fresh) is not None
    assert all(np.array_equal(a, b) for a, b in zip(again, expected, strict=True))
    assert damaged.read_bytes() != b"not an onnx model"  # made again, and checked


def test_local_key(tmp_path) -> None:
    from intentrank.models.inputs import minilm_path

    key = local_key(minilm_path(), None)
    assert key is not None and key[0].startswith("dir-") and key[1] == 256
    assert local_key(minilm_path(), 128)[1] == 128
    assert local_key(minilm_path(), 128)[0] != key[0]
    assert local_key("sentence-transformers/all-MiniLM-L6-v2", None) is None  # a hub name
    (tmp_path / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 64}')
    assert local_key(tmp_path, None) is None  # CLS pooling
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode": "mean"}')
    assert local_key(tmp_path, None)[1] == 64
    (tmp_path / "modules.json").write_text("not json")
    assert local_key(tmp_path, None) is None
