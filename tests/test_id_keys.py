"""Id keys (intentrank.index.id_keys) on real SciFact abstracts: an add looks up only the ids
it names (no segment's ids.json is read), and the rows found are those a scan of every id
finds, with hash collisions, deleted rows, chunked documents and segments written before id
keys."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_index_update import CHUNKED, LEXICAL, abstracts_with_years, assert_same_as_fresh

from intentrank.index import build_index, id_keys, segments
from intentrank.index.store import Index
from intentrank.index.update import delete, upsert


@pytest.fixture(scope="module")
def scifact():
    return abstracts_with_years()


def test_an_add_reads_no_segment_ids_and_answers_as_a_fresh_build(scifact, tmp_path,
                                                                  monkeypatch):
    path = tmp_path / "idx"
    build_index(scifact[:60], path, LEXICAL).close()
    upsert(path, scifact[60:80])  # a second segment to look in

    def no_ids(index):
        raise AssertionError("an add read every segment's ids.json")

    monkeypatch.setattr(segments, "segment_ids", no_ids)
    monkeypatch.setattr(id_keys, "segment_ids", no_ids)
    changed = replace(scifact[5], text=scifact[5].text + " Revised.")
    stats = upsert(path, [*scifact[80:90], changed, scifact[7], scifact[65]])
    assert (stats.added, stats.replaced, stats.unchanged) == (10, 1, 2)
    monkeypatch.undo()
    with Index(path) as index:
        assert index.doc(changed.id).text == changed.text
        assert index.ids[-1] == changed.id  # a changed document moves to the new segment
    assert_same_as_fresh(path, tmp_path, LEXICAL)


def _truth(index: Index, wanted: list[str]) -> tuple[dict, dict]:
    ids = {i: [r] for r, i in enumerate(index.ids) if i in wanted}
    units: dict[str, list[int]] = {}
    for r, (i, p) in enumerate(zip(index.ids, index.parent_of_rows, strict=True)):
        if (p or i) in wanted:
            units.setdefault(p or i, []).append(r)
    return ids, units


def _segmented(path, scifact) -> None:
    build_index(scifact[:40], path, CHUNKED).close()
    upsert(path, scifact[40:60])
    delete(path, [scifact[3].id, scifact[45].id])


@pytest.mark.parametrize("collide", [False, True])
def test_lookups_equal_a_scan_with_collisions_deletes_chunks_and_old_segments(
        scifact, tmp_path, monkeypatch, collide):
    path = tmp_path / "idx"
    if collide:  # every id and unit has the same key: the docs.jsonl lines decide
        monkeypatch.setattr(id_keys, "key_of", lambda text: 7)
    _segmented(path, scifact)
    with Index(path) as index:
        assert len(index.segments) == 2 and index.rows_deleted > 0
        assert (id_keys.segment_keys(index, 0)[0] == 7).all() == collide
        chunk_ids = [index.ids[r] for r in (0, 7, len(index) - 1)]
        wanted = [d.id for d in scifact[:70:3]] + chunk_ids + ["no-such-id"]
        ids, units = _truth(index, wanted)
        assert len(units) > 10 and any(len(rows) > 1 for rows in units.values())
        assert scifact[3].id not in units and scifact[45].id not in units  # deleted
        assert {i: [r] for i, r in index.rows_of_ids(wanted).items()} == ids
        assert index.rows_of_units(wanted) == units
        monkeypatch.setattr(id_keys, "segment_keys", lambda index, seg: None)  # before keys
        assert index.rows_of_units(wanted) == units
        assert {i: [r] for i, r in index.rows_of_ids(wanted).items()} == ids
