"""Deletes as tombstones (intentrank.index.tombstones): a delete links the live generation's
files and lists the dead rows; every leg of the result equals a fresh build of the remaining
documents; deletes merge into a compact generation when the dead rows pile up; readers keep
their generation. Real SciFact abstracts."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
from test_index_update import (
    CHUNKED,
    LEXICAL,
    QUERIES,
    abstracts_with_years,
    answers,
    assert_same_as_fresh,
)

from intentrank.index import IndexSettings, build_index
from intentrank.index.settings import AnnSettings, DenseSettings
from intentrank.index.store import Index
from intentrank.index.tombstones import DELETED_FILE, MERGE_DELETED_SHARE
from intentrank.index.update import delete, merge, sync, upsert


@pytest.fixture(scope="module")
def scifact():
    return abstracts_with_years()


@pytest.fixture()
def built(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:100], path, LEXICAL).close()
    return path


def test_a_delete_links_the_files_and_lists_the_dead_rows(scifact, built, tmp_path):
    with Index(built) as before:
        inode = os.stat(before.gen_dir / "docs.jsonl").st_ino
        terms = os.stat(before.gen_dir / "terms" / "bm25.npz").st_ino
    stats = delete(built, [scifact[3].id, scifact[50].id])
    assert (stats.deleted, stats.tombstones, stats.merged) == (2, 2, False)
    assert set(stats.timings) == {"commit"}
    with Index(built) as index:
        assert os.stat(index.gen_dir / "docs.jsonl").st_ino == inode
        assert os.stat(index.gen_dir / "terms" / "bm25.npz").st_ino == terms
        assert np.load(index.gen_dir / DELETED_FILE).tolist() == [3, 50]
        assert (len(index), index.rows_deleted) == (98, 2)
        assert scifact[3].id not in index.row_of and index.ids[3] == scifact[4].id
        assert index.doc(index.ids[49]) == scifact[51]
        assert index.verify()["files"] > 5
    assert_same_as_fresh(built, tmp_path, LEXICAL)


def test_tombstones_accumulate_then_merge_past_the_share(scifact, built, tmp_path):
    ids = [d.id for d in scifact[:100]]
    first = delete(built, ids[10:10 + int(MERGE_DELETED_SHARE * 100) - 5])
    assert first.tombstones == 15 and not first.merged
    second = delete(built, ids[60:64])  # 19 dead of 100: still tombstones
    assert second.tombstones == 19
    assert_same_as_fresh(built, tmp_path, LEXICAL)
    third = delete(built, ids[70:72])  # 21 of 100: past the share, a compact generation
    assert third.merged and third.tombstones == 0
    with Index(built) as index:
        assert index.rows_deleted == 0 and not (index.gen_dir / DELETED_FILE).exists()
        assert len(index) == 79
    assert_same_as_fresh(built, tmp_path, LEXICAL)


def test_merge_and_later_updates_write_a_compact_generation(scifact, built, tmp_path):
    delete(built, [scifact[5].id])
    merged = merge(built)
    assert merged.passages == 99
    with Index(built) as index:
        assert index.rows_deleted == 0
    assert merge(built).generation == merged.generation  # nothing to merge: nothing written
    delete(built, [scifact[6].id, scifact[7].id])
    changed = scifact[8].__class__(**{**scifact[8].__dict__, "text": "bone fractures"})
    stats = upsert(built, [changed, *scifact[100:103]])
    assert (stats.added, stats.replaced, stats.encoded) == (3, 1, 4)
    with Index(built) as index:  # one new segment; the replaced row deleted in the first
        assert len(index) == 100 and index.rows_deleted == 3
        assert [(e.rows, e.deleted) for e in index.segments] == [(99, 3), (4, 0)]
    assert_same_as_fresh(built, tmp_path, LEXICAL)
    assert merge(built).merged
    with Index(built) as index:
        assert index.flat and index.rows_deleted == 0 and len(index.segments) == 1
    assert_same_as_fresh(built, tmp_path, LEXICAL)
    delete(built, [scifact[20].id])
    sync(built, [*scifact[:5], *scifact[30:40]])
    assert_same_as_fresh(built, tmp_path, LEXICAL)


def test_filtered_search_and_delete_by_filter_on_tombstones(scifact, built, tmp_path):
    delete(built, filter="year = 2003")  # 5 of 100
    delete(built, [scifact[0].id])
    with Index(built) as index:
        assert index.rows_deleted == 6 and 2003 not in {
            d.metadata["year"] for d in index.documents()}
        allow = index.allowed_rows("year >= 2010")
        full = index.search_bm25(QUERIES, len(index))
        got = index.search_bm25(QUERIES, 5, allow=allow)
        for f, g in zip(full, got, strict=True):
            assert g.rows.tolist() == f.rows[allow[f.rows]][:5].tolist()
    assert_same_as_fresh(built, tmp_path, LEXICAL)


def test_a_reader_keeps_its_generation_across_a_delete(scifact, built):
    reader = Index(built)
    before = answers(reader, LEXICAL.legs)
    delete(built, [scifact[1].id, scifact[2].id])
    assert answers(reader, LEXICAL.legs) == before
    with Index(built) as index:
        assert len(index) == 98 and index.generation != reader.generation
    reader.close()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["exact", "hnsw"])
def test_dense_leg_skips_the_dead_rows(scifact, tmp_path, method):
    settings = IndexSettings(dense=DenseSettings(ann=AnnSettings(method)))
    path = tmp_path / "idx"
    build_index(scifact[:120], path, settings).close()
    gone = [scifact[i].id for i in (0, 7, 33, 34, 90)]
    delete(path, gone)
    with Index(path) as index:
        assert index.rows_deleted == 5 and index.embeddings.shape == (115, 384)
        vecs = np.asarray(index.embeddings)
        assert np.array_equal(vecs[7], index.embeddings[7])
        top = index.search_dense(QUERIES, 10)
        assert all(len(h.rows) == 10 and ((h.rows >= 0) & (h.rows < 115)).all() for h in top)
        if method == "exact":  # every live row, none dead
            assert all(sorted(h.rows.tolist()) == list(range(115))
                       for h in index.search_dense(QUERIES, 120))
    if method == "exact":
        assert_same_as_fresh(path, tmp_path, settings)


def test_cli_delete_says_tombstones_and_merge_compacts(scifact, built):
    from typer.testing import CliRunner

    from intentrank.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["delete", str(built), scifact[4].id, scifact[9].id])
    assert res.exit_code == 0 and "2 deleted (2 dead rows kept until a merge)" in res.output
    res = runner.invoke(app, ["merge", str(built), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output[res.output.index("{"):])["passages"] == 98
    with Index(built) as index:
        assert index.rows_deleted == 0 and len(index) == 98
    not_an_index = built.parent / "empty"
    not_an_index.mkdir()
    res = runner.invoke(app, ["merge", str(not_an_index)])
    assert res.exit_code != 0 and "holds no index to update" in res.output


def test_a_damaged_list_of_dead_rows_is_named(scifact, built):
    from intentrank.index.errors import IndexCorruptError

    delete(built, [scifact[3].id])
    with Index(built) as index:
        dead = index.gen_dir / DELETED_FILE
    os.unlink(dead)  # a hard link of nothing else: write a damaged copy in its place
    dead.write_bytes(b"\x93NUMPY damaged")
    with pytest.raises(IndexCorruptError, match=DELETED_FILE), Index(built) as index:
        index.verify()


BLOCKING_DELETE = """
    import pathlib, sys, time
    import intentrank.index.writer as writer
    from intentrank.index import layout
    from intentrank.index.update import delete

    path, marker, point, doc_id = sys.argv[1:5]

    def pausing(real):
        def wrapped(*args, **kwargs):
            pathlib.Path(marker).touch()
            while True:
                time.sleep(1)
        return wrapped

    if point == "links":  # files linked, the dead rows and the manifest not yet written
        writer.np.save = pausing(writer.np.save)
    else:  # the generation written, CURRENT not yet replaced
        layout.write_current = pausing(layout.write_current)
    delete(path, [doc_id])
"""


@pytest.mark.parametrize("point", ["links", "current"])
def test_kill_9_mid_delete_leaves_the_old_generation_intact(scifact, built, tmp_path, point):
    from test_index_robustness import entries, run_script, wait_for

    with Index(built) as index:
        before = answers(index, LEXICAL.legs)
    marker = tmp_path / "marker"
    proc = run_script(tmp_path, BLOCKING_DELETE, str(built), str(marker), point, scifact[7].id)
    wait_for(marker, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    with Index(built) as index:  # the old generation: complete, unchanged, verified
        assert index.verify()["files"] > 5 and len(index) == 100
        assert answers(index, LEXICAL.legs) == before
    assert delete(built, [scifact[7].id]).tombstones == 1  # the next writer cleans up
    with Index(built) as index:
        assert entries(built) == [".lock", "CURRENT", index.generation]
        assert index.verify()["files"] > 5
    assert_same_as_fresh(built, tmp_path, LEXICAL)


def test_parents_come_from_parents_json_or_from_the_lines_of_an_older_index(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:12], path, CHUNKED).close()
    with Index(path) as index:
        parents = index.parent_of_rows
        assert json.loads((index.gen_dir / "parents.json").read_text()) == parents
        gen = index.gen_dir
    assert parents[0] == scifact[0].id and len(set(parents)) == 12
    manifest = json.loads((gen / "manifest.json").read_text())  # as an older build left it
    del manifest["files"]["parents.json"]
    (gen / "manifest.json").write_text(json.dumps(manifest))
    (gen / "parents.json").unlink()
    with Index(path) as index:
        assert index.parent_of_rows == parents
    assert delete(path, [scifact[3].id]).tombstones == parents.count(scifact[3].id)
    with Index(path) as index:
        assert index.parent_of_rows == [p for p in parents if p != scifact[3].id]
    assert_same_as_fresh(path, tmp_path, CHUNKED)
