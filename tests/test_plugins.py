"""Third-party plugins: a package installed with entry points in the groups
``intentrank.stages``, ``intentrank.fusers`` and ``intentrank.prompts`` adds a stage, a
fusion and a prompt that YAML configs, the command line and the service then use, with no
intentrank file edited. The plugin is built and pip-installed here (into a target folder
put on ``PYTHONPATH``, so the shared environment never sees it), and every check runs in a
subprocess, which scans entry points afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

PYPROJECT = '''
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "intentrank-demo-plugin"
version = "0.0.1"

[project.entry-points."intentrank.stages"]
demo = "irdemo.stages"

[project.entry-points."intentrank.fusers"]
demo = "irdemo.fusers"

[project.entry-points."intentrank.prompts"]
demo = "irdemo.prompts"

[tool.setuptools]
packages = ["irdemo", "irdemo.prompts"]

[tool.setuptools.package-data]
"irdemo.prompts" = ["*.yaml"]
'''

STAGES = '''
from intentrank.core.registry import register_stage
from intentrank.core.stage import Stage
from intentrank.rerank.base import rerank_head


class ShortestFirst(Stage):
    """Reorder the top ``top_k`` by passage length."""

    def __init__(self, index, top_k=10):
        self.index, self.top_k, self.name = index, top_k, "demo_shortest"

    def transform(self, rankings, trace):
        return [rerank_head(r, {d.doc_id: -float(len(self.index.doc_text(d.doc_id)))
                                for d in r.docs[:self.top_k]}, trace.path_of(self))
                for r in rankings]


@register_stage("demo_shortest")
def _factory(ctx, params):
    return ShortestFirst(ctx.require_index("demo_shortest"), **params)
'''

FUSERS = '''
from intentrank.core.registry import register_fuser
from intentrank.fuse.base import FusionStage


@register_fuser
class CombSum(FusionStage):
    method = "demo_combsum"

    def fuse(self, rankings, trace):
        out = {}
        for r in rankings:
            for d in r.docs:
                out[d.doc_id] = out.get(d.doc_id, 0.0) + d.score
        return out
'''

PROMPT = '''
description: key terms of a query (a plugin prompt)
system: You extract search keywords.
template: "Keywords for: {query}"
max_tokens: 32
parser: text
fallback: the query itself
'''

# five passages that all match "wing", of distinct lengths
CORPUS = [
    {"_id": "long", "title": "", "text": "wing " + "flutter of a slender swept wing " * 6},
    {"_id": "short", "title": "", "text": "wing lift"},
    {"_id": "mid", "title": "", "text": "wing flutter and divergence at high speed"},
    {"_id": "tiny", "title": "", "text": "wing"},
    {"_id": "longer", "title": "", "text": "wing " + "boundary layer on the wing " * 9},
]
BY_LENGTH = ["tiny", "short", "mid", "long", "longer"]

PIPELINE = '''
pipeline:
  - fuse:
      method: demo_combsum
      inputs: [{bm25: {depth: 10}}, {bm25: {depth: 3}}]
  - demo_shortest: {top_k: 10}
'''

CHECK = '''
import json, sys
from intentrank.core.registry import known_names
from intentrank.llm.prompts import load_contract

contract = load_contract("demo_keywords")
out = {"stage": "demo_shortest" in known_names(),
       "fuser": "demo_combsum" in known_names(fusion=True),
       "prompt": contract.render(query="wing flutter"), "prompt_source": contract.source}

from fastapi.testclient import TestClient
from intentrank.service import ServiceSettings, create_app

settings = ServiceSettings(indexes={"demo": sys.argv[1]}, pipelines={"mine": sys.argv[2]},
                           rerankers={"shortest": {"demo_shortest": {"top_k": 5}}},
                           require_keys=False, access_log=False)
with TestClient(create_app(settings)) as client:
    listed = client.get("/pipelines").json()
    found = client.post("/search", json={"query": "wing", "pipeline": "mine", "top_k": 5})
    reranked = client.post("/v2/rerank", json={"model": "shortest", "query": "wing",
                                               "documents": ["a b c", "a", "a b"]})
out["pipelines"] = json.dumps(listed)
out["search"] = [r["doc_id"] for r in found.json()["results"]]
out["rerank"] = [r["index"] for r in reranked.json()["results"]]
print(json.dumps(out))
'''


def _env(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [*map(str, paths), str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The demo plugin, built and installed (pip --target) into a folder of its own."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    (src / "irdemo" / "prompts").mkdir(parents=True)
    (src / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (src / "irdemo" / "__init__.py").write_text("")
    (src / "irdemo" / "stages.py").write_text(textwrap.dedent(STAGES))
    (src / "irdemo" / "fusers.py").write_text(textwrap.dedent(FUSERS))
    (src / "irdemo" / "prompts" / "__init__.py").write_text("")
    (src / "irdemo" / "prompts" / "demo_keywords.yaml").write_text(textwrap.dedent(PROMPT))
    site = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--no-index", "--target", str(site),
                           str(src)], capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr
    assert list(site.glob("intentrank_demo_plugin-0.0.1.dist-info/entry_points.txt"))
    return site


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory, plugin_site) -> tuple[Path, Path]:
    """A BM25 index of the five passages, built by the command line, and the config."""
    root = tmp_path_factory.mktemp("demo")
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    (root / "mine.yaml").write_text(textwrap.dedent(PIPELINE))
    done = _run(["-m", "intentrank.cli", "index", "corpus.jsonl", "idx", "--legs", "bm25"],
                _env(plugin_site), root)
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "idx", root / "mine.yaml"


@pytest.mark.slow
def test_a_plugin_stage_runs_from_the_command_line(plugin_site, demo_index) -> None:
    idx, config = demo_index
    done = _run(["-m", "intentrank.cli", "search", str(idx), "wing", "-p", str(config),
                 "--json"], _env(plugin_site), config.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(done.stdout)
    assert [r["id"] for r in result["results"]] == BY_LENGTH
    scores = result["results"][0]["stage_scores"]
    assert {"demo_combsum", "demo_shortest"} <= set(scores)
    assert scores["demo_shortest"] == -len("wing")


@pytest.mark.slow
def test_plugin_stage_fuser_and_prompt_in_configs_and_the_service(plugin_site,
                                                                  demo_index) -> None:
    idx, config = demo_index
    done = _run(["-c", CHECK, str(idx), str(config)], _env(plugin_site), config.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["stage"] and out["fuser"]
    assert out["prompt"] == "Keywords for: wing flutter"
    assert Path(out["prompt_source"]).is_relative_to(plugin_site)
    assert '"mine"' in out["pipelines"] and '"shortest"' in out["pipelines"]
    assert out["search"] == BY_LENGTH
    assert out["rerank"] == [1, 2, 0]  # shortest passage first


def test_without_the_plugin_its_stage_is_unknown(tmp_path) -> None:
    """Control: the same check without the plugin on the path."""
    code = ("from intentrank.core.registry import known_names\n"
            "print('demo_shortest' in known_names())")
    done = _run(["-c", code], _env(), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def _fake_dist(site: Path, name: str, entry_points: str) -> None:
    """An installed distribution as importlib.metadata reads it (a .dist-info folder)."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


@pytest.mark.slow
def test_a_broken_plugin_is_a_clear_config_error(tmp_path, demo_index) -> None:
    site = tmp_path / "site"
    _fake_dist(site, "broken_plugin", """
        [intentrank.stages]
        broken = broken_plugin_mod
        """)
    (site / "broken_plugin_mod.py").write_text("raise RuntimeError('the plugin is broken')\n")
    code = "from intentrank.core.registry import known_names\nknown_names()"
    done = _run(["-c", code], _env(site), tmp_path)
    assert done.returncode != 0
    assert "ConfigError: plugin entry point 'broken' = 'broken_plugin_mod' (group " \
           "'intentrank.stages' of package 'broken_plugin') failed to load: RuntimeError: " \
           "the plugin is broken" in done.stderr
    # the command line says it in one line (exit 2), as for every configuration error
    done = _run(["-m", "intentrank.cli", "search", str(demo_index[0]), "wing", "-p", "bm25"],
                _env(site), tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert output.startswith("error: ") and "plugin entry point 'broken'" in output
    assert "Traceback" not in done.stdout + done.stderr


def test_a_plugin_prompt_may_not_shadow_a_shipped_one(tmp_path) -> None:
    site = tmp_path / "site"
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "listwise.yaml").write_text(textwrap.dedent(PROMPT))
    _fake_dist(site, "shadow_plugin", f"""
        [intentrank.prompts]
        shadow = {prompts}
        """)
    code = "from intentrank.llm.prompts import load_contract\nload_contract('nothing_here')"
    done = _run(["-c", code], _env(site), tmp_path)
    assert done.returncode != 0
    assert "prompt plugin 'shadow'" in done.stderr
    assert "takes the name of the shipped prompt 'listwise'" in done.stderr
