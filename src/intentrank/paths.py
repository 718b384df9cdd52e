"""Where intentrank keeps its caches and looks for its data sets."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$INTENTRANK_CACHE`` or ``~/.cache/intentrank``; created on first use."""
    root = Path(os.environ.get("INTENTRANK_CACHE", Path.home() / ".cache" / "intentrank"))
    root.mkdir(parents=True, exist_ok=True)
    return root


DEFAULT_DATA_DIR = Path("../shared/data")
"""The data sets' default folder, relative to the working directory (beside a checkout run
from its root)."""


def default_data_dir() -> Path:
    """``$INTENTRANK_DATA`` (when set and not empty), else ``../shared/data`` relative to the
    working directory; read at each call, never relative to the installed package."""
    return Path(os.environ.get("INTENTRANK_DATA") or DEFAULT_DATA_DIR)
