"""The package layering: every module imports, no module imports from a higher layer, and
there are no import cycles (function-level imports included; ``TYPE_CHECKING`` blocks are
type hints only and not counted)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Longest prefix wins. A module may import from its own layer or lower ones.
LAYERS = {
    "intentrank": 0, "intentrank.errors": 0, "intentrank.extras": 0, "intentrank.paths": 0,
    "intentrank.types": 0,
    "intentrank.core": 1, "intentrank.data": 1,
    "intentrank.models": 2, "intentrank.llm": 2,
    "intentrank.eval.metrics": 2, "intentrank.eval.significance": 2,
    "intentrank.eval.swaps": 2, "intentrank.eval.error_analysis": 2,
    "intentrank.eval.coverage": 2,
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


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """intentrank modules imported anywhere in the file (``from pkg import mod`` counts as
    importing ``pkg.mod`` when that is a module)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
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

    visit(ast.parse(path.read_text()))
    return found


MODULES = _modules()
GRAPH = {name: _imports(path, MODULES) - {name} for name, path in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m, targets in GRAPH.items() for t in targets if _layer(t) > _layer(m)]
    assert not upward, "\n".join(upward)


def test_label_free_scores_import_nothing_above_layer_2() -> None:
    """docs/architecture.md: models are passed in, so eval/label_free.py needs no stage."""
    above = sorted(t for t in GRAPH["intentrank.eval.label_free"] if _layer(t) > 2)
    assert not above, above


def test_no_import_cycles() -> None:
    graph = {m: {t for t in ts if t in MODULES} for m, ts in GRAPH.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            dfs(module)


def test_a_missing_extra_names_it() -> None:
    from intentrank.extras import MissingExtraError, require

    assert require("json", "llm", "x").dumps([]) == "[]"
    with pytest.raises(MissingExtraError, match=r"pip install 'intentrank\[report\]'"):
        require("no_such_module_xyz", "report", "plots in HTML reports")
