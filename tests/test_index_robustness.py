"""Reliability of the on-disk index: one writer per directory, readers pinned to their
generation, crash safety (SIGKILL / SIGTERM mid-build), corruption detection, a damaged
embedding cache, bounded memory for huge texts, settings validation and the corpus checks
the CLI relies on (``corpus_sha256``, ``open_or_build``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from intentrank.errors import IndexMismatchError, IntentrankError
from intentrank.index import (
    Index,
    IndexBuildInterrupted,
    IndexBusyError,
    IndexCorruptError,
    IndexFormatError,
    IndexNotFoundError,
    IndexSettings,
    IndexSettingsError,
    build_index,
    corpus_sha256,
    open_or_build,
)
from intentrank.index.embedding_cache import EmbeddingCache, EmbeddingCacheWarning
from intentrank.index.settings import BM25Settings, DenseSettings, GraphSettings, TfidfSettings
from intentrank.types import Document

ROOT = Path(__file__).resolve().parents[1]
BM25 = IndexSettings(legs=("bm25",))
LEXICAL = IndexSettings(legs=("bm25", "tfidf", "graph"))


def wing_docs(n: int = 30, topic: str = "wing") -> list[Document]:
    return [Document(f"{topic}{i}", f"{topic} lift drag number {i} at Mach {i % 7} in NASA tests",
                     title=f"{topic} report {i}") for i in range(n)]


def entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def run_script(tmp_path: Path, body: str, *args: str) -> subprocess.Popen:
    """Start a Python subprocess running ``body`` (with the test environment)."""
    script = tmp_path / f"script_{time.monotonic_ns()}.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen([sys.executable, str(script), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"subprocess ended early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("subprocess never reached its marker")
        time.sleep(0.02)


# A build whose corpus stops after 40 documents: it touches MARKER, then waits for GO to
# exist (or forever). MODE "commit" instead blocks right before CURRENT is replaced.
BLOCKING_BUILD = """
    import pathlib, sys, time
    from intentrank.index import IndexBuildInterrupted, IndexSettings, build_index, layout
    from intentrank.types import Document

    out, marker, go, mode = sys.argv[1:5]

    def block():
        pathlib.Path(marker).touch()
        while not pathlib.Path(go).exists():
            time.sleep(0.02)

    def docs():
        for i in range(40):
            yield Document(f"new{i}", f"rocket engine thrust number {i}")
        if mode == "docs":
            block()
        yield Document("last", "the final rocket document")

    if mode == "commit":
        real = layout.write_current
        def slow(path, gen):
            block()
            real(path, gen)
        layout.write_current = slow
    try:
        idx = build_index(docs(), out, IndexSettings(legs=("bm25",)), overwrite=True)
    except IndexBuildInterrupted as exc:
        import signal
        print(f"INTERRUPTED {exc}", flush=True)
        print("HANDLER", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
        sys.exit(3)
    print("BUILT", len(idx), flush=True)
"""


def snapshot(index: Index) -> list:
    """What the index answers, to compare before/after."""
    hits = index.search_bm25(["wing lift", "drag mach", "rocket thrust"], 10)
    pairs = [list(zip(h.rows.tolist(), h.scores.tolist(), strict=True)) for h in hits]
    return pairs + [index.ids, [index.doc(i).text for i in index.ids]]


# -- one writer per directory ----------------------------------------------------------------
def test_second_writer_fails_at_once_naming_the_pid(tmp_path, monkeypatch):
    from intentrank.index import layout

    flocks = []  # (file, flags) of every flock the second writer asks for

    def recorded_flock(fd, flags):
        flocks.append((os.readlink(f"/proc/self/fd/{fd}"), flags))
        return real_flock(fd, flags)

    real_flock = layout.fcntl.flock
    path = tmp_path / "idx"
    marker, go = tmp_path / "marker", tmp_path / "go"
    proc = run_script(tmp_path, BLOCKING_BUILD, str(path), str(marker), str(go), "docs")
    try:
        wait_for(marker, proc)
        monkeypatch.setattr(layout.fcntl, "flock", recorded_flock)
        with pytest.raises(IndexBusyError, match=rf"index {re.escape(str(path))} is being "
                                                 rf"built by pid {proc.pid}\b"):
            build_index(wing_docs(), path, BM25, overwrite=True)
        # fails at once, does not wait: one try at the writer lock, non-blocking
        assert flocks == [(str(path / ".lock"), layout.fcntl.LOCK_EX | layout.fcntl.LOCK_NB)]
        monkeypatch.undo()
        with pytest.raises(IndexBusyError):  # also for open_or_build (none exists yet)
            open_or_build(wing_docs(), path, BM25)
    finally:
        go.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "BUILT 41" in out
    index = Index(path)
    assert len(index) == 41 and index.ids[-1] == "last"  # the first writer won, cleanly
    # Once the writer is done, the directory is free again.
    build_index(wing_docs(), path, BM25, overwrite=True)
    assert set(entries(path)) == {".lock", "CURRENT", Index(path).generation, index.generation}


def test_two_threads_cannot_both_build(tmp_path):
    path = tmp_path / "idx"
    started, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_docs():
        yield from wing_docs(5)
        started.set()
        release.wait(30)

    def first():
        try:
            build_index(slow_docs(), path, BM25)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=first)
    t.start()
    assert started.wait(30)
    with pytest.raises(IndexBusyError, match=f"being built by pid {os.getpid()}"):
        build_index(wing_docs(), path, BM25)
    release.set()
    t.join(30)
    assert not errors and len(Index(path)) == 5


# -- readers keep their generation --------------------------------------------------------
def test_reader_keeps_reading_its_generation_during_rebuilds(tmp_path):
    path = tmp_path / "idx"
    build_index(wing_docs(), path, LEXICAL)
    reader = Index(path)  # no leg loaded yet
    old_gen = reader.generation
    build_index(wing_docs(20, topic="rocket"), path, LEXICAL, overwrite=True)
    build_index(wing_docs(10, topic="rocket"), path, LEXICAL, overwrite=True)
    assert reader.search_bm25(["wing lift"], 5)[0].rows.size == 5  # loaded now: old data
    assert reader.search_tfidf(["wing lift"], 5)[0].rows.size == 5
    assert reader.search_graph(["NASA"], 50)[0].rows.size == 30
    assert reader.doc("wing3").text.startswith("wing lift") and len(reader) == 30
    fresh = Index(path)
    assert len(fresh) == 10 and fresh.search_bm25(["wing"], 5)[0].rows.size == 0
    # The old generation stays on disk while the reader has it open ...
    assert (path / old_gen).is_dir()
    reader.close()
    fresh.close()
    build_index(wing_docs(10, topic="rocket"), path, LEXICAL, overwrite=True)
    # ... and the next build removes it (and the one between, now unused).
    assert entries(path) == [".lock", "CURRENT", Index(path).generation]


READER = """
    import json, pathlib, sys, time
    from intentrank.index import Index
    path, marker, go = sys.argv[1:4]
    index = Index(path)
    pathlib.Path(marker).touch()
    while not pathlib.Path(go).exists():
        time.sleep(0.02)
    hits = index.search_bm25(["wing lift"], 50)[0]
    tfidf = index.search_tfidf(["wing"], 3)[0]
    print(json.dumps({"gen": index.generation, "n": len(index), "hits": hits.rows.size,
                      "doc": index.doc("wing7").text, "tfidf": tfidf.rows.size}))
"""


def test_reader_in_another_process_survives_a_rebuild(tmp_path):
    path = tmp_path / "idx"
    old = build_index(wing_docs(), path, LEXICAL)
    old_gen = old.generation
    old.close()
    marker, go = tmp_path / "marker", tmp_path / "go"
    proc = run_script(tmp_path, READER, str(path), str(marker), str(go))
    try:
        wait_for(marker, proc)
        new = build_index(wing_docs(12, topic="rocket"), path, LEXICAL, overwrite=True)
        assert new.generation != old_gen and (path / old_gen).is_dir()  # kept for the reader
    finally:
        go.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert seen == {"gen": old_gen, "n": 30, "hits": 30, "tfidf": 3,
                    "doc": "wing lift drag number 7 at Mach 0 in NASA tests"}
    new.close()
    build_index(wing_docs(12, topic="rocket"), path, LEXICAL, overwrite=True)
    assert old_gen not in entries(path)


def test_concurrent_opens_during_rebuilds_never_fail(tmp_path):
    """Readers opening while a writer swaps generations (and deletes old ones) in a loop."""
    path = tmp_path / "idx"
    build_index(wing_docs(8), path, BM25)
    stop = threading.Event()
    problems: list[BaseException] = []

    def read_loop():
        while not stop.is_set():
            try:
                with Index(path) as index:
                    assert len(index) in (8, 9)
                    assert index.search_bm25(["wing"], 3)[0].rows.size == 3
            except BaseException as exc:  # noqa: BLE001
                problems.append(exc)
                return

    readers = [threading.Thread(target=read_loop) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        for n in range(12):
            build_index(wing_docs(8 + n % 2), path, BM25, overwrite=True)
    finally:
        stop.set()
        for r in readers:
            r.join(30)
    assert not problems, problems[0]


# -- crash safety -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["docs", "commit"])
def test_kill_9_mid_build_leaves_the_old_index_working(tmp_path, mode):
    path = tmp_path / "idx"
    before = snapshot(build_index(wing_docs(), path, BM25))
    marker, go = tmp_path / "marker", tmp_path / "go"
    proc = run_script(tmp_path, BLOCKING_BUILD, str(path), str(marker), str(go), mode)
    wait_for(marker, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    left = [n for n in entries(path) if n.startswith(".tmp-" if mode == "docs" else "gen-")]
    assert len(left) == (1 if mode == "docs" else 2)  # what the killed build left
    assert snapshot(Index(path)) == before  # the old index opens and answers identically
    assert Index(path).verify()["files"] > 3
    log: list[str] = []
    rebuilt = build_index(wing_docs(9, topic="rocket"), path, BM25, overwrite=True,
                          log=log.append)
    assert len(rebuilt) == 9
    assert entries(path) == [".lock", "CURRENT", rebuilt.generation]
    if mode == "docs":
        assert any("left by an interrupted build" in m for m in log), log


def test_sigterm_mid_build_removes_its_temporary_files(tmp_path):
    path = tmp_path / "idx"
    before = snapshot(build_index(wing_docs(), path, BM25))
    marker = tmp_path / "marker"
    proc = run_script(tmp_path, BLOCKING_BUILD, str(path), str(marker), str(tmp_path / "no"),
                      "docs")
    wait_for(marker, proc)
    assert any(n.startswith(".tmp-") for n in entries(path))
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert (f"INTERRUPTED building the index at {path} was interrupted by SIGTERM; its "
            f"temporary files were removed and the previous index (if any) is unchanged") in out
    assert "HANDLER True" in out  # the previous (default) handler is back
    assert entries(path) == [".lock", "CURRENT", Index(path).generation]
    assert snapshot(Index(path)) == before


def test_sigterm_into_a_new_directory_leaves_nothing(tmp_path):
    path = tmp_path / "a" / "b" / "idx"
    marker = tmp_path / "marker"
    proc = run_script(tmp_path, BLOCKING_BUILD, str(path), str(marker), str(tmp_path / "no"),
                      "docs")
    wait_for(marker, proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert not (tmp_path / "a").exists()


def test_sigterm_handler_is_restored_in_process(tmp_path):
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        def docs():
            yield from wing_docs(5)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises during this sleep
            yield Document("never", "reached")

        with pytest.raises(IndexBuildInterrupted, match="interrupted by SIGTERM"):
            build_index(docs(), tmp_path / "x" / "idx", BM25)
        assert not received  # our handler took it, not the test's
        assert not (tmp_path / "x").exists()
        os.kill(os.getpid(), signal.SIGTERM)
        assert received == [signal.SIGTERM]  # the test's handler is back
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_failed_build_removes_only_what_it_created(tmp_path):
    from intentrank.data.corpus import iter_corpus

    src = tmp_path / "corpus.jsonl"
    src.write_text('{"_id": "1", "text": "fine"}\n{"_id": "2", "text": "broken\n')
    with pytest.raises(IntentrankError, match="malformed JSON"):
        build_index(iter_corpus(src), tmp_path / "new" / "deep" / "idx", BM25)
    assert entries(tmp_path) == ["corpus.jsonl"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no documents"):
        build_index([], empty, BM25)
    assert empty.is_dir() and entries(empty) == []  # existed before: kept, and left empty


def test_foreign_directory_and_file_are_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(IndexMismatchError, match="is not an intentrank index"):
            build_index(wing_docs(), tmp_path, BM25, overwrite=overwrite)
    assert entries(tmp_path) == ["notes.txt"]
    with pytest.raises(IndexMismatchError, match="is not a directory"):
        build_index(wing_docs(), tmp_path / "notes.txt", BM25)
    with pytest.raises(IndexNotFoundError, match="is not an intentrank index"):
        Index(tmp_path)
    assert not Index.exists(tmp_path) and not Index.exists(tmp_path / "nothing")


# -- corruption ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def full_index(cranfield, tmp_path_factory) -> Path:
    """A small index with every leg (30 Cranfield abstracts)."""
    docs = [d for _, d in zip(range(30), cranfield.corpus(), strict=False)]
    path = tmp_path_factory.mktemp("full") / "idx"
    build_index(docs, path).close()
    return path


FILE_KINDS = {
    "manifest": "manifest.json",
    "ids": "ids.json",
    "offsets": "doc_offsets.npy",
    "docs": "docs.jsonl",
    "bm25": "bm25/params.index.json",
    "vectors": "dense/embeddings.npy",
    "tfidf-matrix": "tfidf/matrix.npz",
    "tfidf-vectorizer": "tfidf/vectorizer.pkl",
    "graph-entities": "graph/entities.json",
    "graph-pagerank": "graph/pagerank.npy",
    "graph-edges": "graph/edges.npy",
}


def damaged_copy(full_index: Path, tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "idx"
    shutil.copytree(full_index, path)
    return path, path / (path / "CURRENT").read_text().strip()


@pytest.mark.parametrize("damage", ["truncate", "delete"])
@pytest.mark.parametrize("kind", sorted(FILE_KINDS))
def test_damaged_file_is_named_and_overwrite_rebuilds(full_index, tmp_path, kind, damage):
    path, gen = damaged_copy(full_index, tmp_path)
    target = gen / FILE_KINDS[kind]
    assert target.is_file(), sorted(p.relative_to(gen).as_posix() for p in gen.rglob("*"))
    size = target.stat().st_size
    shown = re.escape(str(target))
    if damage == "truncate":
        with open(target, "r+b") as fh:
            fh.truncate(size // 2)
        expected = (rf"{shown} cannot be parsed \(.+\)" if kind == "manifest"
                    else rf"{shown} is truncated \({size // 2} of {size} bytes\)")
    else:
        target.unlink()
        expected = rf"{shown} is missing"
    expected += rf"; rebuild with `intentrank index SRC {re.escape(str(path))} --overwrite`"
    with pytest.raises(IndexCorruptError, match=expected):
        Index(path)
    with pytest.raises(IndexCorruptError, match=expected):  # a build needs --overwrite
        build_index(wing_docs(), path, BM25)
    assert Index.exists(path)
    rebuilt = build_index(wing_docs(), path, BM25, overwrite=True)
    assert len(rebuilt) == 30 and rebuilt.verify()["files"] > 3
    assert entries(path) == [".lock", "CURRENT", rebuilt.generation]


@pytest.mark.parametrize("kind", ["vectors", "docs", "tfidf-vectorizer", "graph-pagerank"])
def test_same_size_damage_is_found_by_verify(full_index, tmp_path, kind):
    path, gen = damaged_copy(full_index, tmp_path)
    target = gen / FILE_KINDS[kind]
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF
    target.write_bytes(bytes(data))
    index = Index(path)  # the size check at opening is cheap and cannot see this
    with pytest.raises(IndexCorruptError,
                       match=rf"{re.escape(str(target))} does not match its sha256"):
        index.verify()


def test_unreadable_leg_file_of_right_size_is_a_named_error(full_index, tmp_path):
    path, gen = damaged_copy(full_index, tmp_path)
    target = gen / "tfidf" / "vectorizer.pkl"
    target.write_bytes(b"\0" * target.stat().st_size)
    index = Index(path)
    with pytest.raises(IndexCorruptError,
                       match=rf"{re.escape(str(target))} cannot be read \(Unpickling"):
        index.search_tfidf(["wing"], 3)
    ids = gen / "ids.json"
    ids.write_bytes(b"x" * ids.stat().st_size)
    with Index(path) as reopened, pytest.raises(  # ids are read when first asked for
            IndexCorruptError, match=rf"{re.escape(str(ids))} cannot be read \(JSONDecodeError"):
        reopened.ids  # noqa: B018


@pytest.mark.parametrize("content,expected", [
    (None, r"CURRENT is missing, so .* holds no complete index"),
    (b"", r"CURRENT is empty"),
    (b"\x00garbage\xff", r"CURRENT does not name a generation"),
    (b"gen-20000101T000000-deadbeef\n", r"CURRENT names gen-20000101T000000-deadbeef, which "
                                        r"does not exist"),
])
def test_damaged_current_is_named_and_overwrite_rebuilds(full_index, tmp_path, content,
                                                         expected):
    path, _ = damaged_copy(full_index, tmp_path)
    if content is None:
        (path / "CURRENT").unlink()
    else:
        (path / "CURRENT").write_bytes(content)
    with pytest.raises(IndexCorruptError, match=expected):
        Index(path)
    rebuilt = build_index(wing_docs(), path, BM25, overwrite=True)
    assert len(rebuilt) == 30
    assert entries(path) == [".lock", "CURRENT", rebuilt.generation]


def test_manifest_that_is_not_an_index_manifest(full_index, tmp_path):
    path, gen = damaged_copy(full_index, tmp_path)
    manifest = json.loads((gen / "manifest.json").read_text())
    del manifest["files"]
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptError, match=r"manifest.json lacks \['files'\]"):
        Index(path)
    (gen / "manifest.json").write_text("[1, 2]")
    with pytest.raises(IndexCorruptError, match="manifest.json is not a JSON object"):
        Index(path)


def test_old_format_index_asks_for_a_rebuild(tmp_path):
    path = tmp_path / "old"
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"format": 1, "settings": {}}))
    (path / "docs.jsonl").write_text("{}\n")
    (path / "bm25").mkdir()
    assert Index.exists(path)
    with pytest.raises(IndexFormatError, match=r"older intentrank \(index format 1.*--overwrite"):
        Index(path)
    with pytest.raises(IndexFormatError, match="--overwrite"):
        build_index(wing_docs(), path, BM25)
    rebuilt = build_index(wing_docs(), path, BM25, overwrite=True)
    assert entries(path) == [".lock", "CURRENT", rebuilt.generation]  # old files removed


def test_an_index_from_before_dense_precision_reads_as_fp32(full_index, tmp_path):
    """Indexes built before ``dense.precision`` existed hold torch fp32 passage vectors."""
    assert Index(full_index).settings.dense.precision == "int8"  # today's default
    path, gen = damaged_copy(full_index, tmp_path)
    manifest = json.loads((gen / "manifest.json").read_text())
    del manifest["settings"]["dense"]["precision"]
    (gen / "manifest.json").write_text(json.dumps(manifest))
    old = Index(path)
    assert old.settings.dense.precision == "fp32"
    assert old.settings.differences(IndexSettings()) == ["dense.precision: 'fp32' != 'int8'"]


def test_a_generation_directory_is_not_an_index(full_index):
    gen = full_index / (full_index / "CURRENT").read_text().strip()
    with pytest.raises(IndexNotFoundError, match=rf"is one generation inside the index "
                                                 rf"{re.escape(str(full_index))}; open"):
        Index(gen)
    assert not Index.exists(gen) and Index.exists(full_index)


def test_other_format_version_in_manifest(full_index, tmp_path):
    path, gen = damaged_copy(full_index, tmp_path)
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["format"] = 99
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="index format 99 is not supported"):
        Index(path)


# -- embedding cache ---------------------------------------------------------------------------
def test_garbage_embedding_cache_is_replaced_with_a_warning(tmp_path):
    path = tmp_path / "embeddings.sqlite"
    path.write_bytes(os.urandom(4096))
    with pytest.warns(EmbeddingCacheWarning, match=r"was damaged .* moved it to"):
        cache = EmbeddingCache(path)
    assert cache.enabled and (tmp_path / "embeddings.sqlite.corrupt").exists()
    vecs = cache.encode("m", ["a", "b"], lambda texts: np.ones((len(texts), 3)))
    assert vecs.shape == (2, 3) and cache.misses == 2
    again = EmbeddingCache(path)
    again.encode("m", ["a"], lambda texts: pytest.fail("should be cached"))
    assert again.hits == 1


def test_unusable_embedding_cache_is_skipped_with_a_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(EmbeddingCacheWarning, match="going on without the embedding cache"):
        cache = EmbeddingCache(blocker / "embeddings.sqlite")
    assert not cache.enabled
    assert cache.encode("m", ["a"], lambda t: np.ones((1, 2))).shape == (1, 2)


def test_build_goes_on_over_a_garbage_embedding_cache(cranfield, tmp_path, monkeypatch):
    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "embeddings.sqlite").write_bytes(b"\x13garbage" * 1000)
    docs = [d for _, d in zip(range(5), cranfield.corpus(), strict=False)]
    log: list[str] = []
    with pytest.warns(EmbeddingCacheWarning, match="was damaged"):
        index = build_index(docs, tmp_path / "idx", IndexSettings(legs=("dense",)),
                            log=log.append)
    assert index.embeddings.shape == (5, 384)
    assert any("embedding cache" in m for m in log)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = build_index(docs, tmp_path / "idx2", IndexSettings(legs=("dense",)))
    assert not [w for w in caught if w.category is EmbeddingCacheWarning]  # the new one is fine
    assert again.manifest["stats"]["dense"] == {"cache_hits": 5, "encoded": 0}
    fp32 = IndexSettings(legs=("dense",), dense=DenseSettings(precision="fp32"))
    other = build_index(docs, tmp_path / "idx3", fp32)  # other vectors: not from the cache
    assert other.manifest["stats"]["dense"] == {"cache_hits": 0, "encoded": 5}
    cosines = (other.embeddings * again.embeddings).sum(axis=1)
    assert cosines.min() > 0.98  # torch fp32 against the int8 export, one per passage


# -- huge texts: memory bounded by the model's input length ----------------------------------
def test_clip_text_keeps_what_the_tokenizer_keeps():
    from intentrank.models.inputs import MAX_CHARS_PER_TOKEN, clip_text

    assert clip_text("short text", 256) == "short text"
    words = " ".join(f"w{i}" for i in range(1000))
    assert clip_text(words, 256) == " ".join(f"w{i}" for i in range(256))
    assert len(clip_text("x" * 10_000_000, 256)) == 256 * MAX_CHARS_PER_TOKEN
    assert len(clip_text(" " * 10_000_000 + "a", 256)) == 256 * MAX_CHARS_PER_TOKEN


@pytest.fixture(scope="module")
def long_scifact_texts(data_dir) -> list[str]:
    """SciFact abstracts, the 24 longest (all over 256 words) and 8 ordinary ones."""
    from intentrank.data.dataset import load_dataset

    texts = [d.full_text() for d in load_dataset(data_dir / "scifact").corpus()]
    by_len = sorted(texts, key=len)
    picked = by_len[-24:] + by_len[len(by_len) // 2:len(by_len) // 2 + 8]
    assert sum(len(t.split()) > 256 for t in picked) >= 24
    return picked


def test_clipping_does_not_change_sentence_transformer_embeddings(long_scifact_texts):
    from intentrank.models.embedder import load_embedder

    emb = load_embedder("minilm", precision="fp32")  # passages through torch
    raw = emb.model.encode(long_scifact_texts, batch_size=1, normalize_embeddings=True,
                           convert_to_numpy=True)
    ours = emb.encode_passages(long_scifact_texts, batch_size=1)
    assert np.array_equal(ours, raw)  # bit-identical, one text at a time
    batched = emb.encode_passages(long_scifact_texts, batch_size=16)
    assert np.abs(batched - raw).max() <= 1e-6


def test_clipped_pairs_tokenize_like_the_whole_pairs(long_scifact_texts):
    """The cross-encoder cuts both sides of a pair; with longest_first truncation the
    model still sees exactly the same tokens."""
    from intentrank.models.cross_encoder import _clip_pairs
    from intentrank.models.inputs import minilm_path
    from intentrank.models.onnx_embedder import load_tokenizer

    for max_length in (64, 256):
        tok = load_tokenizer(minilm_path(), max_length)
        query = "what causes " * 100  # a long query too: both sides get truncated
        pairs = [(q, p) for p in long_scifact_texts for q in ("short query", query)]
        clipped = _clip_pairs(pairs, max_length)
        assert any(len(c[1]) < len(p[1]) for c, p in zip(clipped, pairs, strict=True))
        whole = tok.encode_batch([tuple(p) for p in pairs])
        cut = tok.encode_batch([tuple(p) for p in clipped])
        assert [e.ids for e in cut] == [e.ids for e in whole]


def test_torch_cross_encoder_clips_before_tokenizing(tmp_path, long_scifact_texts):
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from intentrank.models.cross_encoder import TorchCrossEncoder
    from intentrank.models.inputs import minilm_path

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(minilm_path())
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, num_labels=1,
                        max_position_embeddings=512)
    BertForSequenceClassification(config).save_pretrained(tmp_path / "ce")
    tok.save_pretrained(tmp_path / "ce")
    ce = TorchCrossEncoder(str(tmp_path / "ce"), max_length=128)
    pairs = [("boundary layer", t) for t in long_scifact_texts[:6]]
    raw = ce.model.predict([list(p) for p in pairs], batch_size=1, convert_to_numpy=True)
    assert np.allclose(ce.predict(pairs, batch_size=1), raw.reshape(-1), atol=1e-6)
    seen: list[int] = []
    real = ce.model.predict
    ce.model.predict = lambda pairs, **kw: seen.extend(len(p[1]) for p in pairs) or real(
        pairs, **kw)
    ce.predict([("q", "word " * 2_000_000)])
    assert seen and max(seen) < 128 * 64


MEMORY_PROBE = """
    import resource, sys
    from intentrank.models.embedder import load_embedder
    text = ("boundary layer transition at supersonic speeds " * 250_000)[:10_000_000]
    for backend in ("onnx", "sentence-transformers"):
        emb = load_embedder("minilm", backend)
        emb.encode_passages(["warm up"])
        emb.encode_queries(["warm up"])
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        vec = emb.encode_passages([text])
        q = emb.encode_queries([text])
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(backend, (after - before) // 1024, vec.shape, q.shape, flush=True)
"""


def test_ten_megabyte_text_encodes_in_bounded_memory(tmp_path):
    """Before the fix each backend's peak grew by about 1 GB for this text."""
    proc = run_script(tmp_path, MEMORY_PROBE)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    growth = {line.split()[0]: int(line.split()[1]) for line in out.strip().splitlines()}
    assert set(growth) == {"onnx", "sentence-transformers"}
    assert all(mib < 100 for mib in growth.values()), growth


# -- settings and k -------------------------------------------------------------------------
@pytest.mark.parametrize("make,message", [
    (lambda: BM25Settings(k1=-0.1), "bm25.k1 must be >= 0"),
    (lambda: BM25Settings(k1=float("nan")), "bm25.k1 must be a finite number"),
    (lambda: BM25Settings(b=1.2), "bm25.b must be between 0 and 1"),
    (lambda: BM25Settings(b=-0.5), "bm25.b must be between 0 and 1"),
    (lambda: BM25Settings(method="okapi"), "bm25.method 'okapi' is not one of"),
    (lambda: BM25Settings(stemmer="klingon"), "unknown bm25.stemmer language 'klingon'"),
    (lambda: BM25Settings(stopwords="elvish"), "unknown bm25.stopwords list 'elvish'"),
    (lambda: IndexSettings(legs=()), "legs is empty"),
    (lambda: IndexSettings(legs=("bm25", "dense", "bm25")), r"duplicate index legs \['bm25'\]"),
    (lambda: IndexSettings(legs=("bm25", "splade")), r"unknown index legs \['splade'\]"),
    (lambda: IndexSettings(legs="bm25"), "legs must be a tuple"),
    (lambda: IndexSettings(chunk_size=-5), "chunk_size must be an integer >= 0"),
    (lambda: IndexSettings(chunk_size=100, chunk_overlap=100), "chunk_overlap must be smaller"),
    (lambda: IndexSettings(chunk_size=100, chunk_overlap=-1), "chunk_overlap must be an "
                                                               "integer >= 0"),
    (lambda: DenseSettings(batch_size=0), "dense.batch_size must be an integer >= 1"),
    (lambda: DenseSettings(backend="tensorrt"), "unknown dense.backend 'tensorrt'"),
    (lambda: DenseSettings(precision="int4"), r"unknown dense.precision 'int4'; use one of "
                                              r"\['int8', 'fp32'\]"),
    (lambda: DenseSettings(backend="onnx", precision="fp32"), "runs the packaged int8 model "
                                                              "only; for fp32 passages use"),
    (lambda: TfidfSettings(ngram_max=0), "tfidf.ngram_max must be an integer >= 1"),
    (lambda: GraphSettings(damping=1.0), "graph.damping must be between 0 and 1"),
])
def test_invalid_settings_are_refused_before_any_work(make, message):
    with pytest.raises(IndexSettingsError, match=message) as info:
        make()
    assert isinstance(info.value, ValueError) and isinstance(info.value, IntentrankError)
    assert str(info.value).startswith("invalid index settings: ")


def test_valid_settings_still_accepted():
    assert IndexSettings(legs=["bm25", "dense"]).legs == ("bm25", "dense")
    assert BM25Settings(stemmer=None, stopwords=None, k1=0, b=0).b == 0
    assert BM25Settings(stopwords="german", stemmer="german").stopwords == "german"
    s = IndexSettings(chunk_size=60, chunk_overlap=10)
    assert IndexSettings.from_dict(s.to_dict()) == s


@pytest.mark.parametrize("k", [0, -1, 2.5, None, True])
def test_search_with_k_below_one_is_an_error(tmp_path, k):
    index = build_index(wing_docs(), tmp_path / "idx", LEXICAL)
    for search in (index.search_bm25, index.search_tfidf, index.search_graph,
                   index.search_dense):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            search(["wing"], k)
    assert index.search_bm25(["wing"], 1000)[0].rows.size == 30  # k above n is fine


# -- the corpus checks the CLI uses ------------------------------------------------------------
def test_corpus_sha256_matches_the_build_and_writes_nothing(cranfield, tmp_path):
    docs = [d for _, d in zip(range(40), cranfield.corpus(), strict=False)]
    for settings in (BM25, IndexSettings(legs=("bm25",), chunk_size=60, chunk_overlap=10)):
        path = tmp_path / f"idx{settings.chunk_size}"
        built = build_index(docs, path, settings)
        before = entries(tmp_path)
        assert corpus_sha256(iter(docs), settings) == built.corpus_sha256
        assert entries(tmp_path) == before
    assert corpus_sha256(docs, BM25) != corpus_sha256(docs[:-1], BM25)


def test_open_or_build(cranfield, tmp_path):
    docs = [d for _, d in zip(range(40), cranfield.corpus(), strict=False)]
    chunked = IndexSettings(legs=("bm25",), chunk_size=60, chunk_overlap=10)
    path = tmp_path / "idx"
    calls: list[int] = []

    def corpus():
        calls.append(1)
        return iter(docs)

    assert not Index.exists(path)
    built = open_or_build(corpus, path, chunked)
    assert Index.exists(path) and len(built) > 40 and calls == [1]
    reopened = open_or_build(corpus, path)  # hashed with the index's own (chunked) settings
    assert reopened.generation == built.generation and calls == [1, 1]
    changed = [*docs[:-1], Document(docs[-1].id, docs[-1].text + " edited")]
    shown = re.escape(str(path))
    with pytest.raises(IndexMismatchError, match=rf"{shown} was built from another corpus than "
                                                 rf"cranfield .*: rebuild with `intentrank "
                                                 rf"index cranfield {shown} --overwrite`"):
        open_or_build(changed, path, source="cranfield")
    assert Index(path).generation == built.generation  # nothing was rebuilt


def test_a_corpus_without_any_bm25_term_is_a_clear_error(tmp_path) -> None:
    from intentrank.errors import DataError

    docs = [Document("a", "the and of"), Document("b", "")]
    with pytest.raises(DataError, match="no document has a BM25 term"):
        build_index(docs, tmp_path / "idx", IndexSettings(legs=("bm25",)))
    assert not (tmp_path / "idx").exists()


def test_a_retrained_model_in_the_same_directory_gets_new_cache_keys(tmp_path):
    """The embedding cache keys a local model by its weights, not only its path: a model
    retrained into the same directory must not reuse the old model's vectors."""
    from intentrank.index.embedding_cache import model_key

    model = tmp_path / "my-encoder"
    (model / "sub").mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights v1")
    (model / "config.json").write_text("{}")
    first = model_key(str(model))
    (model / "config.json").write_text('{"note": "not a weight file"}')
    assert model_key(str(model)) == first
    (model / "model.safetensors").write_bytes(b"weights v2")
    assert model_key(str(model)) != first and model_key(str(model)).startswith(str(model))
    assert model_key("minilm") == "minilm"  # a bundled or hub name is its own key
