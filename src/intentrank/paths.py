"""Where intentrank keeps its caches and looks for its data sets."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def cache_dir() -> Path:
    """``$INTENTRANK_CACHE`` or ``~/.cache/intentrank``; created on first use."""
    root = Path(os.environ.get("INTENTRANK_CACHE", Path.home() / ".cache" / "intentrank"))
    root.mkdir(parents=True, exist_ok=True)
    return root


DEFAULT_DATA_DIR = Path("../shared/data")
"""The data sets' default folder, relative to the working directory (beside a checkout run
from its root)."""


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$INTENTRANK_DATA`` (when set and not empty; ``environ`` defaults to the process's),
    else ``../shared/data`` relative to the working directory; read at each call, never
    relative to the installed package."""
    env = os.environ if environ is None else environ
    return Path(env.get("INTENTRANK_DATA") or DEFAULT_DATA_DIR)
