"""Where stages and fusion methods register themselves, and what their factories get.

A stage module registers its config name next to its class::

    @register_stage("bm25")
    def _bm25(ctx: BuildContext, params: dict) -> Stage:
        return BM25Retriever(ctx.require_index("bm25"), **params)

and a fusion class registers its ``method`` with ``@register_fuser``: one table
(:data:`REGISTRY`), one lookup (:func:`lookup`), one error for a name registered twice or
unknown. The registry names no package above the core: the layer that builds pipelines
(``intentrank.pipelines``) gives it the stage packages (:func:`add_stage_packages`), imported
on the first lookup (:func:`load_builtins`), then the installed plugins (:func:`load_plugins`;
prompt directories: :func:`plugin_prompt_dirs`).
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
    from intentrank.core.protocols import IndexLike, LLMLike, StageLike


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


StageFactory = Callable[[BuildContext, dict[str, Any]], "StageLike"]
RESERVED = ("cutoff", "fuse")  # the config grammar's own keys, never a registered name


@dataclass(frozen=True)
class Registration:
    """One registered name: a stage (a config step ``{name: params}``) or a fusion method
    (``fuse: {method: name, inputs: [...]}``). Both are built the same way,
    ``factory(ctx, params)``; a fusion's ``params`` hold its built branches as ``inputs``."""

    name: str
    factory: StageFactory
    renamed: dict[str, str]  # old parameter name -> new name (refused in configs)
    origin: Any  # what was registered: the stage factory or the fusion class
    fusion: bool = False

    @property
    def kind(self) -> str:
        return "fusion method" if self.fusion else "stage"

    def describe(self) -> str:
        o = self.origin
        return f"{self.kind} {getattr(o, '__module__', '?')}.{getattr(o, '__qualname__', o)}"


REGISTRY: dict[str, Registration] = {}  # every stage and fusion method, by name


def register(entry: Registration) -> None:
    """Add a name to the registry; the one check for every kind: a name is registered once
    (registering the same factory or class again is a no-op) and is not a grammar key."""
    if entry.name in RESERVED:
        raise ConfigError(f"{entry.describe()} cannot be registered as {entry.name!r}: "
                          f"{', '.join(RESERVED)} are keys of the config grammar")
    old = REGISTRY.get(entry.name)
    if old is not None and old.origin is not entry.origin:
        raise ConfigError(f"two registrations of the name {entry.name!r}: {old.describe()} "
                          f"and {entry.describe()}")
    REGISTRY[entry.name] = entry


def register_stage(name: str, renamed: dict[str, str] | None = None
                   ) -> Callable[[StageFactory], StageFactory]:
    """Make a stage buildable from configs under ``name`` (decorates its factory).
    ``renamed``: old parameter name -> new name; configs that use an old name are refused
    with a message naming the new one."""

    def deco(factory: StageFactory) -> StageFactory:
        register(Registration(name, factory, dict(renamed or {}), factory))
        return factory

    return deco


def register_fuser(cls: type) -> type:
    """Make a fusion class usable as ``fuse: {method: <cls.method>}``: the same registry as
    :func:`register_stage`, under the class's ``method`` name, its old parameter names from
    ``cls.renamed``, built by ``cls.from_config(branches, ctx, **params)`` when the class
    has one (a fusion that needs the LLM), else ``cls(branches, **params)``."""
    method = getattr(cls, "method", None)
    if not isinstance(method, str) or not method:
        raise ConfigError(f"fusion class {cls.__name__} has no 'method' name to register")

    def factory(ctx: BuildContext, params: dict[str, Any]) -> StageLike:
        params = dict(params)
        branches = params.pop("inputs")
        if hasattr(cls, "from_config"):
            return cls.from_config(branches, ctx, **params)
        return cls(branches, **params)

    register(Registration(method, factory, dict(getattr(cls, "renamed", {})), cls, fusion=True))
    return cls


STAGE_PACKAGES: list[str] = []  # given by a higher layer (intentrank.pipelines), in order
_IMPORTED: set[str] = set()
_PLUGINS_LOADED = False


def add_stage_packages(*packages: str) -> None:
    """Name packages whose modules register stages (each package's ``__init__`` imports its
    modules with :func:`import_submodules`); they are imported on the next lookup. The core
    names none itself: ``intentrank.pipelines`` gives the built-in ones."""
    for package in packages:
        if package not in STAGE_PACKAGES:
            STAGE_PACKAGES.append(package)


# Package entry point groups of third-party plugins: a stage or fusion plugin names a module
# whose import registers it; a prompt plugin names a package (or a module attribute holding
# a directory path) of prompt contract files.
PLUGIN_GROUPS = ("intentrank.stages", "intentrank.fusers")
PROMPT_GROUP = "intentrank.prompts"


def load_builtins() -> None:
    """Import the stage packages given so far (each once) so their registrations run, then
    the installed plugins (once)."""
    global _PLUGINS_LOADED
    for package in list(STAGE_PACKAGES):
        if package not in _IMPORTED:
            importlib.import_module(package)
            _IMPORTED.add(package)
    if not _PLUGINS_LOADED:
        _PLUGINS_LOADED = True
        load_plugins()


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


def lookup(name: str, fusion: bool = False) -> Registration:
    """The registration of stage ``name`` (with ``fusion=True``: of fusion method ``name``);
    ConfigError ``unknown stage 'x'; known: ...`` (or ``unknown fusion method``) otherwise."""
    load_builtins()
    entry = REGISTRY.get(name)
    if entry is not None and entry.fusion == fusion:
        return entry
    what = "fusion method" if fusion else "stage"
    known = known_names(fusion=fusion) + ([] if fusion else list(RESERVED))
    hint = f" ({name!r} is a {entry.kind})" if entry is not None else ""
    if not STAGE_PACKAGES:
        hint += (" (no stage package was given to the registry: build through "
                 "intentrank.pipelines, which gives it the built-in ones)")
    raise ConfigError(f"unknown {what} {name!r}{hint}; known: {', '.join(sorted(known))}")


def stage_factory(name: str) -> StageFactory | None:
    """The factory of stage ``name``, or None."""
    load_builtins()
    entry = REGISTRY.get(name)
    return entry.factory if entry is not None and not entry.fusion else None


def known_names(fusion: bool | None = None) -> list[str]:
    """Registered names, sorted: stages (``fusion=False``), fusion methods (``True``) or
    both (None)."""
    load_builtins()
    return sorted(n for n, e in REGISTRY.items() if fusion is None or e.fusion == fusion)
