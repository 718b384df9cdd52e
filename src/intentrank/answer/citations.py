"""The ``[n]`` citations an answer makes to the numbered passages of its prompt
(:func:`intentrank.llm.prompts.format_passages`); markers read by
:func:`intentrank.llm.parsing.citation_numbers`, shared with the label-free LLM Citation
Score."""

from __future__ import annotations

import re
from dataclasses import dataclass

from intentrank.llm.parsing import CITATION_MARKER, citation_numbers, normalise

ABSTENTION = "The documents do not answer this question."


def is_abstention(text: str) -> bool:
    """Whether the answer says the documents do not answer (the prompt's exact words, or
    close to them)."""
    norm = normalise(text)
    return norm.startswith(("the documents do not answer", "the documents don t answer",
                            "no document answers"))


@dataclass(frozen=True)
class CheckedCitations:
    """An answer's text with citations outside ``1..n`` and malformed markers removed, the
    valid numbers (first-cited order, no repeats), the removed numbers and the removed
    malformed markers as written (``[1-2-3]``)."""

    text: str
    valid: tuple[int, ...]
    dropped: tuple[int, ...]
    malformed: tuple[str, ...] = ()

    @property
    def invalid(self) -> bool:
        """Whether anything was removed (a number outside ``1..n`` or a malformed marker)."""
        return bool(self.dropped or self.malformed)


def check_citations(text: str, n_sources: int) -> CheckedCitations:
    """Read every ``[n]``, ``[n, m]``, ``[n-m]`` and mixed (``[n, m-k]``) marker (the shared
    :func:`~intentrank.llm.parsing.citation_numbers`); numbers outside ``1..n_sources`` are
    dropped, and so is a marker left with none or malformed (``[1-2-3]``); the rest of the
    text is untouched. Never raises."""
    valid: list[int] = []
    dropped: list[int] = []
    malformed: list[str] = []

    def keep(match: re.Match[str]) -> str:
        numbers = citation_numbers(match.group(1))
        if numbers is None:
            malformed.append(match.group(0))
            return ""
        good = [n for n in numbers if 1 <= n <= n_sources]
        dropped.extend(n for n in numbers if not 1 <= n <= n_sources)
        valid.extend(n for n in good if n not in valid)
        return "".join(f"[{n}]" for n in good)

    cleaned = CITATION_MARKER.sub(keep, text)
    cleaned = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", cleaned)).strip()
    return CheckedCitations(cleaned, tuple(valid), tuple(dict.fromkeys(dropped)),
                            tuple(malformed))
