"""Reading folders of documents (data/ingest): real documents Debian packages ship (PDF,
HTML, Markdown), every kind of bad file, stable ids, metadata and the skip summary."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from debian_docs import debian_doc, python_docx_files

from intentrank.data.ingest import ChunkSettings, list_files, read_folder, source_label
from intentrank.data.ingest.blocks import SEPARATOR
from intentrank.data.ingest.chunking import default_max_tokens, minilm_tokenizer
from intentrank.data.ingest.folder import PARSERS
from intentrank.errors import DataError

MIME = "usr/share/doc/shared-mime-info"


def _texts(root: Path, rel: str) -> str:
    """A file's extracted text, as the passages' offsets index it."""
    ex = PARSERS[Path(rel).suffix](Path(root, rel).read_bytes())
    return SEPARATOR.join(b.text for b in ex.blocks)


def test_real_debian_docs_pdf_html_markdown(tmp_path):
    """shared-mime-info's spec as PDF, as DocBook HTML pages and its README.md."""
    src = debian_doc(MIME)
    read = read_folder(src)
    docs = list(read.documents)
    assert read.skipped == []
    assert set(read.read) >= {"README.md", "shared-mime-info-spec.pdf",
                              "shared-mime-info-spec.html/x34.html"}
    assert read.summary().startswith(f"{len(read.read)} file(s) read, {len(docs)} passage(s)")
    by_file: dict[str, list] = {}
    for d in docs:
        by_file.setdefault(d.metadata["path"], []).append(d)
    budget, tok = default_max_tokens(), minilm_tokenizer()
    for rel, passages in by_file.items():
        text = _texts(src, rel)
        for n, d in enumerate(passages):
            m = d.metadata
            assert d.id == f"{rel}#{n}" and d.parent_id == rel
            assert text[m["char_start"]:m["char_end"]] == d.text
            assert len(tok.encode(d.text, add_special_tokens=False).ids) <= budget
            assert m["mtime"].endswith("+00:00") and len(m["content_sha256"]) == 64
    pdf = by_file["shared-mime-info-spec.pdf"]
    assert pdf[0].metadata["producer"].startswith("pdfTeX")
    assert pdf[0].metadata["created"] == "2022-04-29T17:19:08+00:00"
    assert pdf[-1].metadata["page"] == pdf[0].metadata["pages"] == 17
    layout = [d for d in pdf if d.metadata["headings"][-1:] == ["2.1. Directory layout"]]
    assert layout and layout[0].metadata["headings"] == ["2. Unified system",
                                                         "2.1. Directory layout"]
    assert source_label(layout[0].metadata) == ("shared-mime-info-spec.pdf › 2.1. Directory "
                                                "layout (page 2)")
    html = by_file["shared-mime-info-spec.html/x34.html"]
    assert html[0].title == "Unified system"
    assert any(d.metadata["headings"] == ["2. Unified system", "2.1. Directory layout"]
               and "XDG Base Directory" in d.text for d in html)
    assert not any(d.text.split()[0] == "Prev" for d in html)  # navigation dropped
    readme = by_file["README.md"]
    assert readme[0].title == "Shared MIME Info"


def test_real_pdf_outline_pages_and_metadata():
    pdf = debian_doc("usr/share/doc/libtasn1-doc/libtasn1.pdf")
    docs = list(read_folder(pdf).documents)  # one file: paths relative to its folder
    assert {d.metadata["path"] for d in docs} == {"libtasn1.pdf"}
    pages = [d.metadata["page"] for d in docs]
    assert pages == sorted(pages) and pages[0] == 1 and pages[-1] == 36
    heads = {tuple(d.metadata["headings"]) for d in docs}
    assert ("2 ASN.1 structure handling", "2.2 Naming") in heads
    naming = next(d for d in docs if d.metadata["headings"][-1:] == ["2.2 Naming"])
    assert "Consider this definition" in naming.text and naming.metadata["page"] == 6


def test_real_pdf_passages_carry_the_documents_title_not_its_first_heading():
    """libtasn1's manual has no title property and its first bookmark is a chapter: every
    passage was titled "1 Introduction" (issue 58). The title page's title now, the heading
    path as each passage's section."""
    pdf = debian_doc("usr/share/doc/libtasn1-doc/libtasn1.pdf")
    docs = list(read_folder(pdf).documents)
    assert {d.title for d in docs} == {"Libtasn1"}
    assert {d.metadata["title"] for d in docs} == {"Libtasn1"}
    naming = next(d for d in docs if d.metadata["headings"][-1:] == ["2.2 Naming"])
    assert source_label(naming.metadata) == "libtasn1.pdf › 2.2 Naming (pages 6-7)"


def test_real_asymptote_manual_title_page_and_title_property():
    """Asymptote's manual (the case of issue 58: every passage titled "1 Description"): its
    title page's title, set in a large type over two lines; asy-latex.pdf has a title
    property, which wins."""
    from intentrank.data.ingest.pdf import parse_pdf

    folder = debian_doc("usr/share/doc/asymptote")
    ex = parse_pdf((folder / "asymptote.pdf").read_bytes())
    assert ex.title == "Asymptote: the Vector Graphics Language"
    assert "title" not in ex.metadata
    heads = [b.text for b in ex.blocks if b.kind == "heading"]
    assert heads[:2] == ["1 Description", "2 Installation"]
    docs = list(read_folder(folder / "asy-latex.pdf").documents)
    assert docs[0].metadata["title"] == "The asymptote package"
    assert {d.title for d in docs} == {"The asymptote package"}


def test_a_document_without_a_title_is_titled_by_its_one_top_heading_or_its_name(tmp_path):
    """HTML without <title>, Markdown, DOCX without a title property: the first heading is
    the title only when no later heading is at its level or above; a DOCX's Title paragraph
    is its title."""
    import docx

    (tmp_path / "guide.html").write_text("<html><body><h1>Guide</h1><p>Intro.</p><h2>Setup"
                                         "</h2><p>Run it.</p><h2>Use</h2><p>Ask.</p></body>"
                                         "</html>")
    (tmp_path / "chapters.html").write_text("<html><body><h2>Install</h2><p>Copy.</p><h2>Usage"
                                            "</h2><p>Run.</p></body></html>")
    (tmp_path / "titled.html").write_text("<html><head><title>The Book</title></head><body>"
                                          "<h2>One</h2><p>a</p><h2>Two</h2><p>b</p></body>"
                                          "</html>")
    (tmp_path / "notes.md").write_text("# Monday\n\nmet.\n\n# Tuesday\n\nwrote.\n")
    d = docx.Document()
    d.add_heading("Staff handbook", level=0)  # Word's Title style
    d.add_heading("Leave", level=1)
    d.add_paragraph("Ask two weeks ahead.")
    d.add_heading("Travel", level=1)
    d.add_paragraph("Trains first.")
    d.save(tmp_path / "handbook.docx")
    d = docx.Document()
    for h in ("Leave", "Travel"):
        d.add_heading(h, level=1)
        d.add_paragraph("Ask.")
    d.save(tmp_path / "policies.docx")
    titles: dict[str, set] = {}
    headings: dict[str, list] = {}
    for doc in read_folder(tmp_path, chunking=ChunkSettings(max_tokens=16,
                                                            overlap_tokens=0)).documents:
        titles.setdefault(doc.metadata["path"], set()).add(doc.title)
        headings.setdefault(doc.metadata["path"], []).append(doc.metadata["headings"])
    assert titles == {"guide.html": {"Guide"}, "chapters.html": {"chapters"},
                      "titled.html": {"The Book"}, "notes.md": {"notes"},
                      "handbook.docx": {"Staff handbook"}, "policies.docx": {"policies"}}
    assert ["Guide", "Use"] in headings["guide.html"]
    assert ["Staff handbook", "Travel"] not in headings["handbook.docx"]  # both level 1
    assert ["Travel"] in headings["handbook.docx"]


def test_reading_twice_gives_identical_documents(tmp_path):
    src = debian_doc(MIME)
    shutil.copytree(src, tmp_path / "d")
    first = list(read_folder(tmp_path / "d").documents)
    again = list(read_folder(tmp_path / "d").documents)
    assert first == again and len({d.id for d in first}) == len(first)
    (tmp_path / "d" / "README.md").write_text("# New\n\nChanged text.\n")
    changed = list(read_folder(tmp_path / "d").documents)
    assert [d for d in changed if d.parent_id != "README.md"] == \
        [d for d in first if d.parent_id != "README.md"]


def test_real_pdf_without_text_layer_and_empty_docx():
    """Matplotlib's toolbar icons are real PDFs of vector drawings only; python-docx's
    default template is a real DOCX with no text."""
    mpl = pytest.importorskip("matplotlib")
    docx = pytest.importorskip("docx")
    icon = Path(mpl.get_data_path()) / "images" / "home.pdf"
    template = Path(docx.__file__).parent / "templates" / "default.docx"
    for path, reason in ((icon, "PDF has no text layer"), (template, "no text")):
        read = read_folder(path)
        assert list(read.documents) == []
        assert [s.kind for s in read.skipped] == [reason]


def _bad_files(root: Path) -> dict[str, str]:
    """Every kind of bad file, made here; name -> the kind of reason it is skipped for."""
    pypdf = pytest.importorskip("pypdf")
    real = debian_doc(f"{MIME}/shared-mime-info-spec.pdf").read_bytes()
    (root / "sub").mkdir()
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(real))
    writer.encrypt("secret")
    with open(root / "encrypted.pdf", "wb") as f:
        writer.write(f)
    (root / "truncated.pdf").write_bytes(real[:2000])
    (root / "garbage.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf")
    blank = pypdf.PdfWriter()
    blank.add_blank_page(200, 200)
    with open(root / "sub" / "scan.pdf", "wb") as f:
        blank.write(f)
    (root / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (root / "latin1.md").write_bytes("# Caf\xe9\n\nna\xefve".encode("latin-1"))
    (root / "empty.html").write_bytes(b"")
    (root / "blank.txt").write_text("   \n\n  ")
    with open(root / "huge.txt", "wb") as f:  # sparse: 65 MiB on paper, nothing on disk
        f.truncate(65 << 20)
    (root / "bad.docx").write_bytes(b"PK\x03\x04 not a zip")
    (root / "front.md").write_text("---\n[unclosed\n---\ntext\n")
    return {"encrypted.pdf": "encrypted PDF", "truncated.pdf": "corrupt PDF",
            "garbage.pdf": "corrupt PDF", "sub/scan.pdf": "PDF has no text layer",
            "binary.txt": "binary content", "latin1.md": "undecodable text",
            "empty.html": "empty file", "blank.txt": "no text", "huge.txt": "too large",
            "bad.docx": "corrupt DOCX", "front.md": "bad YAML front matter"}


def test_bad_files_skipped_with_reasons_and_counted(tmp_path):
    expected = _bad_files(tmp_path)
    (tmp_path / "good.md").write_text("# Good\n\nThis one is fine.\n")
    (tmp_path / "notes.jsonl").write_text("{}\n")  # not a document format: not selected
    read = read_folder(tmp_path)
    docs = list(read.documents)
    assert [d.id for d in docs] == ["good.md#0"]
    assert {s.path: s.kind for s in read.skipped} == expected
    summary = read.summary()
    assert summary.startswith(f"1 file(s) read, 1 passage(s); {len(expected)} skipped (")
    assert "corrupt PDF: 2" in summary and "1 not selected by the globs" in summary
    assert "a NUL byte at offset 0" in next(s.reason for s in read.skipped
                                             if s.path == "binary.txt")


@pytest.mark.parametrize("name", ["encrypted.pdf", "truncated.pdf", "sub/scan.pdf",
                                  "binary.txt", "latin1.md", "empty.html", "huge.txt"])
def test_strict_raises_naming_file_and_reason(tmp_path, name):
    expected = _bad_files(tmp_path)
    with pytest.raises(DataError, match=f"{name}: cannot read: {expected[name]}"):
        list(read_folder(tmp_path, include=(f"/{name}",), strict=True).documents)


def test_real_docx_files_of_python_docx():
    """The Word documents of python-docx's own tests (made in Word by its authors): styles,
    core properties, tables, and blank ones skipped as having no text."""
    read = read_folder(python_docx_files())
    docs = list(read.documents)
    assert len(read.read) >= 20 and {s.kind for s in read.skipped} == {"no text"}
    by = {d.id: d for d in docs}
    styled = [d for d in docs if d.parent_id == "par-known-styles.docx"]
    assert [(d.metadata["headings"], d.text) for d in styled] == [
        ([], "no specified style\n\nmissing style"), (["Heading 1"], "Heading 1\n\nBody Text")]
    assert by["blk-paras-and-tables.docx#0"].metadata["author"] == "Steve Canny"
    assert "Text before Text after" in by["blk-paras-and-tables.docx#0"].text
    assert all(d.metadata["char_end"] > d.metadata["char_start"] for d in docs)


def test_docx_headings_lists_tables_and_properties(tmp_path):
    docx = pytest.importorskip("docx")
    d = docx.Document()
    d.core_properties.title, d.core_properties.author = "Policy", "Ops team"
    d.add_heading("Travel", level=1)
    d.add_paragraph("Book trains when the trip is under four hours.")
    d.add_heading("Claims", level=2)
    d.add_paragraph("receipts", style="List Bullet")
    d.add_paragraph("approval", style="List Bullet")
    t = d.add_table(rows=2, cols=2)
    for (i, j), v in {(0, 0): "item", (0, 1): "limit", (1, 0): "hotel", (1, 1): "150"}.items():
        t.cell(i, j).text = v
    d.save(tmp_path / "policy.docx")
    docs = list(read_folder(tmp_path, chunking=ChunkSettings(max_tokens=16,
                                                             overlap_tokens=0)).documents)
    assert docs[0].title == "Policy" and docs[0].metadata["author"] == "Ops team"
    assert [(d.metadata["headings"], d.text) for d in docs] == [
        (["Travel"], "Travel\n\nBook trains when the trip is under four hours."),
        (["Travel", "Claims"], "Claims\n\n- receipts\n- approval\n\nitem | limit\nhotel | 150")]


def test_globs_hidden_files_and_ids_with_spaces(tmp_path):
    for rel in ("a/keep me.md", "a/b/drop.md", ".git/x.md", "a/.hidden.md", "c.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"# {rel}\n\ntext\n")
    read = read_folder(tmp_path, include=("*.md",), exclude=("a/b/**",))
    docs = list(read.documents)
    assert [d.id for d in docs] == ["a/keep%20me.md#0"]
    assert docs[0].metadata["path"] == "a/keep me.md" and docs[0].parent_id == "a/keep%20me.md"
    assert read.ignored == 2  # c.txt and a/.hidden.md (a/b/ and .git/ are never entered)
    assert list_files(tmp_path, include=("*.md",), exclude=("a/b/**",)) == read.files
    everything = read_folder(tmp_path, hidden=True)
    assert len(list(everything.documents)) == 5


def test_missing_root_and_mtime(tmp_path):
    with pytest.raises(DataError, match="no such file or folder"):
        read_folder(tmp_path / "nope")
    (tmp_path / "n.txt").write_text("hello there")
    os.utime(tmp_path / "n.txt", (0, 1_700_000_000))
    (doc,) = read_folder(tmp_path).documents
    assert doc.metadata["mtime"] == "2023-11-14T22:13:20+00:00"
    assert doc.title == "n" and source_label(doc.metadata) == "n.txt"


def test_real_manual_code_and_tables_kept_whole():
    """Valgrind's Memcheck chapter (HTML): every code block and table that fits the budget
    is whole inside one passage; the longer ones are cut at line ends."""
    from intentrank.data.ingest import chunk_blocks
    from intentrank.data.ingest.html import parse_html

    page = debian_doc("usr/share/doc/valgrind/html/mc-manual.html")
    blocks = parse_html(page.read_bytes()).blocks
    text, chunks = chunk_blocks(blocks)
    tok, budget = minilm_tokenizer(), default_max_tokens()
    whole = [b for b in blocks if b.kind in ("code", "table")
             and len(tok.encode(b.text, add_special_tokens=False).ids) <= budget]
    assert len(whole) >= 20
    for b in whole:
        assert any(b.text in c.text for c in chunks), b.text[:80]
    long = [b for b in blocks if b.kind == "code" and b not in whole]
    assert len(long) >= 5
    for b in long:
        start = text.index(b.text)
        cuts = [c.char_end for c in chunks if start < c.char_end < start + len(b.text)]
        assert cuts and all(not text[e:].split("\n", 1)[0].strip() for e in cuts)  # line ends
