"""A conversation's history as prompt text, cut to fit the model's context.

Truncation policy (what :func:`render_dialog` keeps when the history is longer than
``max_words``): every answer is clipped to its first ``max_answer_words`` words and every
earlier question to its first ``max_question_words``; the FIRST turn is always kept (it
usually sets the topic) and so is the LAST one (what "it" most likely refers to), then
the most recent turns that still fit, newest first; the turns in between are replaced by
one line saying how many were left out. The current question is never cut.
Words are whitespace-separated tokens (about 1.3 model tokens each in English).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from intentrank.types import Turn


@dataclass(frozen=True)
class Dialog:
    """Rendered history: the prompt text and how many earlier turns were left out."""

    text: str
    kept: int
    omitted: int


def clip_words(text: str, n: int) -> str:
    """The first ``n`` words of ``text`` (whitespace collapsed), with "..." when cut."""
    words = text.split()
    return " ".join(words) if len(words) <= n else " ".join(words[:n]) + " ..."


def _lines(turn: Turn, questions_only: bool, max_question_words: int,
           max_answer_words: int) -> list[str]:
    lines = [f"User: {clip_words(turn.question, max_question_words)}"]
    if turn.answer.strip() and not questions_only:
        lines.append(f"Assistant: {clip_words(turn.answer, max_answer_words)}")
    return lines


def render_dialog(history: Sequence[Turn], *, questions_only: bool = False,
                  max_words: int = 500, max_answer_words: int = 60,
                  max_question_words: int = 60) -> Dialog:
    """The earlier turns as ``User: ...`` / ``Assistant: ...`` lines (only the user's with
    ``questions_only``), cut to about ``max_words`` words by the policy above."""
    if not history:
        return Dialog("", 0, 0)
    blocks = [_lines(t, questions_only, max_question_words, max_answer_words)
              for t in history]
    sizes = [sum(len(line.split()) for line in b) for b in blocks]
    last = len(blocks) - 1
    keep = {0, last}
    used = sizes[0] + (sizes[last] if last else 0)
    for i in range(last - 1, 0, -1):
        if used + sizes[i] > max_words:
            break
        keep.add(i)
        used += sizes[i]
    lines: list[str] = []
    omitted = 0
    for i, block in enumerate(blocks):
        if i in keep:
            if omitted:
                lines.append(f"[{omitted} earlier turn{'s' if omitted > 1 else ''} "
                             f"left out]")
                omitted = 0
            lines.extend(block)
        else:
            omitted += 1
    return Dialog("\n".join(lines), len(keep), len(blocks) - len(keep))
