"""Shared fixtures: paths to the real collections in ../shared/data and a real Cranfield index."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
from collections.abc import Iterator
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


@contextlib.contextmanager
def run_lock(tmp_path_factory, name: str) -> Iterator[None]:
    """Hold the lock ``name``, shared by the processes of this run (pytest-xdist's workers
    share their parent's basetemp), while a fixture builds something each process needs:
    the first builds it (filling the embedding cache under $INTENTRANK_CACHE), the next
    waits and then finds the vectors cached instead of encoding the collection again."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    with open(base / f"{name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def cranfield_index(cranfield, tmp_path_factory):
    """A real index (all four legs) of the 1,400 Cranfield abstracts, built once per process
    (once per run encoded: see :func:`run_lock`)."""
    from intentrank.index import build_index

    with run_lock(tmp_path_factory, "cranfield_index"):
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
# (`pytest -m cluster`, scripts/faults.sh) or when $INTENTRANK_OPT_IN lists its node id
# (space-separated: scripts/test.sh runs one fault test across hosts inside the suite's run);
# otherwise it is skipped, saying how to run it.
OPT_IN = ("cluster", "soak")


# Under pytest-xdist (`scripts/test.sh` runs `-n 2 --dist loadfile`) a file is one unit of
# work, so its module fixtures are built once. The files that start a Ray cluster (any file
# that says `pytest.mark.ray` or `pytest.mark.cluster`) are one unit, so one cluster runs at a
# time; the files in
# SHARED_UNITS too, run in one process in this order: the files that encode SciFact (all of
# it, then 2,000 of its abstracts, then all of it as segments, found in the embedding cache
# instead of encoded at once on both cores). The files that cost most
# (HEAVY_FIRST, measured: docs/architecture.md "Tests") are handed out first, so that no long
# file starts last. (xdist's `xdist_group` marks do nothing under pytest 9: xdist 3.8 renames
# `item._nodeid`, which pytest 9 no longer reads; hence a scheduler of our own.)
SHARED_UNITS = {"tests/test_scale_index.py": "scifact-dense",
                "tests/test_index_filters.py": "scifact-dense",
                "tests/test_hnsw_walk.py": "scifact-dense"}
HEAVY_FIRST = ("tests/test_scale_index.py", "tests/test_index_filters.py",
               "tests/test_answer_attribution.py", "tests/test_index_update.py",
               "tests/test_leak_fuzzer.py", "tests/test_scale_ray.py",
               "tests/test_scale_serve_batch.py", "tests/test_llm_real.py",
               "tests/test_cli_validation.py", "tests/test_generate_conversations.py",
               "tests/test_choose.py", "tests/test_onnx_export.py", "tests/test_llm_stages.py",
               "tests/test_wheel.py", "tests/test_cross_encoder.py",
               "tests/test_postgres_vectors.py")


@functools.cache
def _unit_of_file(where: str) -> str:
    """The scheduler sees node ids only (the controller collects nothing): read the file."""
    path = ROOT / where
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if "pytest.mark.ray" in text or "pytest.mark.cluster" in text:
        return "ray"
    return SHARED_UNITS.get(where, where)


def _unit(nodeid: str) -> str:
    return _unit_of_file(nodeid.split("::")[0])


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown without the plugin
def pytest_xdist_make_scheduler(config, log):  # noqa: ANN001, ANN201 (pytest hook)
    """``--dist loadfile`` with SHARED_UNITS: one unit per file, or per shared unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return Units(config, log)


def _heavy_first(items) -> None:  # noqa: ANN001 (pytest items)
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201 (pytest hook)
    slow = pytest.mark.slow(reason="encodes a real collection with the dense model")
    markexpr = config.getoption("markexpr", "") or ""
    chosen = set(os.environ.get("INTENTRANK_OPT_IN", "").split())
    for item in items:
        if DENSE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(slow)
        for name in OPT_IN:
            if item.get_closest_marker(name) and name not in markexpr \
                    and item.nodeid not in chosen:
                item.add_marker(pytest.mark.skip(reason=f"opt-in: run with -m {name}"))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers collect; the controller does not
        _heavy_first(items)
