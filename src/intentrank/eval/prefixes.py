"""Canonical descriptions of pipeline prefixes, and the memoising wrapper that shares a
prefix's outputs between the pipelines of an experiment (:mod:`intentrank.eval.harness`).

:func:`canonical` is a stage's ``describe()`` plus a digest of every parameter (so
``describe()`` leaving one out cannot merge two computations): sets sorted, other objects by
their public attributes, models, LLM clients and indexes by name or path plus their
constructor parameters. :func:`share_prefixes` wraps every step and fusion branch of a
pipeline in :class:`~intentrank.core.cache.Cached` under the canonical description of the
prefix that ends with it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import re
from enum import Enum
from pathlib import Path
from typing import Any

from intentrank.core.cache import Cached
from intentrank.core.stage import Chain, Cutoff, Stage

_IDENTITY = ("name", "model", "path", "generation")  # what names a model, LLM or index
_MAX_DEPTH = 8
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _fingerprint(value: Any, seen: frozenset[int] = frozenset(), shallow: bool = False) -> str:
    """A stable text that differs wherever two parameter values differ.

    Plain values by value; lists, tuples, dicts and sets (sorted) element by element;
    dataclasses by their fields; arrays by their bytes; functions by their qualified name,
    code and closure; *named* objects (a str or Path ``name`` or ``path``: models, LLM
    clients, indexes) by type, ``name``/``model``/``path``/``generation`` and the
    attributes named like their constructor's parameters (a run counter does not change the
    key; an unnamed object among them, e.g. the loaded model the name names, by type only:
    ``shallow``); any other object by type and its public attributes, recursively (or its
    repr, addresses removed, when it has none). Cycles and depth beyond 8 end in the type
    name.
    """
    if value is None or isinstance(value, bool | int | float | complex):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else hashlib.sha1(value.encode()).hexdigest()
    if isinstance(value, bytes):
        return "b:" + hashlib.sha1(value).hexdigest()
    if isinstance(value, Path):
        return f"Path({str(value)!r})"
    if isinstance(value, Enum):
        return f"{_type_name(value)}.{value.name}"
    if isinstance(value, Stage):
        return canonical(value)
    if id(value) in seen or len(seen) >= _MAX_DEPTH:
        return f"<{_type_name(value)}>"
    seen = seen | {id(value)}

    def fp(v: Any) -> str:
        return _fingerprint(v, seen, shallow)

    if isinstance(value, list | tuple):
        return "[" + ",".join(fp(v) for v in value) + "]"
    if isinstance(value, set | frozenset):
        return "set{" + ",".join(sorted(fp(v) for v in value)) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{fp(k)}:{fp(v)}" for k, v in
                              sorted(value.items(), key=lambda kv: fp(kv[0]))) + "}"
    if isinstance(value, type):
        return _type_name(value, of_type=True)
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return f"{_type_name(value)}{fp(fields)}"
    if hasattr(value, "tobytes") and hasattr(value, "dtype"):  # numpy arrays
        shape = getattr(value, "shape", ())
        return f"array({value.dtype},{shape},{hashlib.sha1(value.tobytes()).hexdigest()})"
    if isinstance(value, functools.partial):
        return f"partial({fp(value.func)},{fp(value.args)},{fp(value.keywords)})"
    if inspect.ismethod(value):
        return f"{fp(value.__func__)}@{fp(value.__self__)}"
    if inspect.isfunction(value):
        code = value.__code__
        cells = tuple(c.cell_contents for c in value.__closure__ or ()
                      if _has_contents(c))
        return (f"{value.__module__}.{value.__qualname__}:"
                f"{hashlib.sha1(code.co_code).hexdigest()[:12]}"
                f"{fp(value.__defaults__)}{fp(cells)}")
    if inspect.isbuiltin(value) or inspect.isroutine(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', value)}"
    return _object_fingerprint(value, seen, shallow)


def _type_name(value: Any, of_type: bool = False) -> str:
    cls = value if of_type else type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _object_fingerprint(value: Any, seen: frozenset[int], shallow: bool) -> str:
    """Any other object: see :func:`_fingerprint`."""
    identity = {}
    for attr in _IDENTITY:
        try:
            found = getattr(value, attr, None)
        except Exception:  # noqa: BLE001 (a property that fails names nothing)
            continue
        if isinstance(found, str | Path | int) and not isinstance(found, bool):
            identity[attr] = found
    named = "name" in identity or "path" in identity
    if shallow and not named:
        return f"<{_type_name(value)}>"
    public = {k: v for k, v in getattr(value, "__dict__", {}).items()
              if not k.startswith("_") and k not in identity}
    if named:
        try:
            params = set(inspect.signature(type(value)).parameters)
        except (TypeError, ValueError):
            params = set()
        public = {k: v for k, v in public.items() if k in params}
    text = (_type_name(value) + _fingerprint(identity, seen)
            + _fingerprint(public, seen, shallow or named))
    if not identity and not public and type(value).__repr__ is not object.__repr__:
        text += _ADDRESS.sub("", repr(value))
    return text


def canonical(stage: Stage) -> str:
    """The stage's ``describe()`` followed by a digest of all its parameters (those
    ``describe()`` leaves out too): equal keys mean the same computation."""
    if isinstance(stage, Cached):
        return canonical(stage.stage)
    if isinstance(stage, Chain):
        return " >> ".join(canonical(s) for s in stage.stages)
    state = _fingerprint({k: v for k, v in vars(stage).items() if not k.startswith("_")})
    return f"{stage.describe()} #{hashlib.sha1(state.encode()).hexdigest()[:12]}"


def share_prefixes(stage: Stage, store: dict, prefix: str = "") -> Stage:
    """``stage`` with every step and every sub-stage (fusion branches, a reranker inside
    RRF-with-input) memoised in ``store`` under the key of the prefix ending with it; stages
    are changed in place (their sub-stages replaced by memoised ones)."""
    if isinstance(stage, Chain):
        steps = []
        for step in stage.stages:
            steps.append(share_prefixes(step, store, prefix))
            prefix = f"{prefix} >> {canonical(step)}" if prefix else canonical(step)
        return Chain(steps)
    if isinstance(stage, Cutoff | Cached):
        return stage
    key = f"{prefix} >> {canonical(stage)}" if prefix else canonical(stage)
    for attr, value in list(vars(stage).items()):
        if isinstance(value, Stage):
            setattr(stage, attr, share_prefixes(value, store, prefix))
        elif isinstance(value, list) and value and all(isinstance(v, Stage) for v in value):
            setattr(stage, attr, [share_prefixes(v, store, prefix) for v in value])
    return Cached(stage, store.setdefault(key, {}))


__all__ = ["canonical", "share_prefixes"]
