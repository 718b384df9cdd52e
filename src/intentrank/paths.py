"""Where intentrank keeps its caches."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$INTENTRANK_CACHE`` or ``~/.cache/intentrank``; created on first use."""
    root = Path(os.environ.get("INTENTRANK_CACHE", Path.home() / ".cache" / "intentrank"))
    root.mkdir(parents=True, exist_ok=True)
    return root
