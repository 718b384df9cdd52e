"""``intentrank index DIR`` on a folder of real documents, and the ``file › section (page
N)`` labels that ``search`` and ``answer`` show."""

from __future__ import annotations

import json
import shutil

import pytest
from debian_docs import debian_doc
from typer.testing import CliRunner

from intentrank.cli import app

runner = CliRunner()


def flat(output: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(output.split())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs") / "docs"
    shutil.copytree(debian_doc("usr/share/doc/shared-mime-info"), root)
    (root / "notes").mkdir()
    (root / "notes" / "bad.txt").write_bytes(b"bin\x00ary")
    return root


@pytest.fixture(scope="module")
def folder_index(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("idx") / "idx"
    res = runner.invoke(app, ["index", str(folder), str(out), "--legs", "bm25",
                              "--exclude", "*.html"])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_index_a_folder_prints_the_skips_and_summary(folder_index):
    output = flat(folder_index[1])
    assert "skipped notes/bad.txt: binary content (a NUL byte at offset 3)" in output
    assert "2 file(s) read" in output and "1 skipped (binary content: 1)" in output
    # 4 HTML pages (--exclude), NEWS.gz, changelog.Debian.gz, copyright, the .xml.gz source
    assert "8 not selected by the globs" in output


def test_search_json_cites_file_section_page(folder_index):
    out, _ = folder_index
    res = runner.invoke(app, ["search", str(out), "MIME type directory layout XDG base "
                              "directory", "-p", "bm25", "-k", "3", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)[0]["results"]
    pdf = [r for r in rows if r["id"].startswith("shared-mime-info-spec.pdf#")]
    assert pdf and all(r["source"].startswith("shared-mime-info-spec.pdf › ") for r in pdf)
    assert all("(page" in r["source"] for r in pdf)
    table = runner.invoke(app, ["search", str(out), "MIME directory layout", "-p", "bm25",
                                "-k", "2"])
    assert "source" in table.output


@pytest.mark.parametrize("where", ["command", "global"])
def test_strict_fails_naming_the_file(folder, tmp_path, where):
    args = ["index", str(folder), str(tmp_path / "i"), "--legs", "bm25"]
    res = runner.invoke(app, [*args, "--strict"] if where == "command" else ["--strict", *args])
    assert res.exit_code == 2
    assert "error:" in res.output
    assert "notes/bad.txt: cannot read: binary content" in flat(res.output)


@pytest.mark.parametrize("args,message", [
    (["--chunk-size", "100"], "use --chunk-tokens"),
    (["--chunk-tokens", "8"], "chunk max_tokens must be >= 16"),
    (["--chunk-tokens", "64", "--chunk-overlap", "64"], "must be smaller than"),
    (["--include", "*.docx"], "no documents to read")])
def test_folder_options_checked(folder, tmp_path, args, message):
    res = runner.invoke(app, ["index", str(folder), str(tmp_path / "i"), "--legs", "bm25",
                              *args])
    assert res.exit_code == 2 and message in flat(res.output), res.output


def test_folder_options_refused_for_a_corpus(data_dir, tmp_path):
    res = runner.invoke(app, ["index", str(data_dir / "cranfield"), str(tmp_path / "i"),
                              "--include", "*.md"])
    assert res.exit_code == 2 and "are for a folder of documents" in flat(res.output)


def test_a_folder_of_bad_files_only(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "empty.md").write_bytes(b"")
    res = runner.invoke(app, ["index", str(tmp_path / "d"), str(tmp_path / "i"), "--legs",
                              "bm25"])
    assert res.exit_code == 2 and "no text in any file" in flat(res.output), res.output
    assert "skipped empty.md: empty file" in flat(res.output)


def test_answer_citations_carry_the_source(folder_index):
    from intentrank.answer.attribution import cited_passages
    from intentrank.index import Index
    from intentrank.types import Answer

    idx = Index.open(folder_index[0])
    assert idx.doc("README.md#0").metadata["path"] == "README.md"
    answer = Answer("It installs MIME data [1].", sources=("README.md#0",), citations=(1,),
                    stage="answer")
    (cited,) = cited_passages(answer, idx)
    assert cited["source"] == "README.md › Shared MIME Info"


def test_index_one_document_file(tmp_path):
    pdf = debian_doc("usr/share/doc/libtasn1-doc/libtasn1.pdf")
    res = runner.invoke(app, ["index", str(pdf), str(tmp_path / "i"), "--legs", "bm25",
                              "--chunk-tokens", "128", "--chunk-overlap", "0"])
    assert res.exit_code == 0, res.output
    assert "1 file(s) read" in flat(res.output)
    found = runner.invoke(app, ["search", str(tmp_path / "i"), "DER encoding of an "
                                "INTEGER", "-p", "bm25", "-k", "1", "--json"])
    (row,) = json.loads(found.output)[0]["results"]
    assert row["id"].startswith("libtasn1.pdf#") and row["source"].startswith("libtasn1.pdf")
