"""A folder of real documents (the HTML manual Debian's shared-mime-info ships, plus a
Markdown note), living: index it, edit a page, remove one, add a file, make one unreadable,
``intentrank sync``; the index then equals ``intentrank index`` of the folder as it now is,
and only the edited and new files' passages were encoded."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from debian_docs import debian_doc
from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.index import Index, build_index

runner = CliRunner()
LEGS = ["--legs", "bm25,tfidf,graph"]


def _json(output: str) -> dict:
    return json.loads(output[output.index("{"):output.rindex("}") + 1])


def _answers(path) -> tuple:
    with Index(path) as index:
        hits = index.search_bm25(["MIME type database", "glob patterns", "magic rules"], 10)
        return (index.corpus_sha256, list(index.ids),
                [(h.rows.tolist(), h.scores.tolist()) for h in hits])


def _by_id(path) -> tuple:
    """The documents and every BM25 score by id, whatever the row order."""
    with Index(path) as index:
        hits = index.search_bm25(["MIME type database", "glob patterns", "magic rules"],
                                 len(index))
        return (sorted(index.doc_line(r) for r in range(len(index))),
                [dict(zip(index.id_array[h.rows].tolist(), h.scores.tolist(), strict=True))
                 for h in hits])


def test_edit_remove_add_then_sync_equals_a_fresh_index(tmp_path):
    folder = tmp_path / "docs"
    shutil.copytree(debian_doc("usr/share/doc/shared-mime-info"), folder,
                    ignore=shutil.ignore_patterns("*.gz", "copyright", "*.pdf"))
    pages = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.suffix in (".html", ".htm"))
    assert len(pages) >= 3, pages
    path = tmp_path / "idx"
    res = runner.invoke(app, ["index", str(folder), str(path), *LEGS])
    assert res.exit_code == 0, res.output
    with Index(path) as index:
        sources = {index.doc(i).metadata["path"] for i in index.ids}
    assert sources == {*pages, "README.md"}

    edited, removed = folder / pages[0], folder / pages[1]
    note = "<P>Living index note: the cache is rebuilt by update-mime-database.</P>"
    html = edited.read_text(encoding="utf-8")
    at = re.search(r"<(p|h1|h2)\b", html, re.IGNORECASE).start()  # in the page's content
    edited.write_text(html[:at] + note + html[at:], encoding="utf-8")
    removed.unlink()
    (folder / "notes.md").write_text("# Notes\n\nMIME glob patterns map file names to types.\n")
    res = runner.invoke(app, ["sync", str(path), str(folder), "--json"])
    assert res.exit_code == 0, res.output
    stats = _json(res.output)
    assert (stats["added"], stats["replaced"], stats["deleted"]) == (1, 1, 1)
    assert stats["unchanged"] == len(pages) - 2 + 1  # the README too
    with Index(path) as index:
        new_passages = sum(index.doc(i).metadata["path"] in (pages[0], "notes.md")
                           for i in index.ids)
        assert "Living index note" in " ".join(
            index.doc(i).text for i in index.ids if index.doc(i).metadata["path"] == pages[0])
    assert stats["encoded"] <= new_passages  # unchanged passages of the edited page reused

    fresh = tmp_path / "fresh"  # the folder's index: the same documents and scores
    assert runner.invoke(app, ["index", str(folder), str(fresh), *LEGS]).exit_code == 0
    assert _by_id(path) == _by_id(fresh)
    with Index(path) as index:  # and in the synced index's row order, the same index
        in_order = build_index(list(index.documents()), tmp_path / "in-order", index.settings)
    in_order.close()
    assert _answers(path) == _answers(tmp_path / "in-order")

    (folder / pages[2]).write_bytes(b"\x00\x01binary now")  # unreadable this time
    res = runner.invoke(app, ["sync", str(path), str(folder), "--json"])
    assert res.exit_code == 0, res.output
    assert f"skipped {pages[2]}" in " ".join(res.output.split())
    with Index(path) as index:  # its passages stay
        assert any(index.doc(i).metadata["path"] == pages[2] for i in index.ids)


def test_sync_reads_the_folder_as_index_did(tmp_path):
    """`index` records its folder options; `sync` without them reads the folder the same
    way (a sync with other globs or chunk sizes would otherwise rewrite the index), and
    options given to `sync` replace the recorded ones."""
    folder = tmp_path / "docs"
    shutil.copytree(debian_doc("usr/share/doc/shared-mime-info"), folder,
                    ignore=shutil.ignore_patterns("*.gz", "copyright", "*.pdf"))
    path = tmp_path / "idx"
    given = ["--include", "**/*.html", "--chunk-tokens", "96", "--chunk-overlap", "8"]
    res = runner.invoke(app, ["index", str(folder), str(path), *LEGS, *given])
    assert res.exit_code == 0, res.output
    assert not (path / "folder.json").exists()  # in the commit: a kill cannot split them
    recorded = _recorded(path)
    assert recorded == {"include": ["**/*.html"], "exclude": None, "chunk_tokens": 96,
                        "overlap": 8}
    before = _answers(path)
    with Index(path) as index:
        assert {index.doc(i).metadata["path"] for i in index.ids} <= {
            p.relative_to(folder).as_posix() for p in folder.rglob("*.html")}

    res = runner.invoke(app, ["sync", str(path), str(folder), "--json"])
    assert res.exit_code == 0, res.output
    stats = _json(res.output)
    assert (stats["added"], stats["replaced"], stats["deleted"], stats["encoded"]) == \
        (0, 0, 0, 0), stats
    assert _answers(path) == before

    res = runner.invoke(app, ["sync", str(path), str(folder), "--chunk-tokens", "200",
                              "--json"])  # re-cut: every file's passages change
    assert res.exit_code == 0, res.output
    assert _json(res.output)["replaced"] > 0
    assert _recorded(path)["chunk_tokens"] == 200
    fresh = tmp_path / "fresh"
    res = runner.invoke(app, ["index", str(folder), str(fresh), *LEGS, "--include",
                              "**/*.html", "--chunk-tokens", "200", "--chunk-overlap", "8"])
    assert res.exit_code == 0, res.output
    assert _answers(path) == _answers(fresh)

    corpus_file = tmp_path / "c.jsonl"
    corpus_file.write_text('{"_id": "a", "text": "MIME glob patterns"}\n')
    res = runner.invoke(app, ["index", str(corpus_file), str(path), *LEGS, "--overwrite"])
    assert res.exit_code == 0, res.output
    assert _recorded(path) is None  # a corpus file: nothing to read as a folder

    (path / "folder.json").write_text("{not json")  # as an index before commits held them
    res = runner.invoke(app, ["sync", str(path), str(folder)])
    assert res.exit_code != 0
    assert "folder.json" in res.output and "cannot read the folder options" in res.output


def _recorded(path: Path) -> dict | None:
    """The folder options the live commit records."""
    with Index(path) as index:
        return index.manifest.get("folder")
