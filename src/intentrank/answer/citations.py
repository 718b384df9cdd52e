"""Numbered passages in a prompt, and the ``[n]`` citations an answer makes to them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from intentrank.llm.parsing import normalise

ABSTENTION = "The documents do not answer this question."
_MARKER = re.compile(r"\[\s*(\d+(?:\s*[,;-]\s*\d+)*)\s*\]")
_NUMBER = re.compile(r"\d+")


def format_passages(texts: Sequence[str], max_words: int = 150) -> str:
    """Numbered passages, ``[1] text`` (each cut to ``max_words`` words), one per line."""
    return "\n".join(f"[{i}] {' '.join(t.split()[:max_words])}"
                     for i, t in enumerate(texts, 1))


def _numbers(marker: str) -> list[int]:
    """``1``, ``1, 3`` or ``2-4`` (a range) as numbers."""
    if "-" in marker:
        a, b = (int(x) for x in marker.split("-", 1) if x.strip())
        return list(range(a, b + 1)) if 0 < b - a < 20 else [a, b]
    return [int(x) for x in _NUMBER.findall(marker)]


def is_abstention(text: str) -> bool:
    """Whether the answer says the documents do not answer (the prompt's exact words, or
    close to them)."""
    norm = normalise(text)
    return norm.startswith(("the documents do not answer", "the documents don t answer",
                            "no document answers"))


@dataclass(frozen=True)
class CheckedCitations:
    """An answer's text with citations outside ``1..n`` removed, the valid numbers (first-
    cited order, no repeats) and the removed ones."""

    text: str
    valid: tuple[int, ...]
    dropped: tuple[int, ...]


def check_citations(text: str, n_sources: int) -> CheckedCitations:
    """Read every ``[n]``, ``[n, m]`` and ``[n-m]`` marker; numbers outside ``1..n_sources``
    are dropped and so is a marker left with none (the rest of the text is untouched)."""
    valid: list[int] = []
    dropped: list[int] = []

    def keep(match: re.Match[str]) -> str:
        numbers = _numbers(match.group(1))
        good = [n for n in numbers if 1 <= n <= n_sources]
        dropped.extend(n for n in numbers if not 1 <= n <= n_sources)
        valid.extend(n for n in good if n not in valid)
        return "".join(f"[{n}]" for n in good)

    cleaned = _MARKER.sub(keep, text)
    cleaned = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", cleaned)).strip()
    return CheckedCitations(cleaned, tuple(valid), tuple(dict.fromkeys(dropped)))
