"""Counts the real models loaded in this pytest session, by model, and prints the counts at
the end of the run ("real model loads"): a sentence-transformers ``SentenceTransformer`` or
``CrossEncoder``, an ONNX Runtime ``InferenceSession`` (the int8 MiniLM embedder, the bundled
cross-encoder) and a llama.cpp ``xllamacpp.Server`` (the embedded Qwen models). Each is
counted when constructed, so a model kept in a session fixture or a process-level cache
counts once however many tests use it. The libraries are patched as they are first imported
(this plugin imports none of them). The ``model_loads`` fixture is the counter itself.

The session also keeps one of each real shipped model for the life of the process:
:func:`~intentrank.models.embedder.load_embedder` for MiniLM and
:func:`~intentrank.models.cross_encoder.load_cross_encoder` for the bundled cross-encoder are
replaced, before any test module is imported, by versions that load each (model, settings)
once and hand every later caller (a test, an index, a pipeline stage) the same object. Other
models (the tiny ones tests write) load as they are asked for. The embedded LLMs are kept by
:mod:`intentrank.llm.embedded` itself (one server per model file and settings). Under
pytest-xdist (``-n 2``) each worker process keeps its own, and the summary adds up the
workers' counts."""

from __future__ import annotations

import importlib.abc
import inspect
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

LOADS: Counter[str] = Counter()


def _short(where: Any) -> str:
    """A model's name: the last two parts of a path, a hub name as it is."""
    parts = Path(str(where)).parts
    return "/".join(parts[-2:]) if len(parts) > 1 else str(where)


def _count_init(cls: type, kind: str, arg: str) -> None:
    init = cls.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        where = args[0] if args else kwargs.get(arg)
        if isinstance(where, (bytes, bytearray)):  # a file read by the caller, as `path`
            where = sys._getframe(1).f_locals.get("path", f"<{len(where)} bytes>")
        LOADS[f"{kind} {_short(where)}"] += 1
        init(self, *args, **kwargs)

    cls.__init__ = counted  # type: ignore[misc]


def _sentence_transformers(module: ModuleType) -> None:
    _count_init(module.SentenceTransformer, "sentence-transformers",
                "model_name_or_path")
    _count_init(module.CrossEncoder, "sentence-transformers CrossEncoder",
                "model_name_or_path")


def _onnxruntime(module: ModuleType) -> None:
    _count_init(module.InferenceSession, "onnxruntime", "path_or_bytes")


def _xllamacpp(module: ModuleType) -> None:
    server = module.Server

    def counted(params: Any, *args: Any, **kwargs: Any) -> Any:
        LOADS[f"llama.cpp {Path(params.model.path).name}"] += 1
        return server(params, *args, **kwargs)

    module.Server = counted


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "sentence_transformers": _sentence_transformers,
    "onnxruntime": _onnxruntime,
    "xllamacpp": _xllamacpp,
}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of the modules in PATCHES."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


for _name, _patch in PATCHES.items():
    if _name in sys.modules:
        _patch(sys.modules[_name])
sys.meta_path.insert(0, _PatchOnImport())


SHARED: Counter[str] = Counter()  # loads answered from the session's models
ORIGINALS: dict[str, Callable[..., Any]] = {}  # the unshared loaders, for tests of sharing


def _load_once(module: ModuleType, name: str, shared: Callable[[dict], bool]) -> None:
    """Replace ``module.name`` by a loader that keeps what it loads when ``shared(arguments)``
    (keyed by the arguments, defaults filled in)."""
    load, kept = getattr(module, name), {}
    ORIGINALS[name] = load
    signature = inspect.signature(load)

    def load_once(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if not shared(bound.arguments):
            return load(*args, **kwargs)
        key = repr(sorted(bound.arguments.items()))
        if key in kept:
            SHARED[name] += 1
        else:
            kept[key] = load(*args, **kwargs)
        return kept[key]

    setattr(module, name, load_once)


def _shared_models() -> None:
    from intentrank.models import cross_encoder, embedder

    def bundled(arguments: dict) -> bool:
        if arguments["model"] is None or str(arguments["model"]) == cross_encoder.BUNDLED:
            arguments["model"] = None  # the same model under both names
            return True
        return False

    _load_once(embedder, "load_embedder",
               lambda arguments: arguments["name"] == embedder.DEFAULT_EMBEDDER)
    _load_once(cross_encoder, "load_cross_encoder", bundled)


_shared_models()


@pytest.fixture()
def model_loads() -> Counter[str]:
    """The session's model load counts (``"<library> <model>"`` to loads so far)."""
    return LOADS


def pytest_sessionfinish(session: Any) -> None:
    """On a pytest-xdist worker: hand this process's counts to the controller."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["model_loads"], out["model_loads_shared"] = dict(LOADS), dict(SHARED)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown without the plugin
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the controller of a ``-n`` run: add up the workers' counts (one model per worker)."""
    out = getattr(node, "workeroutput", {}) or {}
    LOADS.update(out.get("model_loads", {}))
    SHARED.update(out.get("model_loads_shared", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not LOADS and not SHARED:
        return
    terminalreporter.section("real model loads")
    for name, n in sorted(LOADS.items()):
        terminalreporter.write_line(f"{n:3d}  {name}")
    for name, n in sorted(SHARED.items()):
        terminalreporter.write_line(f"{n:3d}  {name} calls answered by the session's model")
