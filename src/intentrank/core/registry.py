"""Where stages and fusion methods register themselves, and what their factories get.

A stage module registers its config name next to its class::

    @register_stage("bm25")
    def _bm25(ctx: BuildContext, params: dict) -> Stage:
        return BM25Retriever(ctx.require_index("bm25"), **params)

and a fusion class registers its ``method`` with ``@register_fuser``. The built-in stage
packages are imported on first lookup (:func:`load_builtins`), so the registry itself depends
on nothing above it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from intentrank.errors import ConfigError

if TYPE_CHECKING:
    from intentrank.core.protocols import IndexLike, LLMLike
    from intentrank.core.stage import Stage

BUILTIN_PACKAGES = ("intentrank.retrieve", "intentrank.fuse", "intentrank.query",
                    "intentrank.rerank", "intentrank.answer")


@dataclass
class BuildContext:
    """What stage factories may need: the index, the shared LLM and other shared resources
    (loaded models), created once per pipeline config.

    ``make_llm(role, spec)`` builds (once per model) the LLM client of a step
    (``intentrank.pipelines`` supplies one from the ``--llm`` spec: the embedded default picks
    each role's measured model, see ``llm/roles.py``); a client handed in as
    ``resources['llm']`` serves every step that does not name its own.
    """

    index: IndexLike | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    make_llm: Callable[..., LLMLike] | None = None

    def llm(self, role: str | None = None, spec: str | None = None) -> LLMLike:
        """The LLM client of a step: its own ``spec`` (the step's ``llm:`` parameter) if
        given, else the client handed in, else the model for its ``role``."""
        handed = self.resources.get("llm")
        if spec is None and handed is not None and not isinstance(handed, str):
            return handed
        if spec is not None and not isinstance(spec, str):
            raise ConfigError(f"llm: expected an LLM spec string, got {spec!r}")
        if self.make_llm is None:
            raise ConfigError("this pipeline has LLM stages but no LLM was configured")
        return self.make_llm(role, spec)

    def step_llm(self, role: str, params: dict[str, Any]) -> LLMLike:
        """The LLM of a step of ``role`` whose config ``params`` may name its own with
        ``llm: <spec>`` (taken out of ``params``)."""
        return self.llm(role, params.pop("llm", None))

    def require_index(self, stage: str) -> IndexLike:
        if self.index is None:
            raise ConfigError(f"stage {stage!r} needs an index: pass --index or set 'index:' "
                              f"in the config")
        return self.index


StageFactory = Callable[[BuildContext, dict[str, Any]], "Stage"]
STAGES: dict[str, StageFactory] = {}
FUSERS: dict[str, Callable[..., Stage]] = {}
RENAMED: dict[str, dict[str, str]] = {}  # stage -> {old parameter name: new name}


def register_stage(name: str, renamed: dict[str, str] | None = None
                   ) -> Callable[[StageFactory], StageFactory]:
    """Make a stage buildable from configs under ``name`` (decorates its factory).
    ``renamed``: old parameter name -> new name; configs that use an old name are refused
    with a message naming the new one."""

    def deco(factory: StageFactory) -> StageFactory:
        if name in STAGES and STAGES[name] is not factory:
            raise ConfigError(f"two stages register the config name {name!r}")
        STAGES[name] = factory
        RENAMED[name] = dict(renamed or {})
        return factory

    return deco


def register_fuser(cls: type) -> type:
    """Make a fusion class usable as ``fuse: {method: <cls.method>}``; a second class
    under the same method name is refused (ConfigError), as :func:`register_stage` does."""
    method = getattr(cls, "method", None)
    if not isinstance(method, str) or not method:
        raise ConfigError(f"fusion class {cls.__name__} has no 'method' name to register")
    if method in FUSERS and FUSERS[method] is not cls:
        raise ConfigError(f"two fusions register the method name {method!r}")
    FUSERS[method] = cls
    return cls


_LOADED = False


def load_builtins() -> None:
    """Import the built-in stage packages so their registrations run (once)."""
    global _LOADED
    if not _LOADED:
        for package in BUILTIN_PACKAGES:
            importlib.import_module(package)
        _LOADED = True


def import_submodules(package: str, path: list[str]) -> None:
    """Import every module of a stage package, so a new stage file registers itself without
    editing any other file (each stage package's ``__init__`` calls this)."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")


def stage_factory(name: str) -> StageFactory | None:
    load_builtins()
    return STAGES.get(name)


def fuser(method: str) -> Callable[..., Stage]:
    """The fusion class registered for ``method`` (``rrf``, ``weighted``, ...)."""
    load_builtins()
    if method not in FUSERS:
        raise ConfigError(f"unknown method {method!r}; use {', '.join(sorted(FUSERS))}")
    return FUSERS[method]


def renamed_parameters(name: str) -> dict[str, str]:
    """Old parameter name -> new name, for the stage registered as ``name``."""
    load_builtins()
    return RENAMED.get(name, {})


def known_names() -> list[str]:
    load_builtins()
    return sorted(STAGES)
