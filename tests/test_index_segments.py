"""Segments (intentrank.index.segments) on real SciFact abstracts: adds pile up segments that
the tiered policy merges, a merge answers as the index before it did, readers keep their
commit across merges, the status command lists segments, and formats are never misread."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from test_index_update import LEXICAL, QUERIES, abstracts_with_years, assert_same_as_fresh

from intentrank.index import IndexSettings, build_index
from intentrank.index.errors import IndexFormatError
from intentrank.index.segments import (
    FLOOR_ROWS,
    MAX_MERGE_AT_ONCE,
    SEGMENTS_PER_TIER,
    SegmentEntry,
    merge_candidates,
)
from intentrank.index.settings import AnnSettings, DenseSettings
from intentrank.index.store import Index
from intentrank.index.update import delete, merge, merge_tiers, upsert


@pytest.fixture(scope="module")
def scifact():
    return abstracts_with_years()


def scores_by_id(index: Index, legs: tuple[str, ...]) -> dict:
    """Every leg's scores of every document it returns, by id (independent of row order)."""
    out = {}
    for leg in legs:
        hits = getattr(index, f"search_{leg}")(QUERIES, len(index))
        out[leg] = [dict(zip(index.id_array[h.rows].tolist(), h.scores.tolist(), strict=True))
                    for h in hits]
    return out


def assert_close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for leg in a:
        for x, y in zip(a[leg], b[leg], strict=True):
            assert x.keys() == y.keys(), leg
            np.testing.assert_allclose([x[k] for k in x], [y[k] for k in x], rtol=1e-5,
                                       atol=1e-6, err_msg=leg)


def test_the_tiered_policy_merges_the_smallest_of_a_crowded_tier():
    small = [SegmentEntry(f"segments/seg-{i}", 10 + i) for i in range(SEGMENTS_PER_TIER)]
    assert merge_candidates(small) is None  # a full tier, not over it
    big = SegmentEntry(".", 50 * FLOOR_ROWS)
    crowded = [big, *small, SegmentEntry("segments/seg-x", 5)]
    picked = merge_candidates(crowded)
    assert picked is not None and len(picked) == MAX_MERGE_AT_ONCE
    assert 0 not in picked and len(crowded) - 1 in picked  # the big one stays, the tiny goes
    assert merge_candidates([big] * (SEGMENTS_PER_TIER + 1)) is not None  # big ones too


def test_adds_write_segments_the_policy_merges_exactly(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:60], path, LEXICAL).close()
    with Index(path) as index:
        base_docs = os.stat(index.gen_dir / "docs.jsonl").st_ino
    for i in range(SEGMENTS_PER_TIER + 1):  # one more segment than a tier holds
        stats = upsert(path, scifact[60 + 3 * i:63 + 3 * i])
        assert stats.added == 3 and stats.encoded == 3
        with Index(path) as index:  # the first segment is never rewritten by an add
            assert os.stat(index.gen_dir / "docs.jsonl").st_ino == base_docs
            assert len(index.segments) == stats.segments <= SEGMENTS_PER_TIER
            assert stats.merged == (i == SEGMENTS_PER_TIER - 1)  # the 11th segment: a merge
    with Index(path) as index:
        assert [e.rows for e in index.segments][:1] == [60]
        assert len(index) == 60 + 3 * (SEGMENTS_PER_TIER + 1)
    assert_same_as_fresh(path, tmp_path, LEXICAL)


def test_a_merge_answers_as_the_index_before_it_and_readers_keep_theirs(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:50], path, LEXICAL).close()
    for i in range(4):
        upsert(path, scifact[50 + 5 * i:55 + 5 * i])
    delete(path, [scifact[3].id, scifact[52].id])
    reader = Index(path)
    before = scores_by_id(reader, LEXICAL.legs)
    assert len(reader.segments) == 5 and reader.rows_deleted == 2
    stats = merge(path)
    assert stats.merged and stats.segments == 1
    assert scores_by_id(reader, LEXICAL.legs) == before  # still its own commit
    with Index(path) as index:
        assert index.flat and len(index) == 68
        assert_close(scores_by_id(index, LEXICAL.legs), before)
    reader.close()
    assert_same_as_fresh(path, tmp_path, LEXICAL)
    assert not merge_tiers(path).merged  # one segment: nothing for the policy to do


def test_the_segments_command_lists_rows_deletes_and_bytes(scifact, tmp_path):
    from typer.testing import CliRunner

    from intentrank.cli import app

    path = tmp_path / "idx"
    build_index(scifact[:30], path, LEXICAL).close()
    upsert(path, scifact[30:34])
    delete(path, [scifact[1].id])
    runner = CliRunner()
    res = runner.invoke(app, ["segments", str(path), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["segments"]
    assert [(r["segment"], r["rows"], r["deleted"], r["live"]) for r in rows] == [
        ("base", 30, 1, 29), (rows[1]["segment"], 4, 0, 4)]
    assert rows[1]["segment"].startswith("seg-") and 0 < rows[1]["bytes"] < rows[0]["bytes"]
    res = runner.invoke(app, ["segments", str(path)])
    assert res.exit_code == 0 and "2 segment(s)" in res.output and "base" in res.output
    res = runner.invoke(app, ["merge", str(path), "--policy"])
    assert res.exit_code == 0, res.output  # nothing the policy wants: unchanged
    with Index(path) as index:
        assert len(index.segments) == 2


def test_an_older_format_reads_as_one_segment_and_a_newer_one_is_refused(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:20], path, LEXICAL).close()
    with Index(path) as index:
        manifest_file = index.gen_dir / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    assert manifest["format"] == 3 and "segments" not in manifest  # a build: one segment
    manifest_file.write_text(json.dumps({**manifest, "format": 2}))
    with Index(path) as index:  # format 2 (before segments): the same files, one segment
        assert len(index) == 20 and len(index.segments) == 1
    upsert(path, scifact[20:22])  # an update writes format 3
    with Index(path) as index:
        assert index.manifest["format"] == 3 and len(index.segments) == 2
        manifest_file = index.gen_dir / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest_file.write_text(json.dumps({**manifest, "format": 4}))
    with pytest.raises(IndexFormatError, match=r"index format 4 is not supported.*--overwrite"):
        Index(path)


@pytest.mark.slow
def test_ann_per_segment_with_small_segments_searched_exactly(scifact, tmp_path):
    settings = IndexSettings(legs=("dense",), dense=DenseSettings(ann=AnnSettings("hnsw")))
    path = tmp_path / "idx"
    build_index(scifact[:200], path, settings).close()
    upsert(path, scifact[200:230])
    with Index(path) as index:
        assert index._files.get("dense/ann.faiss") and len(index.segments) == 2
        assert index.ann[1] is None  # 30 rows: exact
        hits = index.search_dense(QUERIES, 10)
        exact = index.embeddings @ index.encode_queries(QUERIES).T
        for j, h in enumerate(hits):
            top = np.argsort(-exact[:, j], kind="stable")[:10]
            assert len(set(h.rows.tolist()) & set(top.tolist())) >= 9


BLOCKING_MERGE = """
    import pathlib, sys, time
    import intentrank.index.writer as writer
    from intentrank.index import layout
    from intentrank.index.update import merge

    path, marker, point = sys.argv[1:4]

    def pausing(real):
        def wrapped(*args, **kwargs):
            pathlib.Path(marker).touch()
            while True:
                time.sleep(1)
        return wrapped

    if point == "manifest":  # the merged segment written, its manifest not yet
        writer.write_manifest = pausing(writer.write_manifest)
    else:  # the generation written, CURRENT not yet replaced
        layout.write_current = pausing(layout.write_current)
    merge(path)
"""


@pytest.mark.parametrize("point", ["manifest", "current"])
def test_kill_9_mid_merge_leaves_the_segments_as_they_were(scifact, tmp_path, point):
    import signal

    from test_index_robustness import entries, run_script, wait_for

    path = tmp_path / "idx"
    build_index(scifact[:40], path, LEXICAL).close()
    upsert(path, scifact[40:44])
    delete(path, [scifact[2].id])
    with Index(path) as index:
        before = scores_by_id(index, LEXICAL.legs)
        generation = index.generation
    marker = tmp_path / "marker"
    proc = run_script(tmp_path, BLOCKING_MERGE, str(path), str(marker), point)
    wait_for(marker, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    with Index(path) as index:  # the commit before the merge: complete, verified
        assert index.generation == generation and len(index.segments) == 2
        assert index.verify()["files"] > 5
        assert scores_by_id(index, LEXICAL.legs) == before
    assert merge(path).segments == 1  # the next writer cleans up and merges
    with Index(path) as index:
        assert entries(path) == [".lock", "CURRENT", index.generation]
    assert_same_as_fresh(path, tmp_path, LEXICAL)


def test_a_filter_over_segments_scores_as_an_index_of_the_matching_documents(scifact, tmp_path):
    path = tmp_path / "idx"
    build_index(scifact[:50], path, LEXICAL).close()
    upsert(path, scifact[50:70])
    upsert(path, [scifact[60].__class__(**{**scifact[4].__dict__, "text": "insulin mice"})])
    delete(path, [scifact[7].id, scifact[55].id])
    with Index(path) as index:
        assert len(index.segments) == 3
        allow = index.allowed_rows("year >= 2010")
        matching = [d for d, keep in zip(index.documents(), allow, strict=True) if keep]
        got = {leg: [dict(zip(index.id_array[h.rows].tolist(), h.scores.tolist(),
                              strict=True))
                     for h in getattr(index, f"search_{leg}")(QUERIES, len(index), allow=allow)]
               for leg in LEXICAL.legs}
    with build_index(matching, tmp_path / "only", LEXICAL) as only:
        assert scores_by_id(only, LEXICAL.legs) == got
