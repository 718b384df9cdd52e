"""Where stages and fusion methods register themselves, and what their factories get.

A stage module registers its config name next to its class::

    @register_stage("bm25")
    def _bm25(ctx: BuildContext, params: dict) -> Stage:
        return BM25Retriever(ctx.require_index("bm25"), **params)

and a fusion class registers its ``method`` with ``@register_fuser``. The built-in stage
packages are imported on first lookup (:func:`load_builtins`), so the registry itself depends
on nothing above it; so are installed plugins, after them: the modules their package entry
points name in the groups ``intentrank.stages`` and ``intentrank.fusers``
(:func:`load_plugins`). Plugin prompt directories (group ``intentrank.prompts``) are found by
:func:`plugin_prompt_dirs`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
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

# Package entry point groups of third-party plugins: a stage or fusion plugin names a module
# whose import registers it; a prompt plugin names a package (or a module attribute holding
# a directory path) of prompt contract files.
PLUGIN_GROUPS = ("intentrank.stages", "intentrank.fusers")
PROMPT_GROUP = "intentrank.prompts"


def load_builtins() -> None:
    """Import the built-in stage packages so their registrations run, then the installed
    plugins (once)."""
    global _LOADED
    if not _LOADED:
        for package in BUILTIN_PACKAGES:
            importlib.import_module(package)
        load_plugins()
        _LOADED = True


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=group), key=lambda ep: (ep.name, ep.value))


def _plugin_error(ep: metadata.EntryPoint, group: str, exc: BaseException) -> ConfigError:
    dist = getattr(ep.dist, "name", None)
    source = f" of package {dist!r}" if dist else ""
    return ConfigError(f"plugin entry point {ep.name!r} = {ep.value!r} (group {group!r}"
                       f"{source}) failed to load: {type(exc).__name__}: {exc}; fix or "
                       f"uninstall the plugin")


def load_plugins() -> None:
    """Import the module each ``intentrank.stages`` / ``intentrank.fusers`` entry point
    names, so its ``@register_stage`` / ``@register_fuser`` decorators run. A plugin that
    fails to import (or registers a name already taken) raises ConfigError naming the entry
    point and the error."""
    for group in PLUGIN_GROUPS:
        for ep in _entry_points(group):
            try:
                ep.load()
            except Exception as exc:
                raise _plugin_error(ep, group, exc) from exc


_PROMPT_DIRS: list[tuple[str, Any]] | None = None


def plugin_prompt_dirs() -> list[tuple[str, Any]]:
    """(entry point name, directory) for each ``intentrank.prompts`` entry point, found once.
    The entry point names a package (its directory: ``mypkg.prompts``), a module attribute
    holding a directory path (``mypkg:PROMPTS``) or a directory path; the directory holds
    ``<name>.yaml`` contracts. A missing or broken one raises ConfigError."""
    global _PROMPT_DIRS
    if _PROMPT_DIRS is None:
        found = []
        for ep in _entry_points(PROMPT_GROUP):
            try:
                if ":" in ep.value:
                    where: Any = Path(str(ep.load()))
                elif "/" in ep.value or "\\" in ep.value:
                    where = Path(ep.value)
                else:
                    where = resources.files(ep.value)
                if not where.is_dir():
                    raise NotADirectoryError(f"{where} is not a directory")
            except Exception as exc:
                raise _plugin_error(ep, PROMPT_GROUP, exc) from exc
            found.append((ep.name, where))
        _PROMPT_DIRS = found
    return _PROMPT_DIRS


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
