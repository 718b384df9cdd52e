"""The "ingest-parsers" and "ingest-chunking" sections of docs/benchmarks.md (issue 48), on
documentation Debian packages ship (scripts/debian_docs.sh unpacks it into
.cache/debian-docs; /usr/share/doc is used where a package is installed):

    .venv/bin/python bench/bench_ingest.py              # parsers: quality and speed
    .venv/bin/python bench/bench_ingest.py --chunking   # structure chunks against word chunks
    .venv/bin/python bench/bench_ingest.py --fetch      # only run scripts/debian_docs.sh

Parsers: every candidate reads the same files, interleaved, three rounds (median seconds).
Quality against a text no extractor saw: shared-mime-info ships its specification as
DocBook XML source beside the PDF and the HTML made from it; the words (and word pairs, which
reading order and joins decide) of each extraction are compared with the source's.

Chunking: the Valgrind manual (HTML, 40 pages). Each section title is a query whose answer is
its section; headings are blanked out of every passage (same offsets) so that a title never
matches itself. Passages are mapped to the section holding most of their characters; a
ranking of passages becomes a ranking of sections (first occurrence).
"""

from __future__ import annotations

import argparse
import gzip
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lib.results import ROOT, header, log, table, write_section

PLACES = (ROOT / ".cache" / "debian-docs" / "root", Path("/"))
MIME = "usr/share/doc/shared-mime-info"
TASN1 = "usr/share/doc/libtasn1-doc/libtasn1.pdf"
VALGRIND = "usr/share/doc/valgrind/html"
ROUNDS = 3
_WORD = re.compile(r"\w+")


def doc(relative: str) -> Path:
    for place in PLACES:
        if (place / relative).exists():
            return place / relative
    sys.exit(f"{relative} is missing: run scripts/debian_docs.sh")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def overlap(got: list[str], ref: list[str]) -> tuple[float, float, float]:
    """Precision, recall and F1 of the multiset ``got`` against ``ref``."""
    g, r = Counter(got), Counter(ref)
    common = sum((g & r).values())
    p, rc = common / max(sum(g.values()), 1), common / max(sum(r.values()), 1)
    return p, rc, 2 * p * rc / max(p + rc, 1e-12)


def pairs(ws: list[str]) -> list[str]:
    return [f"{a} {b}" for a, b in zip(ws, ws[1:], strict=False)]


def reference() -> tuple[list[str], list[str]]:
    """The words and the section titles of shared-mime-info's DocBook source."""
    from lxml import etree

    parser = etree.XMLParser(load_dtd=False, no_network=True, resolve_entities=True)
    root = etree.fromstring(gzip.decompress(doc(f"{MIME}/shared-mime-info-spec.xml.gz")
                                            .read_bytes()), parser)
    titles = [" ".join(t.itertext()) for t in root.iter("title")][1:]  # not the document's
    return words(" ".join(root.itertext())), titles


# -- the candidates: bytes -> (text, headings) -------------------------------------------

def _blocks(parse: Callable[[bytes], Any]) -> Callable[[bytes], tuple[str, list[str]]]:
    def run(data: bytes) -> tuple[str, list[str]]:
        ex = parse(data)
        return ("\n\n".join(b.text for b in ex.blocks),
                [b.text for b in ex.blocks if b.kind == "heading"])
    return run


def _pypdf(data: bytes) -> tuple[str, list[str]]:
    import io

    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(data))
    return "\n".join(p.extract_text() or "" for p in reader.pages), []


def _pdfminer(data: bytes) -> tuple[str, list[str]]:
    import io

    from pdfminer.high_level import extract_text

    return extract_text(io.BytesIO(data)), []


def _trafilatura(data: bytes) -> tuple[str, list[str]]:
    import trafilatura

    from intentrank.data.ingest.markdown import markdown_blocks

    text = trafilatura.extract(data.decode("utf-8", "replace"), output_format="markdown",
                               include_tables=True, include_comments=False) or ""
    return text, [b.text for b in markdown_blocks(text) if b.kind == "heading"]


def candidates() -> dict[str, dict[str, Callable[[bytes], tuple[str, list[str]]]]]:
    from intentrank.data.ingest.html import parse_html
    from intentrank.data.ingest.pdf import parse_pdf

    return {"pdf": {"pypdfium2 (pdf.py)": _blocks(parse_pdf), "pypdf": _pypdf,
                    "pdfminer.six": _pdfminer},
            "html": {"selectolax (html.py)": _blocks(parse_html),
                     "trafilatura": _trafilatura}}


def _norm_title(text: str) -> str:
    return " ".join(words(re.sub(r"^[\d.\s]+", "", text)))


def parsers() -> None:
    ref, titles = reference()
    ref_pairs = pairs(ref)
    wanted = {_norm_title(t) for t in titles}
    mime_html = sorted(doc(f"{MIME}/shared-mime-info-spec.html").glob("*.html"))
    files = {"pdf": [doc(f"{MIME}/shared-mime-info-spec.pdf"), doc(TASN1)],
             "html": mime_html + sorted(doc(VALGRIND).glob("*.html"))}
    quality_files = {"pdf": files["pdf"][:1], "html": mime_html}
    data = {kind: [p.read_bytes() for p in paths] for kind, paths in files.items()}
    seconds: dict[tuple[str, str], list[float]] = {}
    cands = candidates()
    for r in range(ROUNDS):  # interleaved: each round runs every candidate once
        for kind, group in cands.items():
            for name, run in group.items():
                t = time.perf_counter()
                for blob in data[kind]:
                    run(blob)
                seconds.setdefault((kind, name), []).append(time.perf_counter() - t)
                log(f"round {r + 1} {kind} {name}: {seconds[kind, name][-1]:.2f}s")
    rows = []
    for kind, group in cands.items():
        base = statistics.median(seconds[kind, next(iter(group))])
        for name, run in group.items():
            outs = [run(p.read_bytes()) for p in quality_files[kind]]
            got = words(" ".join(t for t, _ in outs))
            _, _, f1 = overlap(got, ref)
            p, rc, _ = overlap(got, ref)
            _, _, f2 = overlap(pairs(got), ref_pairs)
            heads = {_norm_title(h) for _, hs in outs for h in hs}
            found = f"{len(wanted & heads)}/{len(wanted)}" if heads else "none"
            secs = statistics.median(seconds[kind, name])
            rows.append([kind.upper(), name, f"{p:.3f}", f"{rc:.3f}", f"{f1:.3f}", f"{f2:.3f}",
                         found, f"{secs:.2f}", f"{secs / base:.1f}x"])
    npages = _pdf_pages(data["pdf"])
    mb = sum(map(len, data["html"])) / 1e6
    md = "\n".join([
        "## Ingestion: which parser reads each format (issue 48)", "", header(),
        "Every candidate on the same Debian documentation, three rounds interleaved (median "
        "seconds). Speed: the PDFs of shared-mime-info (the specification) and libtasn1-doc "
        f"(the manual), {npages} pages; the HTML of shared-mime-info (4 pages) and Valgrind's "
        f"manual (40 pages), {mb:.1f} MB. Quality: shared-mime-info's specification as PDF "
        "and as HTML against its DocBook XML source (shipped beside them): precision and "
        "recall of the words (multiset), F1 of the words and of adjacent word pairs (reading "
        "order, words split or joined), and the source's section titles recovered as headings "
        "(a parser that gives no headings: none). The pypdfium2 and selectolax rows are "
        "intentrank's own readers (`data/ingest/pdf.py`, `html.py`: paragraphs, outline "
        "headings, dropped navigation), the others the library's text extraction.", "",
        table(["format", "parser", "word precision", "word recall", "word F1", "pair F1",
               "titles as headings", "seconds", "time vs first"], rows), ""])
    write_section("ingest-parsers", md)


def _pdf_pages(blobs: list[bytes]) -> int:
    import pypdfium2 as pdfium

    return sum(len(pdfium.PdfDocument(b)) for b in blobs)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunking", action="store_true", help="structure vs word chunks")
    ap.add_argument("--fetch", action="store_true", help="unpack the Debian documentation "
                    "(and the other real documents) into .cache/debian-docs "
                    "(scripts/debian_docs.sh) and stop")
    args = ap.parse_args()
    if args.fetch:
        import subprocess

        subprocess.run(["bash", str(ROOT / "scripts" / "debian_docs.sh")], check=True)
    elif args.chunking:
        from bench_ingest_chunking import chunking

        chunking(doc(VALGRIND))
    else:
        parsers()
