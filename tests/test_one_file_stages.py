"""A new stage or fusion is one new file: a module in a stage package registers itself and is
buildable from YAML with no other file edited (the worked example in docs/architecture.md)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from intentrank.core.registry import REGISTRY, BuildContext, lookup
from intentrank.pipelines import build_pipeline
from intentrank.types import Query, Ranking, ScoredDoc

RERANKER = '''
from intentrank.core.registry import register_stage
from intentrank.core.stage import Stage
from intentrank.types import Ranking, Trace


class ShortestFirst(Stage):
    """Reorder the top ``top_k`` by text length (a toy reranker)."""

    def __init__(self, lengths, top_k=10):
        self.lengths, self.top_k, self.name = lengths, top_k, "shortest_first"

    def transform(self, rankings, trace):
        return [Ranking.from_scores(r.query, {d.doc_id: -self.lengths[d.doc_id]
                                              for d in r.docs[:self.top_k]}, trace.path_of(self))
                for r in rankings]


@register_stage("shortest_first")
def _factory(ctx, params):
    return ShortestFirst(ctx.resources["lengths"], **params)
'''

FUSION = '''
from intentrank.core.registry import register_fuser
from intentrank.fuse.base import FusionStage


@register_fuser
class CombSum(FusionStage):
    method = "combsum"

    def fuse(self, rankings, trace):
        out = {}
        for r in rankings:
            for d in r.docs:
                out[d.doc_id] = out.get(d.doc_id, 0.0) + d.score
        return out
'''


def test_a_new_stage_file_registers_itself(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "myplugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from intentrank.core.registry import import_submodules\n"
        "import_submodules(__name__, __path__)\n")
    (pkg / "shortest_first.py").write_text(textwrap.dedent(RERANKER))
    (pkg / "combsum.py").write_text(textwrap.dedent(FUSION))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        __import__("myplugins")
        ctx = BuildContext(resources={"lengths": {"a": 3, "b": 1, "c": 2}})
        stage = build_pipeline({"shortest_first": {"top_k": 3}}, ctx)
        ranking = Ranking(Query("q", "x"), [ScoredDoc(d, 1.0) for d in "abc"])
        assert stage([ranking])[0].doc_ids == ["b", "c", "a"]
        fused = lookup("combsum", fusion=True).origin([stage, stage])([ranking])[0]
        assert fused.doc_ids == ["b", "c", "a"]
    finally:
        REGISTRY.pop("shortest_first", None)
        REGISTRY.pop("combsum", None)
        sys.modules.pop("myplugins", None)


def test_a_second_registration_of_a_name_is_refused() -> None:
    from intentrank.core.registry import load_builtins, register_fuser, register_stage
    from intentrank.errors import ConfigError
    from intentrank.fuse.rrf import RRFFusion

    load_builtins()
    assert lookup("rrf", fusion=True).origin is RRFFusion
    assert register_fuser(RRFFusion) is RRFFusion  # the same class again: a no-op
    fusions = {n: e for n, e in REGISTRY.items() if e.fusion}
    assert {e.origin.method for e in fusions.values()} == set(fusions)  # each under its name
    clash = type("OtherRRF", (RRFFusion,), {"method": "rrf"})
    with pytest.raises(ConfigError, match="two registrations of the name 'rrf': fusion method "
                                          "intentrank.core.stage.RRFFusion and fusion method"):
        register_fuser(clash)
    assert lookup("rrf", fusion=True).origin is RRFFusion
    with pytest.raises(ConfigError, match="two registrations of the name 'bm25': stage "):
        register_stage("bm25")(lambda ctx, params: None)
    # stages and fusion methods share one namespace and one error style
    with pytest.raises(ConfigError, match="two registrations of the name 'rrf': fusion method "
                                          ".* and stage "):
        register_stage("rrf")(lambda ctx, params: None)
    with pytest.raises(ConfigError, match="as 'fuse': cutoff, fuse are keys of the config grammar"):
        register_stage("fuse")(lambda ctx, params: None)


def test_one_lookup_for_stages_and_fusion_methods() -> None:
    from intentrank.core.registry import lookup
    from intentrank.errors import ConfigError

    assert lookup("bm25").kind == "stage" and lookup("rrf", fusion=True).kind == "fusion method"
    with pytest.raises(ConfigError, match=r"unknown stage 'rrf' \('rrf' is a fusion method\)"):
        build_pipeline({"rrf": {}}, BuildContext())
    with pytest.raises(ConfigError, match=r"pipeline.fuse: unknown fusion method 'bm25' "
                                          r"\('bm25' is a stage\); known: .*interleave, rrf"):
        build_pipeline({"fuse": {"method": "bm25", "inputs": ["bm25", "tfidf"]}}, BuildContext())
    with pytest.raises(ConfigError, match=r"rrf_k"):  # a fusion's renamed parameter, refused
        build_pipeline({"fuse": {"method": "rrf", "k": 60, "inputs": ["bm25", "tfidf"]}},
                       BuildContext())
