"""Shared fixtures: paths to the real collections in ../shared/data and a real Cranfield index."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["model_loads", "pg_server"]  # model loads counted; a real Postgres (pg_uri)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("INTENTRANK_DATA", ROOT.parent / "shared" / "data"))
os.environ.setdefault("INTENTRANK_CACHE", str(ROOT / ".cache" / "tests"))  # not the benchmarks'


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA / "cranfield" / "corpus.jsonl").exists():
        pytest.fail(f"the shared test collections are missing at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def cranfield(data_dir: Path):
    from intentrank.data.dataset import load_dataset

    return load_dataset(data_dir / "cranfield")


@pytest.fixture(scope="session")
def cranfield_index(cranfield, tmp_path_factory):
    """A real index (all four legs) of the 1,400 Cranfield abstracts, built once."""
    from intentrank.index import build_index

    return build_index(cranfield.corpus(), tmp_path_factory.mktemp("idx") / "cranfield")


@pytest.fixture(scope="session")
def scifact(data_dir: Path):
    from intentrank.data.dataset import load_dataset

    return load_dataset(data_dir / "scifact")


@pytest.fixture(scope="session")
def scifact_bm25(scifact, tmp_path_factory):
    """SciFact's BM25 leg only (numpy backend), built once: a dense SciFact index takes
    minutes to encode on 2 cores. Tests that switch its backend switch it back."""
    from intentrank.index import IndexSettings, build_index

    return build_index(scifact.corpus(), tmp_path_factory.mktemp("bm25") / "scifact",
                       IndexSettings(legs=("bm25",)))


@pytest.fixture(scope="session")
def small_cranfield(data_dir, tmp_path_factory):
    """Cranfield (same corpus, so the index fingerprint matches) judged on 4 queries."""
    src = data_dir / "cranfield"
    root = tmp_path_factory.mktemp("small") / "cranfield"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").symlink_to(src / "corpus.jsonl")
    (root / "queries.jsonl").symlink_to(src / "queries.jsonl")
    lines = (src / "qrels" / "test.tsv").read_text().splitlines()
    keep = [ln for ln in lines[1:] if ln.split("\t")[0] in {"1", "2", "4", "8"}]
    (root / "qrels" / "test.tsv").write_text("\n".join([lines[0], *keep]) + "\n")
    return root


@pytest.fixture(scope="session")
def cast21(data_dir, tmp_path_factory):
    """TREC CAsT 2021's canonical passages as a labelled conversational dataset, with a
    BM25-only index of them (235 passages: built in seconds)."""
    from intentrank.data.conversations import write_cast2021_passages
    from intentrank.data.dataset import load_dataset
    from intentrank.index import IndexSettings, build_index

    root = write_cast2021_passages(tmp_path_factory.mktemp("c21") / "cast2021",
                                   data_dir / "trec-cast")
    ds = load_dataset(root)
    index = build_index(ds.corpus(), tmp_path_factory.mktemp("c21i") / "idx",
                        IndexSettings(legs=("bm25",)))
    return ds, index


@pytest.fixture()
def fake_openai():
    """Starts fake OpenAI-compatible servers (``tests/fake_openai.py``): ``url, script =
    fake_openai("500", "ok", reply="Yes")``; all are stopped after the test."""
    from fake_openai import FakeOpenAI

    servers = FakeOpenAI()
    yield servers
    servers.close()


# Fixtures that encode a real collection with the dense model: a test using one is in the
# full tier only (`scripts/test.sh --fast` runs `-m "not slow"`; see README).
DENSE_FIXTURES = frozenset({"cranfield_index"})


# Opt-in tiers: a test marked with one of these runs only when -m names the marker
# (`pytest -m cluster`, scripts/faults.sh); otherwise it is skipped, saying how to run it.
OPT_IN = ("cluster", "soak")


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201 (pytest hook)
    slow = pytest.mark.slow(reason="encodes a real collection with the dense model")
    markexpr = config.getoption("markexpr", "") or ""
    for item in items:
        if DENSE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(slow)
        for name in OPT_IN:
            if item.get_closest_marker(name) and name not in markexpr:
                item.add_marker(pytest.mark.skip(reason=f"opt-in: run with -m {name}"))
