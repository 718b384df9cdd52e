"""Checks for the numbers and names stages, fusers and LLM clients are built with.

Every check raises :class:`ParameterError`, which is both a :class:`ConfigError` (so configs
and the CLI report it as ``error: ...``) and a :class:`ValueError` (what Python callers of a
constructor expect). Messages name the parameter and repeat the value given.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from intentrank.errors import ConfigError


class ParameterError(ConfigError, ValueError):
    """A parameter outside its allowed range or of the wrong type."""


# One name per meaning: what a stage parameter of each of these names means, in every stage.
# ``cutoff: N`` (``a % N``) keeps the top N; ``search(text, k)`` and ``-k`` show the top k.
MEANINGS = {
    "depth": "how many documents a retriever returns",
    "top_k": "how many of the incoming candidates a reranker rescores",
    "rrf_k": "the RRF constant in 1 / (rrf_k + rank)",
}
RENAMED_AFTER = "0.1.0"  # the release whose configs still said k (and listwise depth)


def refuse_renamed(where: str, params: Any, renamed: Mapping[str, str]) -> None:
    """Refuse a parameter given by an old name, naming the new one (an old ``k`` must not be
    accepted silently, nor reported as a mere unknown keyword)."""
    for old, new in renamed.items():
        if isinstance(params, Mapping) and old in params:
            meaning = f": {new!r} is {MEANINGS[new]}" if new in MEANINGS else ""
            raise ParameterError(f"{where}: unknown parameter {old!r}; did you mean {new!r}? "
                                 f"(renamed after {RENAMED_AFTER}{meaning})")


def check_int(name: str, value: Any, minimum: int | None = 1,
              maximum: int | None = None) -> int:
    """``value`` as an int within ``[minimum, maximum]``; bools and floats are refused
    (``k: 10.5`` or ``k: true`` in a config is a mistake, not a number of documents)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ParameterError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_optional_int(name: str, value: Any, minimum: int | None = 1) -> int | None:
    return None if value is None else check_int(name, value, minimum)


def check_number(name: str, value: Any, *, minimum: float | None = None,
                 above: float | None = None, maximum: float | None = None) -> float:
    """``value`` as a finite float; ``minimum`` is inclusive, ``above`` exclusive."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ParameterError(f"{name} must be a finite number, got {value}")
    if minimum is not None and value < minimum:
        raise ParameterError(f"{name} must be >= {minimum:g}, got {value:g}")
    if above is not None and value <= above:
        raise ParameterError(f"{name} must be > {above:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{name} must be <= {maximum:g}, got {value:g}")
    return value


def check_weights(weights: Any, n: int | None = None, name: str = "weights",
                  allow_all_zero: bool = True) -> list[float]:
    """A list of finite, non-negative weights (``n`` of them when given)."""
    if isinstance(weights, str | bytes | Mapping) or not hasattr(weights, "__len__") \
            or not hasattr(weights, "__getitem__"):
        raise ParameterError(f"{name} must be a list of numbers, got {weights!r}")
    if n is not None and len(weights) != n:
        raise ParameterError(f"got {len(weights)} {name} for {n} rankings")
    out = []
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise ParameterError(f"{name} must be numbers, got {list(weights)!r}")
        if not math.isfinite(float(w)):
            raise ParameterError(f"{name} must be finite, got {list(weights)!r}")
        if w < 0:
            raise ParameterError(f"{name} must be non-negative, got {list(weights)!r}")
        out.append(float(w))
    if not allow_all_zero and out and not any(out):
        raise ParameterError(f"{name} are all zero, so every document would score 0: "
                             f"{list(weights)!r}")
    return out


def check_bool(name: str, value: Any) -> bool:
    """``value`` when it is a bool (``structured: "no"`` in a config is a mistake)."""
    if not isinstance(value, bool):
        raise ParameterError(f"{name} must be true or false, got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(f"unknown {name} {value!r}; use {', '.join(choices)}")
    return value


__all__ = ["MEANINGS", "ParameterError", "check_bool", "check_choice", "check_int", "check_number",
           "check_optional_int", "check_weights", "refuse_renamed"]
