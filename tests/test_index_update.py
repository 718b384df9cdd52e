"""Updates without a rebuild (intentrank.index.update): upsert, delete and sync on real SciFact
abstracts, each state compared with an index built from scratch on the final corpus (every
leg: same ids, ranks and scores bit for bit, same corpus hash); kill -9 at several points of an
update; a second writer; readers during an update."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_index_robustness import entries, run_script, wait_for

from intentrank.data.corpus import iter_corpus
from intentrank.errors import IntentrankError
from intentrank.index import IndexSettings, build_index
from intentrank.index.errors import IndexBusyError
from intentrank.index.store import Index
from intentrank.index.update import delete, merge, sync, upsert
from intentrank.types import Document

LEXICAL = IndexSettings(legs=("bm25", "tfidf", "graph"))
CHUNKED = IndexSettings(legs=("bm25", "tfidf"), chunk_size=60, chunk_overlap=10)  # parents
QUERIES = ["vitamin D and bone fractures", "stem cells in breast cancer",
           "gene expression of mice", "HIV infection 2009 trial", "insulin resistance obesity"]


@pytest.fixture(scope="module")
def scifact() -> list[Document]:
    return abstracts_with_years()


def abstracts_with_years() -> list[Document]:
    """SciFact's first 260 abstracts, each with a ``year``."""
    docs = []
    for doc in iter_corpus(DATA / "scifact" / "corpus.jsonl.gz"):
        docs.append(replace(doc, metadata={"year": 2000 + len(docs) % 20}))
        if len(docs) == 260:
            return docs
    return docs


def answers(index: Index, legs: tuple[str, ...]) -> dict:
    """Everything the index answers: ids, per-leg top 20 (ids and exact scores)."""
    out: dict = {"ids": list(index.ids), "docs": [index.doc_line(r) for r in range(len(index))]}
    for leg in legs:
        hits = getattr(index, f"search_{leg}")(QUERIES, 20)
        out[leg] = [(index.id_array[h.rows].tolist(), h.scores.tolist()) for h in hits]
    return out


def assert_same_as_fresh(path: Path, tmp: Path, settings: IndexSettings) -> None:
    with Index(path) as live:
        final = list(live.documents())
        got = answers(live, settings.legs)
        sha = live.corpus_sha256
        vectors = np.asarray(live.embeddings) if "dense" in settings.legs else None
    fresh = build_index(final, tmp / f"fresh-{len(list(tmp.iterdir()))}", settings)
    try:
        assert fresh.corpus_sha256 == sha
        assert answers(fresh, settings.legs) == got
        if vectors is not None:
            assert np.array_equal(np.asarray(fresh.embeddings), vectors)
    finally:
        fresh.close()


# -- the semantics, against a model of the corpus ----------------------------------------
def test_upsert_writes_one_segment_of_the_new_and_changed(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:40], path, LEXICAL).close()
    changed = replace(scifact[3], text=scifact[3].text + " vitamin D fractures")
    stats = upsert(path, [changed, scifact[4], *scifact[40:45]])
    assert (stats.added, stats.replaced, stats.unchanged, stats.deleted) == (5, 1, 1, 0)
    assert stats.encoded == 6 and stats.passages == 45
    with Index(path) as index:  # the changed one moved to the new segment, after the others
        assert index.ids == [d.id for d in (*scifact[:3], *scifact[4:40], scifact[3],
                                            *scifact[40:45])]
        assert index.doc(scifact[3].id).text.endswith("vitamin D fractures")
        assert index.manifest["update"]["replaced"] == 1
        assert [(e.rows, e.deleted) for e in index.segments] == [(40, 1), (6, 0)]
        new = index.gen_dir / index.segments[1].dir
        assert len((new / "docs.jsonl").read_bytes().splitlines()) == 6
    again = upsert(path, [changed])
    assert not again.changed and again.unchanged == 1  # nothing to write: same generation
    assert again.generation == stats.generation
    assert_same_as_fresh(path, tmp_path, LEXICAL)


def test_metadata_only_change_rewrites_the_line_but_reuses_leg_data(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:30], path, LEXICAL).close()
    stats = upsert(path, [replace(scifact[7], metadata={"year": 1999, "team": "bio"})])
    assert stats.replaced == 1 and stats.encoded == 0
    with Index(path) as index:
        assert index.doc(scifact[7].id).metadata == {"year": 1999, "team": "bio"}
    assert_same_as_fresh(path, tmp_path, LEXICAL)


def test_delete_by_id_and_parent(tmp_path, scifact):
    path = tmp_path / "idx"
    build_index(scifact[:20], path, CHUNKED).close()
    with Index(path) as index:
        passages = [i for i in index.ids if i.startswith(f"{scifact[2].id}#")]
    assert len(passages) > 1
    stats = delete(path, [scifact[2].id, scifact[5].id])  # a parent: all its passages go
    assert stats.deleted == 2
    with Index(path) as index:
        assert not [i for i in index.ids if i.split("#")[0] in (scifact[2].id, scifact[5].id)]
    with pytest.raises(IntentrankError, match="holds no document 'nope'"):
        delete(path, ["nope"])
    assert delete(path, ["nope"], missing_ok=True).deleted == 0
    assert_same_as_fresh(path, tmp_path, CHUNKED)


def test_sync_equals_a_build_of_the_new_corpus_order_included(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:50], path, LEXICAL).close()
    target = [scifact[i] for i in (*range(10, 30), *range(60, 70), *range(0, 5))]
    target[3] = replace(target[3], text="rewritten: insulin resistance and obesity")
    stats = sync(path, target)
    assert (stats.added, stats.deleted, stats.replaced, stats.unchanged) == (10, 25, 1, 24)
    assert stats.encoded == 11
    with Index(path) as index:  # unchanged rows stay, new and changed ones follow in order
        kept = [d.id for d in scifact[:50] if d.id in {t.id for t in target[4:]} | {
            t.id for t in target[:3]}]
        assert index.ids == kept + [target[3].id] + [d.id for d in target[20:30]]
        assert sorted(index.ids) == sorted(d.id for d in target)
    assert_same_as_fresh(path, tmp_path, LEXICAL)
    assert not sync(path, target).changed


def test_updates_refuse_what_they_cannot_do_exactly(scifact, tmp_path):
    with pytest.raises(IntentrankError, match="holds no index to update"):
        upsert(tmp_path / "none", scifact[:2])
    build_index(scifact[:5], tmp_path / "one", IndexSettings(legs=("bm25",))).close()
    with pytest.raises(IntentrankError, match="no documents"):
        delete(tmp_path / "one", [d.id for d in scifact[:5]])
    with pytest.raises(IntentrankError, match="duplicate document id"):
        upsert(tmp_path / "one", [scifact[6], scifact[6]])
    assert len(Index(tmp_path / "one")) == 5


# -- the property: any sequence of operations equals a fresh build -------------------------
OPS = st.lists(st.tuples(st.sampled_from(["add", "change", "meta", "delete", "sync",
                                          "merge"]),
                         st.integers(0, 10_000)), min_size=1, max_size=4)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, shards=st.sampled_from([1, 3]))
def test_random_update_sequences_equal_a_fresh_build(scifact, tmp_path_factory, ops, shards):
    """Unsharded or sharded (the fresh build then sharded alike)."""
    tmp = tmp_path_factory.mktemp("prop")
    path = tmp / "idx"
    pool = scifact[60:260]
    model = list(scifact[:60])  # the corpus the index should hold, in row order
    index_settings = replace(LEXICAL, shards=shards)
    build_index(model, path, index_settings).close()
    for op, n in ops:
        rng = np.random.default_rng(n)
        held = {d.id for d in model}
        if op == "add":
            new = [d for d in pool if d.id not in held][:1 + n % 7]
            upsert(path, new)
            model += new
        elif op in ("change", "meta"):
            i = int(rng.integers(len(model)))
            doc = model.pop(i)  # to the new segment, after every other row
            model.append(replace(doc, text=doc.text + " " + pool[n % len(pool)].text[:80])
                         if op == "change" else replace(doc, metadata={"year": n}))
            upsert(path, [model[-1]])
        elif op == "delete" and len(model) > 5:
            gone = {model[int(j)].id for j in rng.choice(len(model), 1 + n % 4, replace=False)}
            delete(path, sorted(gone))
            model = [d for d in model if d.id not in gone]
        elif op == "sync":
            both = model + [d for d in pool if d.id not in held][:n % 9]
            keep = rng.permutation(len(both))[:max(5, len(both) - n % 11)]
            target = [both[int(j)] for j in keep]
            sync(path, target)
            wanted = {d.id for d in target}
            stays = [d for d in model if d.id in wanted]  # unchanged: keep their rows
            model = stays + [d for d in target if d.id not in {s.id for s in stays}]
        elif op == "merge":
            merge(path)
        with Index(path) as index:
            assert [d.id for d in index.documents()] == [d.id for d in model]
            assert list(index.documents()) == model
    assert_same_as_fresh(path, tmp, index_settings)


@pytest.mark.slow
def test_dense_leg_encodes_only_new_and_changed_passages(scifact, tmp_path, monkeypatch):
    import intentrank.index.writer as update_module

    settings = IndexSettings()  # every leg, the default dense model
    path = tmp_path / "idx"
    build_index(scifact[:80], path, settings, embedding_cache=False).close()
    encoded: list[str] = []
    real = update_module.encode_passages

    def spy(texts, *args, **kwargs):
        encoded.extend(texts)
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(update_module, "encode_passages", spy)
    changed = replace(scifact[1], text="Vitamin D supplements and fractures in the elderly.")
    upsert(path, [changed, scifact[2], *scifact[80:84]])
    delete(path, [scifact[9].id])
    assert encoded == [d.full_text() for d in (changed, *scifact[80:84])]
    assert_same_as_fresh(path, tmp_path, settings)


# -- safety: kill -9, a second writer, readers ------------------------------------------------
BLOCKING_UPDATE = """
    import pathlib, sys, time
    import intentrank.index.build as build
    import intentrank.index.update as update
    import intentrank.index.writer as writer
    from intentrank.index import layout
    from intentrank.types import Document

    path, marker, go, point = sys.argv[1:5]

    def block():
        pathlib.Path(marker).touch()
        while not pathlib.Path(go).exists():
            time.sleep(0.02)

    def pausing(real):
        def wrapped(*args, **kwargs):
            block()
            return real(*args, **kwargs)
        return wrapped

    if point == "legs":
        writer.tfidf_rows = pausing(writer.tfidf_rows)
    elif point == "manifest":
        writer.write_commit_manifest = pausing(writer.write_commit_manifest)
    elif point == "current":
        layout.write_current = pausing(layout.write_current)
    elif point == "cleanup":
        build._remove_old = pausing(build._remove_old)
    docs = [Document(f"new{i}", f"insulin resistance in obese mice number {i}")
            for i in range(5)]
    stats = update.upsert(path, docs)
    print("DONE", stats.added, flush=True)
"""


@pytest.mark.parametrize("point,committed", [("legs", False), ("manifest", False),
                                             ("current", False), ("cleanup", True)])
def test_kill_9_mid_update_leaves_the_old_or_the_new_generation(scifact, tmp_path, point,
                                                                committed):
    path = tmp_path / "idx"
    build_index(scifact[:30], path, LEXICAL).close()
    with Index(path) as index:
        before = answers(index, LEXICAL.legs)
    marker, go = tmp_path / "marker", tmp_path / "go"
    proc = run_script(tmp_path, BLOCKING_UPDATE, str(path), str(marker), str(go), point)
    wait_for(marker, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with Index(path) as index:
        assert index.verify()["files"] > 5
        now = answers(index, LEXICAL.legs)
        assert len(index) == (35 if committed else 30)
    assert (now == before) is not committed
    stats = upsert(path, scifact[30:32])  # the next writer cleans up what the kill left
    assert stats.added == 2
    with Index(path) as index:
        assert entries(path) == [".lock", "CURRENT", index.generation]
    assert_same_as_fresh(path, tmp_path, LEXICAL)


def test_a_second_writer_fails_clearly_and_readers_keep_their_generation(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:30], path, LEXICAL).close()
    reader = Index(path)
    before = answers(reader, LEXICAL.legs)
    marker, go = tmp_path / "marker", tmp_path / "go"
    proc = run_script(tmp_path, BLOCKING_UPDATE, str(path), str(marker), str(go), "legs")
    try:
        wait_for(marker, proc)
        with pytest.raises(IndexBusyError, match=str(proc.pid)):
            upsert(path, scifact[40:41])
        with pytest.raises(IndexBusyError):
            build_index(scifact[:3], path, LEXICAL, overwrite=True)
        assert answers(reader, LEXICAL.legs) == before  # mid-update: the old generation
    finally:
        go.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "DONE 5" in out
    assert answers(reader, LEXICAL.legs) == before  # after the commit: still its own
    with Index(path) as fresh:
        assert len(fresh) == 35 and fresh.generation != reader.generation
    reader.close()


def test_an_index_built_before_term_rows_were_kept_updates_exactly(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:30], path, LEXICAL).close()
    with Index(path) as index:  # as an older build left it: no terms/ directory
        gen = index.gen_dir
    for name in ("bm25.npz", "bm25_vocab.json", "tfidf.npz", "tfidf_vocab.json"):
        (gen / "terms" / name).unlink()
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["files"] = {k: v for k, v in manifest["files"].items()
                         if not k.startswith("terms/")}
    (gen / "manifest.json").write_text(json.dumps(manifest))
    upsert(path, scifact[30:33])
    assert_same_as_fresh(path, tmp_path, LEXICAL)


# -- the command line ------------------------------------------------------------------------
def test_cli_add_delete_sync(scifact, tmp_path):
    from typer.testing import CliRunner

    from intentrank.cli import app

    def corpus_file(name: str, docs: list[Document]) -> str:
        file = tmp_path / name
        file.write_text("".join(json.dumps({"_id": d.id, "title": d.title, "text": d.text,
                                            **d.metadata}) + "\n" for d in docs))
        return str(file)

    runner = CliRunner()
    path = tmp_path / "idx"
    res = runner.invoke(app, ["index", corpus_file("a.jsonl", scifact[:20]), str(path),
                              "--legs", "bm25,tfidf"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["add", str(path), corpus_file("b.jsonl", scifact[18:25]),
                              "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.output[res.output.index("{"):])
    assert (stats["added"], stats["unchanged"], stats["passages"]) == (5, 2, 25)
    res = runner.invoke(app, ["delete", str(path), scifact[0].id, scifact[1].id])
    assert res.exit_code == 0 and "2 deleted" in res.output, res.output
    res = runner.invoke(app, ["delete", str(path), "nope"])
    assert res.exit_code == 2 and "error: " in res.output and "'nope'" in res.output
    res = runner.invoke(app, ["delete", str(path)])
    assert res.exit_code == 2 and "--filter" in res.output
    res = runner.invoke(app, ["sync", str(path), corpus_file("c.jsonl", scifact[30:40])])
    assert res.exit_code == 0 and "10 added" in res.output and "23 deleted" in res.output
    with Index(path) as index:
        assert index.ids == [d.id for d in scifact[30:40]]
        assert index.doc(scifact[31].id).metadata == {"year": 2011}
    assert_same_as_fresh(path, tmp_path, IndexSettings(legs=("bm25", "tfidf")))
