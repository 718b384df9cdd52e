"""The package layering: every module imports, no module imports from a higher layer, and
there are no import cycles (function-level imports included). An import inside an
``if TYPE_CHECKING:`` block is not run, but it is a tie all the same: it counts for cycles
(a circle of type hints is still a circle: filters <-> types and registry <-> stage were
such) and for layers, except in the package root, whose type-only imports are its public
names.

Imports by string count too: ``importlib.import_module("intentrank.x")``,
``import_submodules("intentrank.x", ...)``, ``__import__("intentrank.x")`` and any string
that names an intentrank module (``BUILTIN_PACKAGES = ("intentrank.retrieve", ...)``), so a
lower layer cannot reach up by naming a module. The package root ``intentrank/__init__.py``
is the lazy public facade (docs/architecture.md): it names modules of every layer by string
and is exempt from that rule only."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Longest prefix wins. A module may import from its own layer or lower ones.
LAYERS = {
    "intentrank": 0, "intentrank.errors": 0, "intentrank.extras": 0, "intentrank.paths": 0,
    "intentrank.types": 0, "intentrank.filters": 0,
    "intentrank.core": 1, "intentrank.data": 1,
    "intentrank.models": 2, "intentrank.llm": 2,
    "intentrank.measures": 2,
    "intentrank.index": 3,
    "intentrank.retrieve": 4, "intentrank.fuse": 4, "intentrank.query": 4,
    "intentrank.rerank": 4, "intentrank.answer": 4,
    "intentrank.tune": 5, "intentrank.training": 5, "intentrank.pipelines": 5,
    "intentrank.generate": 5,
    "intentrank.eval": 6, "intentrank.report": 6, "intentrank.scale": 6, "intentrank.service": 6,
    "intentrank.integrations": 6,
    "intentrank.cli": 7,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "intentrank").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        out[name] = path
    return out


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module} has no layer in LAYERS")


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


FACADE = "intentrank"  # the root package: names modules of every layer by string, lazily
IMPORT_CALLS = ("import_module", "import_submodules", "__import__")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
    return out


def _string_imports(tree: ast.AST, modules: dict[str, Path] | set[str]) -> set[str]:
    """intentrank modules a file names by string: the first argument of an import call
    (``importlib.import_module``, ``import_submodules``, ``__import__``), and any other string
    (not a docstring) that is exactly the name of an intentrank module."""
    found: set[str] = set()
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if fname in IMPORT_CALLS and isinstance(arg, ast.Constant) \
                    and isinstance(arg.value, str) and arg.value.startswith("intentrank"):
                found.add(arg.value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs and node.value in modules and node.value != FACADE:
            found.add(node.value)
    return found


def _imports(path: Path, modules: dict[str, Path], source: str | None = None,
             type_only: bool = True) -> set[str]:
    """intentrank modules imported anywhere in the file (``from pkg import mod`` counts as
    importing ``pkg.mod`` when that is a module), by statement or by string; with
    ``type_only=False`` the imports inside ``if TYPE_CHECKING:`` blocks are left out."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not type_only and isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("intentrank"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("intentrank"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    tree = ast.parse(path.read_text() if source is None else source)
    visit(tree)
    name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__") \
        if path.is_relative_to(SRC) else ""
    if name != FACADE:
        found |= _string_imports(tree, modules)
    return found


MODULES = _modules()
GRAPH = {name: _imports(path, MODULES, type_only=name != FACADE) - {name}
         for name, path in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m, targets in GRAPH.items() for t in targets if _layer(t) > _layer(m)]
    assert not upward, "\n".join(upward)


def test_imports_by_string_are_seen() -> None:
    """A lower layer naming an upper module in a string is an import: the registry's lazy
    load of the stage packages was such a hidden upward tie (now given it by pipelines.py)."""
    source = (
        'import importlib\n'
        'from intentrank.core.registry import import_submodules\n'
        'PACKAGES = ("intentrank.retrieve", "intentrank.fuse")\n'
        'def load():\n'
        '    """Loads intentrank.cli (a docstring is not an import)."""\n'
        '    importlib.import_module("intentrank.rerank")\n'
        '    import_submodules("intentrank.query", [])\n'
        '    __import__("intentrank.answer.generate")\n'
        '    return "intentrank.not_a_module", "intentrank"\n')
    found = _imports(SRC / "intentrank" / "core" / "fake.py", MODULES, source)
    assert found == {"intentrank.core.registry", "intentrank.retrieve", "intentrank.fuse",
                     "intentrank.rerank", "intentrank.query", "intentrank.answer.generate"}
    assert all(_layer(m) == 4 for m in found - {"intentrank.core.registry"})


def test_the_core_names_no_stage_package() -> None:
    """The registry loads stage packages it is given; the names live in layer 5."""
    from intentrank.core import registry
    from intentrank.pipelines import BUILTIN_PACKAGES

    assert not _string_imports(ast.parse(Path(registry.__file__).read_text()), MODULES)
    assert set(BUILTIN_PACKAGES) <= set(registry.STAGE_PACKAGES)
    assert _layer("intentrank.pipelines") > max(_layer(p) for p in BUILTIN_PACKAGES)


def test_label_free_scores_import_nothing_above_layer_2() -> None:
    """docs/architecture.md: models are passed in, so measures/label_free.py needs no stage."""
    above = sorted(t for t in GRAPH["intentrank.measures.label_free"] if _layer(t) > 2)
    assert not above, above


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (module -> the modules it imports), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := dfs(module)):
            return found
    return None


def test_no_import_cycles() -> None:
    cycle = _cycle({m: {t for t in ts if t in MODULES} for m, ts in GRAPH.items()})
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_circle_through_type_hints_is_a_circle() -> None:
    """registry.py naming ``Stage`` under TYPE_CHECKING while stage.py imports the registry
    was a circle the graph must see (and the layer rule likewise)."""
    registry = ('from typing import TYPE_CHECKING\n'
                'if TYPE_CHECKING:\n'
                '    from intentrank.core.stage import Stage\n')
    stage = 'from intentrank.core.registry import register_fuser\n'
    core = SRC / "intentrank" / "core"
    graph = {"intentrank.core.registry": _imports(core / "registry.py", MODULES, registry),
             "intentrank.core.stage": _imports(core / "stage.py", MODULES, stage)}
    assert _cycle(graph) == ["intentrank.core.registry", "intentrank.core.stage",
                             "intentrank.core.registry"]
    hints_off = {**graph, "intentrank.core.registry": _imports(
        core / "registry.py", MODULES, registry, type_only=False)}
    assert _cycle(hints_off) is None  # what the test saw before type hints counted


def test_a_missing_extra_names_it() -> None:
    from intentrank.extras import MissingExtraError, require

    assert require("json", "llm", "x").dumps([]) == "[]"
    with pytest.raises(MissingExtraError, match=r"pip install 'intentrank\[report\]'"):
        require("no_such_module_xyz", "report", "plots in HTML reports")


MAX_MODULE_LINES = 500  # issue 38: small modules with names that explain themselves


def test_no_module_is_over_500_lines() -> None:
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them): {long}"
