"""bench/bench_writers.py: two writers' sets of the same attempts compared over the real
Cranfield index (hand-made attempts logs; recall and wording shares checked by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import load_bench


@pytest.fixture(scope="module")
def bw():
    return load_bench("bench_writers")


def _set(root: Path, model: str, questions: dict[int, str | None], doc: str) -> Path:
    """A set folder: attempt i asks ``questions[i]`` of document ``doc`` (None: rejected)."""
    root.mkdir(parents=True)
    (root / "generation.json").write_text(json.dumps({"identity": {"model": model}}))
    (root / "attempts.jsonl").write_text("".join(json.dumps(
        {"attempt": i, "kind": "single", "user": "searcher", "categories": {},
         "documents": [doc], "question": q or "", "answer": "", "seconds": 6.0,
         "status": "kept" if q else "malformed", "detail": ""}) + "\n"
        for i, q in questions.items()))
    return root


def test_writers_compared_on_the_same_attempts(bw, cranfield_index, tmp_path, monkeypatch):
    monkeypatch.setattr(bw, "open_index", lambda name: cranfield_index)
    doc = "1"  # Cranfield 1: "experimental investigation of the aerodynamics of a wing in a
    # slipstream ..."
    text = cranfield_index.doc_text(doc)
    copied = "experimental investigation of the aerodynamics of a wing in a slipstream"
    assert copied in text
    far = "how do propellers change the lift of the airfoil they blow over"
    a = _set(tmp_path / "a", "small", {0: copied, 1: copied + " at low speed", 2: None}, doc)
    b = _set(tmp_path / "b", "large", {0: far, 1: None, 2: far + " today"}, doc)
    res = bw.compare("cranfield", [a, b], samples=5)
    small, large = res["writers"]
    assert (small["kept_single"], large["kept_single"], res["both_kept"]) == (2, 2, 1)
    assert small["kept_per_minute"] == pytest.approx(2 / (3 * 6 / 60))
    assert small["rejected"] == {"malformed": 1}
    # the copied question finds its source with BM25 at once and reuses all its word pairs
    assert small["measures"]["bm25 R@10"]["0"] == 1.0
    assert small["measures"]["copied pairs"]["0"] == 1.0
    assert small["measures"]["words in source"]["0"] == 1.0
    assert large["measures"]["copied pairs"]["0"] == 0.0
    assert res["paired"]["copied pairs"] == {"a": 1.0, "b": 0.0, "p": None}  # one pair
    assert res["side_by_side"] == [{"attempt": 0, "document": doc, "questions": [copied, far]}]
    md = bw.markdown(res)
    assert "| small | 3 | 2 | malformed 1 | 6.0 | 6.67 |" in md
    assert "| copied pairs | 100.0 | 0.0 | - |" in md


def test_sets_of_different_attempts_are_refused(bw, cranfield_index, tmp_path, monkeypatch):
    monkeypatch.setattr(bw, "open_index", lambda name: cranfield_index)
    a = _set(tmp_path / "a", "small", {0: "wing in a slipstream"}, "1")
    b = _set(tmp_path / "b", "large", {0: "wing in a slipstream", 1: None}, "1")
    with pytest.raises(SystemExit, match="ran 1 and 2 attempts"):
        bw.compare("cranfield", [a, b], samples=5)


def test_a_folder_that_is_not_a_generated_set_is_named(bw, cranfield_index, tmp_path,
                                                       monkeypatch):
    monkeypatch.setattr(bw, "open_index", lambda name: cranfield_index)
    a = _set(tmp_path / "a", "small", {0: "wing in a slipstream"}, "1")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="empty: not a generated set"):
        bw.compare("cranfield", [a, tmp_path / "empty"], samples=5)
