"""Structure-aware chunking in MiniLM tokens (data/ingest/chunking.py), the Markdown and
HTML block parsers it reads, the globs and the citation label."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intentrank.core.params import ParameterError
from intentrank.data.ingest import Block, ChunkSettings, chunk_blocks, source_label
from intentrank.data.ingest.chunking import default_max_tokens, minilm_tokenizer
from intentrank.data.ingest.globs import matches
from intentrank.data.ingest.html import parse_html
from intentrank.data.ingest.markdown import parse_markdown


def ntok(text: str) -> int:
    return len(minilm_tokenizer().encode(text, add_special_tokens=False).ids)


def test_budget_is_the_models_own():
    import inspect

    from intentrank.data.ingest.chunking import CROSS_ENCODER_MAX_LENGTH, QUERY_TOKENS
    from intentrank.models.cross_encoder import TorchCrossEncoder

    default = inspect.signature(TorchCrossEncoder).parameters["max_length"].default
    assert default == CROSS_ENCODER_MAX_LENGTH
    # MiniLM: max_seq_length 256 - 2 specials; cross-encoder 256 - 3 - 32 for the query
    assert default_max_tokens() == min(254, 256 - 3 - QUERY_TOKENS) == 221


def test_tokens_are_wordpiece_not_words():
    assert ntok("unbelievably antidisestablishmentarianism") > 2


MD = """---
title: Handbook
team: [a, b]
updated: 2024-01-31
---
# Setup

Install it.

## Tables

| a | b |
|---|---|
| 1 | 2 |

```python
def f():
    return 1
```

- one
- two
"""


def test_markdown_blocks_front_matter_and_heading_path():
    ex = parse_markdown(MD.encode())
    assert ex.title == "Handbook"
    assert ex.metadata == {"title": "Handbook", "team": ["a", "b"], "updated": "2024-01-31"}
    kinds = [(b.kind, b.level) for b in ex.blocks]
    assert kinds == [("heading", 1), ("paragraph", 0), ("heading", 2), ("table", 0),
                     ("code", 0), ("list", 0)]
    assert ex.blocks[4].text == "def f():\n    return 1"
    text, chunks = chunk_blocks(ex.blocks, ChunkSettings(max_tokens=64, overlap_tokens=0))
    assert [c.headings for c in chunks] == [("Setup",), ("Setup", "Tables")]
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text


def _long_paragraph(n: int) -> str:
    return " ".join(f"Sentence number {i} talks about topic {i % 7} at some length." for i in
                    range(n))


def test_budget_kept_and_passages_are_slices():
    blocks = [Block("heading", "Top", 1), Block("paragraph", _long_paragraph(80)),
              Block("code", "\n".join(f"x{i} = compute({i})" for i in range(120))),
              Block("heading", "Second", 2), Block("paragraph", "Short."),
              Block("table", "a | b\n1 | 2")]
    settings = ChunkSettings(max_tokens=64, overlap_tokens=16)
    text, chunks = chunk_blocks(blocks, settings)
    assert len(chunks) > 10
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text
        assert ntok(c.text) == c.tokens <= 64
    # the small table stays whole in the second section, with its heading path
    assert chunks[-1].headings == ("Top", "Second")
    assert "a | b\n1 | 2" in chunks[-1].text
    # consecutive prose passages overlap (a shared sentence), code passages do not
    prose = [c for c in chunks if "Sentence number" in c.text and "compute" not in c.text]
    assert any(a.char_end > b.char_start for a, b in zip(prose, prose[1:], strict=False))


def test_table_kept_whole_where_it_fits():
    table = "\n".join(f"row {i} | value {i}" for i in range(12))
    blocks = [Block("paragraph", _long_paragraph(6)), Block("table", table)]
    size = ntok(table)
    _, chunks = chunk_blocks(blocks, ChunkSettings(max_tokens=size + 5, overlap_tokens=0))
    assert any(c.text == table for c in chunks)  # whole, in a passage of its own


def test_no_overlap_means_disjoint_passages():
    blocks = [Block("paragraph", _long_paragraph(40))]
    _, chunks = chunk_blocks(blocks, ChunkSettings(max_tokens=40, overlap_tokens=0))
    assert all(a.char_end <= b.char_start for a, b in zip(chunks, chunks[1:], strict=False))


def test_one_huge_word_is_cut_within_budget():
    text, chunks = chunk_blocks([Block("paragraph", "x" * 5000)],
                                ChunkSettings(max_tokens=32, overlap_tokens=0))
    assert "".join(c.text for c in chunks) == text
    assert all(c.tokens <= 32 for c in chunks)


@pytest.mark.parametrize("kwargs", [{"max_tokens": 8}, {"max_tokens": 64, "overlap_tokens": 64},
                                    {"overlap_tokens": -1}, {"max_tokens": 10.5}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ParameterError, match="chunk"):
        ChunkSettings(**kwargs)


def test_html_drops_navigation_scripts_and_keeps_structure():
    html = b"""<html><head><title>T</title><script>var x;</script></head><body>
      <div class="NAVHEADER"><a href="p.html">Prev</a></div><nav>menu</nav><div hidden>x</div>
      <h1>Main</h1><p>Intro <b>bold</b> text.</p><h2>Sub</h2>
      <pre>  indented\n  code</pre><table><tr><th>k</th><th>v</th></tr><tr><td>1</td>
      <td>2</td></tr></table><ul><li>one</li><li>two</li></ul></body></html>"""
    ex = parse_html(html)
    assert ex.title == "T"
    assert [(b.kind, b.text) for b in ex.blocks] == [
        ("heading", "Main"), ("paragraph", "Intro bold text."), ("heading", "Sub"),
        ("code", "  indented\n  code"), ("table", "k | v\n1 | 2"), ("list", "- one\n- two")]


def test_html_charset_from_meta():
    ex = parse_html('<meta charset="latin-1"><body><p>café</p></body>'.encode("latin-1"))
    assert ex.blocks[0].text == "café"


@pytest.mark.parametrize("path,patterns,expected", [
    ("a/b/c.md", ["*.md"], True), ("c.md", ["*.md"], True), ("a/b/c.md", ["a/*.md"], False),
    ("a/b/c.md", ["a/**/*.md"], True), ("a/c.md", ["a/**/*.md"], True),
    ("a/.git/x", ["**/.*/**"], True), (".hidden.md", [".*"], True),
    ("x/README.md", ["/README.md"], False), ("README.md", ["/README.md"], True),
    ("draft-1.txt", ["draft-[0-9].txt"], True), ("draft-a.txt", ["draft-[!a].txt"], False)])
def test_globs(path, patterns, expected):
    assert matches(path, patterns) is expected


def test_source_label():
    meta = {"path": "docs/guide.pdf", "headings": ["1 Intro", "1.2 Install"], "page": 4}
    assert source_label(meta) == "guide.pdf › 1.2 Install (page 4)"
    assert source_label({**meta, "page_end": 5}) == "guide.pdf › 1.2 Install (pages 4-5)"
    assert source_label({"path": "a/notes.md", "headings": []}) == "notes.md"
    assert source_label({}, fallback="doc7") == "doc7"
    assert source_label(None) == ""


_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzé0123456789-_/()", min_size=1,
                 max_size=30)
_TEXT = st.lists(st.tuples(_WORDS, st.sampled_from([" ", " ", ". ", "\n", "! "])),
                 min_size=1, max_size=80).map(lambda ws: "".join(w + s for w, s in ws).strip())
_BLOCK = st.one_of(
    st.builds(lambda t, n: Block("heading", " ".join(t.split()), level=n), _TEXT,
              st.integers(1, 4)),
    st.builds(Block, st.sampled_from(["paragraph", "list", "code", "table"]), _TEXT))


@settings(max_examples=60, deadline=None)
@given(st.lists(_BLOCK, min_size=1, max_size=12), st.integers(16, 80), st.data())
def test_passages_cover_every_character_within_budget(blocks, budget, data):
    """Nothing is lost: every non-space character of the extracted text is in a passage;
    every passage is its slice and within the budget (counted by the tokenizer)."""
    blocks = [b for b in blocks if b.text.strip()]
    overlap = data.draw(st.integers(0, budget - 1))
    text, chunks = chunk_blocks(blocks, ChunkSettings(max_tokens=budget, overlap_tokens=overlap))
    covered = bytearray(len(text))
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text and c.text.strip()
        assert ntok(c.text) == c.tokens <= budget
        covered[c.char_start:c.char_end] = b"\x01" * (c.char_end - c.char_start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))
    assert [c.char_start for c in chunks] == sorted(c.char_start for c in chunks)
