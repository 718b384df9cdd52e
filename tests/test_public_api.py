"""``import intentrank``: the everyday names resolve lazily to the objects their modules
define, the import itself loads no heavy module, and the package ships ``py.typed``.

The package's ``__getattr__`` looks its names up by module path string, so
``tests/test_layering.py``'s import graph does not see them: the root package is the public
surface over every layer, not a layer-0 module that depends on them. What keeps that honest
is checked here: the package imports nothing of intentrank at module level, and no module
inside the package imports a name through it (each imports from the defining module)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import intentrank

SRC = Path(__file__).resolve().parents[1] / "src"
NAMES = ["Index", "build_index", "open_or_build", "load_dataset", "BM25Retriever",
         "DenseRetriever", "CrossEncoderReranker", "pipeline_from_config", "evaluate",
         "Query", "Ranking"]
HEAVY = ("torch", "sentence_transformers", "transformers", "onnxruntime", "numpy",
         "intentrank.index", "intentrank.pipelines", "intentrank.rerank")


@pytest.mark.parametrize("name", NAMES)
def test_each_name_resolves_to_its_modules_object(name):
    module = importlib.import_module(intentrank._LAZY[name])
    assert getattr(intentrank, name) is getattr(module, name)
    assert name in intentrank.__all__ and name in dir(intentrank)


def test_version_all_and_unknown_names():
    assert intentrank.__version__ == "0.1.0"
    assert sorted(intentrank.__all__) == sorted(["__version__", *NAMES]) == sorted(
        ["__version__", *intentrank._LAZY])
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        intentrank.nope  # noqa: B018
    from intentrank import Query, Ranking

    assert Ranking(Query("q1", "flow")).query.text == "flow"


def test_import_intentrank_loads_no_heavy_module():
    code = (f"import sys, intentrank; heavy = {HEAVY!r}; print([m for m in sys.modules "
            f"if any(m == h or m.startswith(h + '.') for h in heavy)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out
    code = "import sys, intentrank; intentrank.Query; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"


def test_the_package_imports_nothing_of_intentrank_at_module_level():
    tree = ast.parse((SRC / "intentrank" / "__init__.py").read_text())
    eager = [ast.unparse(node) for node in tree.body if not _is_type_checking(node)
             and isinstance(node, (ast.Import, ast.ImportFrom))
             and "intentrank" in ast.unparse(node)]
    assert not eager, eager
    for module in set(intentrank._LAZY.values()):  # every target exists
        assert importlib.util.find_spec(module) is not None, module


def test_no_module_of_the_package_imports_a_public_name_through_it():
    through = []
    for path in (SRC / "intentrank").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "intentrank" \
                    and node.level == 0:
                through += [f"{path.relative_to(SRC)}: {a.name}" for a in node.names
                            if a.name in intentrank._LAZY]
    assert not through, through


def test_the_package_is_typed():
    assert (SRC / "intentrank" / "py.typed").is_file()
    pyproject = (SRC.parent / "pyproject.toml").read_text()
    assert '"py.typed"' in pyproject.split("[tool.setuptools.package-data]")[1]


def test_pipeline_from_config_takes_a_shipped_name(tmp_path):
    """README's example: ``ir.pipeline_from_config("cascade", idx)`` builds the shipped config
    (a file path works as before)."""
    from fakes import write_collection

    import intentrank as ir
    from intentrank.index import IndexSettings

    root = write_collection(tmp_path / "c", {"a": "wing flutter", "b": "heat transfer"},
                            {"q": "flutter"}, [("q", "a", 1)])
    idx = ir.build_index(ir.load_dataset(root).corpus(), tmp_path / "idx",
                         IndexSettings(legs=("bm25",)))
    pipe = ir.pipeline_from_config("bm25", idx)
    assert pipe.describe().startswith("bm25(") and pipe.search("flutter", k=1)
    config = tmp_path / "mine.yaml"
    config.write_text("pipeline:\n  bm25: {depth: 7}\n")
    assert "depth=7" in ir.pipeline_from_config(config, idx).describe()
