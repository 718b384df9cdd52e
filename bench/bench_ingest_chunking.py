"""The "ingest-chunking" section (issue 48): structure-aware passages in MiniLM tokens
against today's word chunks (data/corpus.py ``chunk_documents``) on a manual of long pages;
run by ``bench/bench_ingest.py --chunking`` (its docstring says how)."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.results import header, log, p_value, table, write_section

WORD_SETTINGS = ((200, 50), (120, 30))  # chunk_documents' default, and one near 221 tokens
STRUCTURE = (None, 32)  # ChunkSettings' defaults: 221 tokens, 32 of overlap
MIN_WORDS = 30  # a section shorter than this (its own text) gives no query


@dataclass
class Page:
    path: str
    body: str  # the extracted text, headings blanked (same offsets)
    blocks: list
    sections: list[tuple[int, int, str]]  # (start, end, section id) over the body


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
            title = re.sub(r"^[\d.\s]+", "", sid.split(" > ")[-1].split("#", 1)[-1]).strip()
            if len(p.body[start:end].split()) >= MIN_WORDS and len(title.split()) >= 2:
                titles.setdefault(title.lower(), []).append((title, sid))
    once = [v[0] for v in titles.values() if len(v) == 1]
    return {f"q{n}": q for n, q in enumerate(sorted(once, key=lambda q: q[1]))}


def section_of(p: Page, start: int, end: int) -> str:
    """The section holding most of [start, end) (the page's preamble: its own id)."""
    best, most = f"{p.path}#", 0
    for s, e, sid in p.sections:
        n = min(e, end) - max(s, start)
        if n > most:
            best, most = sid, n
    return best


def structure_passages(ps: list[Page]) -> list[tuple[str, str, str]]:
    """(id, text, section) of intentrank's passages, headings blanked."""
    from intentrank.data.ingest import ChunkSettings, chunk_blocks

    out = []
    for p in ps:
        _, chunks = chunk_blocks(p.blocks, ChunkSettings(*STRUCTURE))
        for n, c in enumerate(chunks):
            text = " ".join(p.body[c.char_start:c.char_end].split())
            if text:
                out.append((f"{p.path}#{n}", text, section_of(p, c.char_start, c.char_end)))
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
        step = size - over
        starts = [0] if len(spans) <= size else range(0, max(len(spans) - over, 1), step)
        for start, d in zip(starts, made, strict=True):
            window = spans[start:start + size]
            whole = len(spans) <= size  # passed through unchanged
            assert d.text == (p.body if whole else " ".join(p.body[a:b] for a, b in window))
            out.append((d.id, d.text, section_of(p, window[0][0], window[-1][1])))
    return out


def evaluate(passages: list[tuple[str, str, str]], qs: dict[str, tuple[str, str]],
             work: Path, name: str) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Per leg (bm25, dense): per query MRR@10, success@1, success@10 of the right section."""
    from intentrank.data.ingest.chunking import minilm_tokenizer
    from intentrank.index import IndexSettings, build_index
    from intentrank.types import Document

    docs = [Document(i, t) for i, t, _ in passages]
    idx = build_index(docs, work / name, IndexSettings(legs=("bm25", "dense")), progress=True)
    section = {i: s for i, _, s in passages}
    ids, texts = list(qs), [qs[q][0] for q in qs]
    tok = minilm_tokenizer()
    lengths = [len(e.ids) for e in tok.encode_batch([t for _, t, _ in passages],
                                                     add_special_tokens=False)]
    stats = {"passages": len(passages), "tokens": sum(lengths) / len(lengths),
             "over": sum(n > 254 for n in lengths) / len(lengths)}
    scores: dict[str, dict[str, float]] = {}
    for leg, hits in (("bm25", idx.search_bm25(texts, 100)),
                      ("dense", idx.search_dense(texts, 100))):
        for q, h in zip(ids, hits, strict=True):
            ranked = list(dict.fromkeys(section[idx.ids[r]] for r in h.rows))[:10]
            want = qs[q][1]
            rank = ranked.index(want) + 1 if want in ranked else 0
            scores.setdefault(leg, {})[q] = 1 / rank if rank else 0.0
            scores.setdefault(f"{leg} s@1", {})[q] = float(rank == 1)
            scores.setdefault(f"{leg} s@10", {})[q] = float(rank > 0)
    return scores, stats


def chunking(manual: Path) -> None:
    """The section from the HTML pages of the manual in the folder ``manual``."""
    ps = pages(manual)
    qs = queries(ps)
    tokens = sum(len(p.body.split()) for p in ps)
    log(f"{len(ps)} pages, {tokens} words, {len(qs)} queries")
    runs = {"structure (221 tokens, 32 overlap)": structure_passages(ps)}
    for size, over in WORD_SETTINGS:
        runs[f"words ({size}, {over} overlap)"] = word_passages(ps, size, over)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, passages) in enumerate(runs.items()):
            log(f"{name}: {len(passages)} passages")
            results[name] = evaluate(passages, qs, Path(tmp), f"i{n}")
    base = next(iter(results))
    rows = []
    for name, (scores, stats) in results.items():
        row = [name, stats["passages"], f"{stats['tokens']:.0f}", f"{stats['over']:.1%}"]
        for leg in ("bm25", "dense"):
            mrr = sum(scores[leg].values()) / len(qs)
            s1 = sum(scores[f"{leg} s@1"].values()) / len(qs)
            s10 = sum(scores[f"{leg} s@10"].values()) / len(qs)
            p = "" if name == base else p_value(results[base][0][leg], scores[leg],
                                                "MRR@10")
            row += [f"{mrr:.3f}", f"{s1:.3f}", f"{s10:.3f}", p]
        rows.append(row)
    lengths = sorted(len(p.body.split()) for p in ps)
    md = "\n".join([
        "## Ingestion: structure-aware chunks against word chunks (issue 48)", "", header(),
        f"Valgrind's HTML manual as Debian ships it: {len(ps)} pages, {tokens} words (median "
        f"page {lengths[len(lengths) // 2]} words, longest {lengths[-1]}). Queries: the "
        f"{len(qs)} section titles used once in the manual whose sections hold at least "
        f"{MIN_WORDS} words of their own (numbers stripped, e.g. \"Illegal read / Illegal "
        "write errors\"); the answer is that section. Headings are blanked out of every "
        "passage, so a title never matches its own heading. A passage belongs to the section "
        "holding most of its characters, and a ranking of passages (top 100) is read as a "
        "ranking of sections (first occurrence): MRR@10, success@1 and success@10 of the "
        "right section, per leg of a default index (BM25; dense: the int8 MiniLM). "
        "Structure: `read_folder`'s chunking (budget 221 MiniLM tokens, overlap 32); words: "
        "today's `chunk_documents` (size, overlap in words; 200/50 are its defaults). "
        "tokens: mean MiniLM tokens per passage; > 254: passages the embedder truncates. "
        "p: paired randomization test of MRR@10 against the first row.", "",
        table(["chunking", "passages", "tokens", "> 254", "BM25 MRR@10", "BM25 s@1",
               "BM25 s@10", "p", "dense MRR@10", "dense s@1", "dense s@10", "p"], rows), ""])
    write_section("ingest-chunking", md)
