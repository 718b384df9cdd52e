"""Include/exclude globs over '/'-separated relative paths: ``*`` and ``?`` within one path
segment, ``**`` across segments (``docs/**/*.md``), ``[...]`` classes; a pattern without a
'/' matches the file's name in any folder (``*.pdf``, ``draft-*``), one starting with '/'
only from the top (``/README.md``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from intentrank.core.params import ParameterError


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` as a regular expression over a whole relative path."""
    if not pattern.strip("/"):
        raise ParameterError(f"empty glob pattern {pattern!r}")
    anchored = pattern.startswith("/")  # '/README.md': the top folder's only
    pattern = pattern.lstrip("/")
    if "/" not in pattern and not anchored:
        pattern = "**/" + pattern
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                raise ParameterError(f"unclosed '[' in glob {pattern!r}")
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(path: str, patterns: Sequence[str]) -> bool:
    """Whether the relative ``path`` matches any of ``patterns``."""
    return any(glob_regex(p).match(path) for p in patterns)
