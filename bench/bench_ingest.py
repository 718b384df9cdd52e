"""The "ingest-parsers" and "ingest-chunking" sections of docs/benchmarks.md (issue 48), on
documentation Debian packages ship (scripts/debian_docs.sh unpacks it into
.cache/debian-docs; /usr/share/doc is used where a package is installed); their text:
bench/sections/ingest-parsers.md and ingest-chunking.md.

    .venv/bin/python bench/bench_ingest.py              # parsers: quality and speed
    .venv/bin/python bench/bench_ingest.py --chunking   # structure chunks against word chunks
    .venv/bin/python bench/bench_ingest.py --fetch      # only run scripts/debian_docs.sh

Parsers: every candidate reads the same files, interleaved, three rounds (median seconds).
Quality against a text no extractor saw: shared-mime-info ships its specification as
DocBook XML source beside the PDF and the HTML made from it; the words (and word pairs, which
reading order and joins decide) of each extraction are compared with the source's.

Chunking: the Valgrind manual (HTML, 40 pages), structure-aware passages in MiniLM tokens
against today's word chunks (data/corpus.py ``chunk_documents``). Each section title is a
query whose answer is its section; headings are blanked out of every passage (same offsets)
so that a title never matches itself. Passages are mapped to the section holding most of
their characters; a ranking of passages becomes a ranking of sections (first occurrence).
"""

from __future__ import annotations

import argparse
import gzip
import io
import re
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from lib.results import ROOT, header, log, p_value, publish_tables, table
from lib.timing import interleaved

PLACES = (ROOT / ".cache" / "debian-docs" / "root", Path("/"))
MIME = "usr/share/doc/shared-mime-info"
TASN1 = "usr/share/doc/libtasn1-doc/libtasn1.pdf"
VALGRIND = "usr/share/doc/valgrind/html"
ROUNDS = 3
WORD_SETTINGS = ((200, 50), (120, 30))  # chunk_documents' default, and one near 221 tokens
STRUCTURE = (None, 32)  # ChunkSettings' defaults: 221 tokens, 32 of overlap
MIN_WORDS = 30  # a section shorter than this (its own text) gives no query


def doc(relative: str) -> Path:
    for place in PLACES:
        if (place / relative).exists():
            return place / relative
    sys.exit(f"{relative} is missing: run scripts/debian_docs.sh")


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def title_words(text: str) -> str:
    """A section title without its number (``2.1 Illegal read`` -> ``Illegal read``)."""
    return re.sub(r"^[\d.\s]+", "", text).strip()


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


# -- parsers: bytes -> (text, headings) ------------------------------------------------------

def _blocks(parse: Callable[[bytes], Any]) -> Callable[[bytes], tuple[str, list[str]]]:
    def run(data: bytes) -> tuple[str, list[str]]:
        ex = parse(data)
        return ("\n\n".join(b.text for b in ex.blocks),
                [b.text for b in ex.blocks if b.kind == "heading"])
    return run


def _pypdf(data: bytes) -> tuple[str, list[str]]:
    import pypdf

    return "\n".join(p.extract_text() or "" for p in pypdf.PdfReader(io.BytesIO(data)).pages), []


def _pdfminer(data: bytes) -> tuple[str, list[str]]:
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


def parsers() -> tuple[str, dict[str, str]]:
    """The parsers table and the values of its prose."""
    import pypdfium2 as pdfium

    ref, titles = reference()
    wanted = {" ".join(words(title_words(t))) for t in titles}
    mime_html = sorted(doc(f"{MIME}/shared-mime-info-spec.html").glob("*.html"))
    files = {"pdf": [doc(f"{MIME}/shared-mime-info-spec.pdf"), doc(TASN1)],
             "html": mime_html + sorted(doc(VALGRIND).glob("*.html"))}
    quality_files = {"pdf": files["pdf"][:1], "html": mime_html}
    data = {kind: [p.read_bytes() for p in paths] for kind, paths in files.items()}
    cands = candidates()
    ways = {(kind, name): (lambda _, run=run, kind=kind: [run(b) for b in data[kind]])
            for kind, group in cands.items() for name, run in group.items()}
    # interleaved: each round runs every candidate once on every file of its kind
    seconds = interleaved(ways, range(ROUNDS), 1, quiet_gc=False)
    rows = []
    for kind, group in cands.items():
        base = statistics.median(seconds[kind, next(iter(group))]["each"])
        for name, run in group.items():
            outs = [run(p.read_bytes()) for p in quality_files[kind]]
            got = words(" ".join(t for t, _ in outs))
            p, rc, f1 = overlap(got, ref)
            heads = {" ".join(words(title_words(h))) for _, hs in outs for h in hs}
            secs = statistics.median(seconds[kind, name]["each"])
            log(f"{kind} {name}: {secs:.2f}s")
            rows.append([kind.upper(), name, f"{p:.3f}", f"{rc:.3f}", f"{f1:.3f}",
                         f"{overlap(pairs(got), pairs(ref))[2]:.3f}",
                         f"{len(wanted & heads)}/{len(wanted)}" if heads else "none",
                         f"{secs:.2f}", f"{secs / base:.1f}x"])
    return table(["format", "parser", "word precision", "word recall", "word F1", "pair F1",
                  "titles as headings", "seconds", "time vs first"], rows), {
        "pages": str(sum(len(pdfium.PdfDocument(b)) for b in data["pdf"])),
        "mb": f"{sum(map(len, data['html'])) / 1e6:.1f}"}


# -- chunking --------------------------------------------------------------------------------

class Page(NamedTuple):
    path: str
    body: str  # the extracted text, headings blanked (same offsets)
    blocks: list
    sections: list[tuple[int, int, str]]  # (start, end, section id) over the body

    def section_of(self, start: int, end: int) -> str:
        """The section holding most of [start, end) (the page's preamble: its own id)."""
        best, most = f"{self.path}#", 0
        for s, e, sid in self.sections:
            if (n := min(e, end) - max(s, start)) > most:
                best, most = sid, n
        return best


def pages(manual: Path) -> list[Page]:
    from intentrank.data.ingest.chunking import extracted_text
    from intentrank.data.ingest.html import parse_html

    out = []
    for path in sorted(manual.glob("*.html")):
        blocks = parse_html(path.read_bytes()).blocks
        text, starts = extracted_text(blocks)
        body = list(text)
        sections, path_now = [], []
        for b, s in zip(blocks, starts, strict=True):
            if b.kind == "heading":
                body[s:s + len(b.text)] = " " * len(b.text)
                path_now = [p for p in path_now if p[0] < b.level] + [(b.level, b.text)]
                sections.append([s, len(text), f"{path.name}#{' > '.join(t for _, t in path_now)}"])
        for a, b in zip(sections, sections[1:], strict=False):
            a[1] = b[0]
        out.append(Page(path.name, "".join(body), blocks, [tuple(s) for s in sections]))
    return out


def queries(ps: list[Page]) -> dict[str, tuple[str, str]]:
    """query id -> (section title without its number, section id), for sections with at
    least MIN_WORDS words of their own and a title used once in the manual."""
    titles: dict[str, list[tuple[str, str]]] = {}
    for p in ps:
        for start, end, sid in p.sections:
            title = title_words(sid.split(" > ")[-1].split("#", 1)[-1])
            if len(p.body[start:end].split()) >= MIN_WORDS and len(title.split()) >= 2:
                titles.setdefault(title.lower(), []).append((title, sid))
    once = [v[0] for v in titles.values() if len(v) == 1]
    return {f"q{n}": q for n, q in enumerate(sorted(once, key=lambda q: q[1]))}


def structure_passages(ps: list[Page]) -> list[tuple[str, str, str]]:
    """(id, text, section) of intentrank's passages, headings blanked."""
    from intentrank.data.ingest import ChunkSettings, chunk_blocks

    out = []
    for p in ps:
        _, chunks = chunk_blocks(p.blocks, ChunkSettings(*STRUCTURE))
        for n, c in enumerate(chunks):
            if text := " ".join(p.body[c.char_start:c.char_end].split()):
                out.append((f"{p.path}#{n}", text, p.section_of(c.char_start, c.char_end)))
    return out


def word_passages(ps: list[Page], size: int, over: int) -> list[tuple[str, str, str]]:
    """(id, text, section) of chunk_documents' passages of each page's body, the word windows
    located in the body (checked against chunk_documents' own output)."""
    from intentrank.data.corpus import chunk_documents
    from intentrank.types import Document

    out = []
    for p in ps:
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", p.body)]
        made = list(chunk_documents([Document(p.path, p.body)], size, over))
        starts = [0] if len(spans) <= size else range(0, max(len(spans) - over, 1), size - over)
        for start, d in zip(starts, made, strict=True):
            window = spans[start:start + size]
            whole = len(spans) <= size  # passed through unchanged
            assert d.text == (p.body if whole else " ".join(p.body[a:b] for a, b in window))
            out.append((d.id, d.text, p.section_of(window[0][0], window[-1][1])))
    return out


def evaluate(passages: list[tuple[str, str, str]], qs: dict[str, tuple[str, str]],
             work: Path) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Per leg (bm25, dense) and query: MRR@10, success@1 and @10 of the right section; and
    the passages, their mean MiniLM tokens and the share the embedder truncates."""
    from intentrank.data.ingest.chunking import minilm_tokenizer
    from intentrank.index import IndexSettings, build_index
    from intentrank.types import Document

    idx = build_index([Document(i, t) for i, t, _ in passages], work,
                      IndexSettings(legs=("bm25", "dense")), progress=True)
    section = {i: s for i, _, s in passages}
    texts = [qs[q][0] for q in qs]
    lengths = [len(e.ids) for e in minilm_tokenizer().encode_batch(
        [t for _, t, _ in passages], add_special_tokens=False)]
    scores: dict[str, dict[str, float]] = {}
    for leg, hits in (("bm25", idx.search_bm25(texts, 100)),
                      ("dense", idx.search_dense(texts, 100))):
        for q, h in zip(qs, hits, strict=True):
            ranked = list(dict.fromkeys(section[idx.ids[r]] for r in h.rows))[:10]
            rank = ranked.index(qs[q][1]) + 1 if qs[q][1] in ranked else 0
            scores.setdefault(leg, {})[q] = 1 / rank if rank else 0.0
            scores.setdefault(f"{leg} s@1", {})[q] = float(rank == 1)
            scores.setdefault(f"{leg} s@10", {})[q] = float(rank > 0)
    return scores, [str(len(passages)), f"{sum(lengths) / len(lengths):.0f}",
                    f"{sum(n > 254 for n in lengths) / len(lengths):.1%}"]


def chunking(manual: Path) -> tuple[str, dict[str, str]]:
    """The chunking table of the HTML pages of the manual in ``manual``, and the values of
    its prose."""
    ps = pages(manual)
    qs = queries(ps)
    lengths = sorted(len(p.body.split()) for p in ps)
    log(f"{len(ps)} pages, {sum(lengths)} words, {len(qs)} queries")
    runs = {"structure (221 tokens, 32 overlap)": structure_passages(ps)}
    for size, over in WORD_SETTINGS:
        runs[f"words ({size}, {over} overlap)"] = word_passages(ps, size, over)
    rows, base = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, passages) in enumerate(runs.items()):
            log(f"{name}: {len(passages)} passages")
            scores, row = evaluate(passages, qs, Path(tmp) / f"i{n}")
            base = base or scores
            for leg in ("bm25", "dense"):
                row += [f"{sum(scores[k].values()) / len(qs):.3f}"
                        for k in (leg, f"{leg} s@1", f"{leg} s@10")]
                row.append("" if scores is base else p_value(base[leg], scores[leg], "MRR@10"))
            rows.append([name, *row])
    return table(["chunking", "passages", "tokens", "> 254", "BM25 MRR@10", "BM25 s@1",
                  "BM25 s@10", "p", "dense MRR@10", "dense s@1", "dense s@10", "p"], rows), {
        "pages": str(len(ps)), "words": str(sum(lengths)), "queries": str(len(qs)),
        "median": str(lengths[len(lengths) // 2]), "longest": str(lengths[-1]),
        "min_words": str(MIN_WORDS)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunking", action="store_true", help="structure vs word chunks")
    ap.add_argument("--fetch", action="store_true", help="unpack the Debian documentation "
                    "(and the other real documents) into .cache/debian-docs "
                    "(scripts/debian_docs.sh) and stop")
    ap.add_argument("--no-write", action="store_true", help="print, do not publish")
    args = ap.parse_args()
    if args.fetch:
        import subprocess

        subprocess.run(["bash", str(ROOT / "scripts" / "debian_docs.sh")], check=True)
    else:
        name = "ingest-chunking" if args.chunking else "ingest-parsers"
        made, values = chunking(doc(VALGRIND)) if args.chunking else parsers()
        publish_tables(name, header() + "\n" + made, values, write=not args.no_write)
