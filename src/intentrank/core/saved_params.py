"""Named parameter sets: tuned weights saved as JSON under the cache directory, loaded by name
from pipeline configs (``fuq: {params: fuq-scifact}``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from intentrank.errors import ConfigError
from intentrank.paths import cache_dir


def params_path(name: str) -> Path:
    """Where a named parameter set lives (a path ending in .json is used as is)."""
    if name.endswith(".json"):
        return Path(name)
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(f"parameter set names use letters, digits, '-', '_' and '.': {name!r}")
    return cache_dir() / "params" / f"{name}.json"


def save_params(name: str, result: Any, **meta: Any) -> Path:
    """Save tuned weights (a ``TuneResult``: best, metric, score, n_queries, table) with how
    they were obtained (dataset, split, metric, ...)."""
    path = params_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"params": result.best, "metric": result.metric, "score": result.score,
              "n_queries": result.n_queries, **meta,
              "top": [{"params": p, "score": s} for p, s in result.table[:10]]}
    path.write_text(json.dumps(record, indent=1))
    return path


def load_params(name: str) -> dict[str, float]:
    """The weights of a saved parameter set."""
    path = params_path(name)
    if not path.is_file():
        raise ConfigError(f"no saved parameter set {name!r} (looked for {path}); tune one "
                          f"first, e.g. `intentrank tune-fuq`")
    return dict(json.loads(path.read_text())["params"])
