"""The experiment harness on the real Cranfield index with a scripted LLM and a fake
cross-encoder: the shipped cascade ablation reproduces, table for table, an independent
computation (each configuration built by hand in Python, run alone, analysed directly);
shared prefixes run once; experiment files are checked with errors naming file and field."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import numpy as np
import pytest

from intentrank.core.stage import Stage
from intentrank.errors import ConfigError
from intentrank.eval.harness import latency_ms, run_experiment
from intentrank.eval.prefixes import canonical
from intentrank.eval.spec import EXPERIMENTS_DIR, load_experiment, parse_experiment
from intentrank.llm.base import LLMReply
from intentrank.llm.client import LLMClient
from intentrank.measures.error_analysis import degraded_queries
from intentrank.measures.metrics import evaluate
from intentrank.measures.significance import paired_test
from intentrank.measures.swaps import swap_stats
from intentrank.report import html, markdown, write_report
from intentrank.report import json as json_report
from intentrank.types import Trace

N_QUERIES = 10
SEED, PERMUTATIONS = 7, 2000
# the modality-weight reply of a query: valid, malformed, out of range, not normalised; the
# listwise answer (the first JSON array) swaps the first two passages
WEIGHT_REPLIES = ('{"dense": 0.2, "sparse": 0.7, "graph": 0.1}', "dense: high, sparse: low",
                  '{"dense": 1.4, "sparse": -0.2, "graph": -0.2}',
                  '{"dense": 0.5, "sparse": 0.5, "graph": 0.5}')


class FakeLLM:
    """Answers every prompt with the weight reply its hash picks and a listwise order, so
    each answer depends on the prompt alone (not on the order of calls)."""

    name = "fake:harness"

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, messages, params) -> LLMReply:
        self.calls += 1
        digest = int(hashlib.sha1(messages[-1]["content"].encode()).hexdigest(), 16)
        return LLMReply(f"{WEIGHT_REPLIES[digest % 4]} [2, 1, 3, 4, 5]", 50, 12)


class OverlapScorer:
    """A stand-in cross-encoder: the share of query words found in the passage."""

    name = "fake:overlap"

    def __init__(self) -> None:
        self.pairs = 0

    def predict(self, pairs, batch_size: int = 8) -> np.ndarray:
        self.pairs += len(pairs)
        out = []
        for q, p in pairs:
            words, text = set(q.lower().split()), set(p.lower().split())
            out.append(len(words & text) / max(len(words), 1) + len(p) * 1e-7)
        return np.asarray(out, dtype=np.float32)


@pytest.fixture(scope="module")
def sample(cranfield):
    return cranfield.sample("test", N_QUERIES, seed=0)


@pytest.fixture(scope="module")
def spec():
    """The shipped cascade ablation, tested on Cranfield with fewer permutations."""
    return load_experiment("cascade-ablation").replace(
        dataset="cranfield", test_seed=SEED, permutations=PERMUTATIONS)


@pytest.fixture(scope="module")
def fakes():
    scorer = OverlapScorer()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("intentrank.rerank.cross_encoder.load_cross_encoder",
                   lambda *args, **kwargs: scorer)
        yield scorer


@pytest.fixture(scope="module")
def experiment(spec, cranfield_index, sample, fakes):
    queries, qrels = sample
    llm = FakeLLM()
    searched: list[int] = []
    from intentrank.retrieve.retrievers import DenseRetriever

    search = DenseRetriever.search_rows

    def counting(self, texts, filter=None):
        searched.append(len(texts))
        return search(self, texts, filter)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DenseRetriever, "search_rows", counting)
        result = run_experiment(spec, index=cranfield_index, queries=queries, qrels=qrels,
                                llm=LLMClient(llm, cache=None))
    return result, llm, searched


def independent_pipelines(index, llm, scorer) -> dict[str, Stage]:
    """The ablation's configurations built by hand (as eval/ablation.py built them),
    without the harness: fresh objects, no sharing."""
    from intentrank.fuse.dynamic import DynamicWeightedFusion
    from intentrank.fuse.rrf_with_input import RRFWithInput
    from intentrank.fuse.weighted import WeightedFusion
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.rerank.listwise import ListwiseReranker
    from intentrank.retrieve.retrievers import DenseRetriever, GraphRetriever, sparse_retriever

    def legs():
        return [DenseRetriever(index, 100), sparse_retriever(index, 100),
                GraphRetriever(index, 100)]

    def ce():
        return RRFWithInput(CrossEncoderReranker(index, scorer, top_k=100), name="ce_rrf") % 10

    def listwise():
        return ListwiseReranker(index, llm, top_k=5, max_passage_chars=150)

    out = {"Dense only": DenseRetriever(index, 100),
           "Bi-modal": WeightedFusion(legs()[:2], (0.5 / 0.85, 0.35 / 0.85)) % 100}
    for suffix, fusion in (("", lambda: WeightedFusion(legs(), (0.5, 0.35, 0.15))),
                           (" (dynamic)", lambda: DynamicWeightedFusion(legs(), llm))):
        out["Tri-modal" + suffix] = fusion() % 100
        out["Tri-modal + CE" + suffix] = fusion() % 30 >> ce()
        out["Full pipeline" + suffix] = fusion() % 30 >> ce() >> listwise()
    return out


def test_shipped_ablation_matches_an_independent_computation(experiment, cranfield_index,
                                                             sample) -> None:
    result = experiment[0]
    queries, qrels = sample
    spec = result.spec
    llm = LLMClient(FakeLLM(), cache=None)
    alone = {name: stage.run(queries) for name, stage in
             independent_pipelines(cranfield_index, llm, OverlapScorer()).items()}
    assert result.names == list(alone)
    scores = {n: evaluate(run.to_run(), qrels, spec.metrics) for n, run in alone.items()}
    for r in result.pipelines:
        assert [x.doc_ids for x in r.rankings] == [x.doc_ids for x in alone[r.name].rankings]
        assert r.scores.aggregate == scores[r.name].aggregate, r.name
        assert r.scores.per_query == scores[r.name].per_query, r.name
    m, texts = "nDCG@10", {q.id: q.text for q in queries}
    parents = {"Tri-modal + CE": "Tri-modal", "Full pipeline": "Tri-modal + CE"}
    parents |= {f"{c} (dynamic)": f"{p} (dynamic)" for c, p in parents.items()}
    assert set(result.swaps) == set(result.degradations) == set(parents)
    for child, parent in parents.items():
        assert result.swaps[child] == swap_stats(alone[parent].rankings, alone[child].rankings,
                                                 10)
        assert result.degradations[child] == degraded_queries(
            scores[parent].column(m), scores[child].column(m), texts, m, 5)
    assert set(result.tests) == set(alone) - {"Tri-modal"}
    for name, tests in result.tests.items():
        for t in ("nDCG@10", "MRR@10", "MAP@10", "Recall@10", "P@10"):
            assert tests[t] == paired_test(scores["Tri-modal"].column(t), scores[name].column(t),
                                           t, PERMUTATIONS, SEED)
    for name in ("Tri-modal", "Tri-modal + CE", "Full pipeline"):
        dyn = result.variant_tests[f"{name} (dynamic)"]
        assert dyn["nDCG@10"] == paired_test(scores[name].column(m),
                                             scores[f"{name} (dynamic)"].column(m), m,
                                             PERMUTATIONS, SEED)
    # the fake's weight replies: valid, malformed, out of range or not normalised per query
    dynamic_fallbacks = alone["Tri-modal (dynamic)"].trace.stages["dynamic"].counters["fallbacks"]
    assert result.result("Tri-modal (dynamic)").counters["fallbacks"] == dynamic_fallbacks > 0
    summary = result.llm_weights["dynamic"]
    assert summary["queries"] == N_QUERIES
    assert sum(summary["fallbacks"].values()) == dynamic_fallbacks
    assert summary["llm_share"] == pytest.approx(1 - dynamic_fallbacks / N_QUERIES)


def test_shared_prefixes_run_once(experiment) -> None:
    result, llm, searched = experiment
    assert searched == [N_QUERIES]  # the dense leg: one search for all eight pipelines
    # one weights call per query, and listwise once per query for static and dynamic inputs
    assert N_QUERIES * 2 <= llm.calls <= N_QUERIES * 3
    computed = result.computed
    steps = Counter(key.rsplit(" >> ", 1)[-1].split("(")[0] for key in computed)
    assert steps["dense"] == 1 and steps["cross_encoder"] == 2 and steps["listwise"] == 2
    assert all(n == N_QUERIES for n in computed.values())
    full = result.result("Full pipeline")
    assert full.trace.stages["weighted"].counters["replayed"] == N_QUERIES
    assert full.latency["cross-encoder"] == pytest.approx(
        result.result("Tri-modal + CE").latency["cross-encoder"])
    assert full.latency["listwise LLM"] > 0 and full.latency["fusion"] > 0
    dense = result.result("Dense only").latency
    assert dense["dense"] > 0 and dense["cross-encoder"] == dense["listwise LLM"] == 0


def test_canonical_keys_include_every_parameter(cranfield_index) -> None:
    from intentrank.rerank.listwise import ListwiseReranker
    from intentrank.retrieve.retrievers import BM25Retriever, DenseRetriever

    llm = LLMClient(FakeLLM(), cache=None)
    short, long = (ListwiseReranker(cranfield_index, llm, top_k=5, max_passage_chars=c)
                   for c in (150, 600))
    assert canonical(short) != canonical(long) and short.describe() != long.describe()
    assert canonical(DenseRetriever(cranfield_index, 100)) == canonical(
        DenseRetriever(cranfield_index, 100))
    assert canonical(DenseRetriever(cranfield_index, 10)) != canonical(
        DenseRetriever(cranfield_index, 100))
    assert canonical(BM25Retriever(cranfield_index, 100)) != canonical(
        DenseRetriever(cranfield_index, 100))


class _Keep(Stage):
    """A no-op stage holding one parameter, to compare digests."""

    name = "keep"

    def __init__(self, param: object) -> None:
        self.param = param

    def transform(self, rankings, trace):
        return rankings


class _Plain:
    """An unknown object whose value is its public attributes."""

    def __init__(self, threshold: float, words: tuple[str, ...]) -> None:
        self.threshold, self.words = threshold, words


class _Named:
    """A named object (e.g. a scorer) with a parameter and a run counter."""

    def __init__(self, name: str, max_length: int) -> None:
        self.name, self.max_length, self.calls = name, max_length, 0


def test_canonical_keys_tell_sets_objects_and_named_objects_apart() -> None:
    def differ(a: object, b: object) -> bool:
        return canonical(_Keep(a)) != canonical(_Keep(b))

    assert differ({"a", "b"}, {"a", "c"}) and differ(frozenset({1}), frozenset({2}))
    assert not differ({"b", "a", "c"}, {"c", "a", "b"})  # sets in sorted order
    assert differ(_Plain(0.5, ("x",)), _Plain(0.7, ("x",)))
    assert differ(_Plain(0.5, ("x",)), _Plain(0.5, ("y",)))
    assert not differ(_Plain(0.5, ("x",)), _Plain(0.5, ("x",)))
    assert differ(_Named("ce", 128), _Named("ce", 512)) and differ(_Named("a", 1), _Named("b", 1))
    counted = _Named("ce", 128)
    before = canonical(_Keep(counted))
    counted.calls += 3  # not a constructor parameter: runs do not change the key
    assert canonical(_Keep(counted)) == before == canonical(_Keep(_Named("ce", 128)))
    assert differ(len, sorted) and differ(lambda x: x, lambda x: -x)


def test_describe_names_every_parameter_that_changes_results(cranfield_index) -> None:
    """LLM and cross-encoder stages: two stages that would rank differently never describe
    alike (the model, its clipping, the LLM, passage and token limits, the prompt)."""
    from intentrank.fuse.dynamic import DynamicWeightedFusion
    from intentrank.query.followups import FollowUpPredictor
    from intentrank.query.multi_query import MultiQueryRetriever
    from intentrank.rerank.compression import ContextualCompression
    from intentrank.rerank.cross_encoder import CrossEncoderReranker
    from intentrank.rerank.judge import LLMJudge
    from intentrank.rerank.listwise import ListwiseReranker
    from intentrank.retrieve.retrievers import BM25Retriever

    class Scorer(OverlapScorer):
        def __init__(self, name: str, max_length: int) -> None:
            super().__init__()
            self.name, self.max_length = name, max_length

    class OtherLLM(FakeLLM):
        name = "fake:other"

    llm, other = LLMClient(FakeLLM(), cache=None), LLMClient(OtherLLM(), cache=None)
    idx, bm25 = cranfield_index, BM25Retriever(cranfield_index, 10)
    variants = {
        "cross_encoder": [lambda: CrossEncoderReranker(idx, Scorer("m", 128)),
                          lambda: CrossEncoderReranker(idx, Scorer("m", 256)),
                          lambda: CrossEncoderReranker(idx, Scorer("m2", 128)),
                          lambda: CrossEncoderReranker(idx, Scorer("m", 128), top_k=30)],
        "followups": [lambda: FollowUpPredictor(llm), lambda: FollowUpPredictor(other),
                      lambda: FollowUpPredictor(llm, m=3),
                      lambda: FollowUpPredictor(llm, max_tokens=40)],
        "multi_query": [lambda: MultiQueryRetriever(llm, bm25),
                        lambda: MultiQueryRetriever(llm, bm25, rrf_k=10),
                        lambda: MultiQueryRetriever(llm, bm25, max_tokens=40)],
        "compression": [lambda: ContextualCompression(idx, llm),
                        lambda: ContextualCompression(idx, llm, max_passage_chars=100),
                        lambda: ContextualCompression(idx, llm, max_tokens=4)],
        "judge": [lambda: LLMJudge(idx, llm), lambda: LLMJudge(idx, llm, max_passage_chars=10)],
        "listwise": [lambda: ListwiseReranker(idx, llm), lambda: ListwiseReranker(idx, other),
                     lambda: ListwiseReranker(idx, llm, top_k=9, window=4),
                     lambda: ListwiseReranker(idx, llm, top_k=9, window=4, step=1),
                     lambda: ListwiseReranker(idx, llm, max_tokens=20)],
        "dynamic": [lambda: DynamicWeightedFusion([bm25, bm25, bm25], llm),
                    lambda: DynamicWeightedFusion([bm25, bm25, bm25], llm, tolerance=0.1),
                    lambda: DynamicWeightedFusion([bm25, bm25, bm25], llm, max_tokens=20)],
    }
    for kind, makers in variants.items():
        described = [make().describe() for make in makers]
        assert len(set(described)) == len(described), (kind, described)


def test_reports_markdown_json_html(experiment, tmp_path) -> None:
    result = experiment[0]
    md = markdown.render(result)
    for n in ("I", "II", "III", "IV", "V", "VI", "VII"):
        assert f"### Table {n}." in md, n
    assert all(name in md for name in result.names)
    data = json.loads(json_report.render(result))
    assert [c["name"] for c in data["configs"]] == result.names
    page = html.render(result)
    assert page.count("data:image/png;base64,") == 3
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", page)
    assert "<script" not in page and "<link" not in page
    assert page.count("<table>") == len(markdown.tables(result))
    paths = write_report(result, tmp_path / "out" / "cranfield")
    assert [p.name for p in paths] == ["cranfield.md", "cranfield.html", "cranfield.json"]


def test_switched_off_stages_skip_their_pipelines(spec, cranfield_index, sample) -> None:
    queries, qrels = sample
    result = run_experiment(spec.replace(permutations=100), index=cranfield_index,
                            queries=queries[:3], qrels=qrels,
                            without=["llm", "cross_encoder"])
    assert result.names == ["Dense only", "Bi-modal", "Tri-modal"]
    assert "Full pipeline" in result.skipped and "Tri-modal (dynamic)" in result.skipped
    assert "Variants against" not in markdown.render(result)
    with pytest.raises(ConfigError, match="baseline"):
        run_experiment(spec.replace(baseline="Full pipeline"), index=cranfield_index,
                       queries=queries[:2], qrels=qrels, without=["llm"])


def test_latency_charges_cached_llm_replies_their_generation_time() -> None:
    trace = Trace()
    dyn = trace.stage("dynamic")
    dyn.seconds = 1.0  # wall: 0.6 s of fresh LLM calls + 0.4 s of fusion work
    dyn.counters.update(llm_seconds=0.6, llm_cached_seconds=3.0)
    listwise = trace.stage("listwise")
    listwise.seconds = 0.5
    listwise.counters.update(llm_cached_seconds=4.5)
    columns = {"fusion": ["dynamic"], "listwise LLM": ["listwise"]}
    out = latency_ms(trace, 2, columns, {"dynamic": "LLM weights"})
    assert out["LLM weights"] == pytest.approx(1000 * 3.6 / 2)
    assert out["fusion"] == pytest.approx(1000 * 0.4 / 2)
    assert out["listwise LLM"] == pytest.approx(1000 * 5.0 / 2)
    warm = latency_ms(trace, 2, columns, {"dynamic": "LLM weights"}, cold=False)
    assert warm["listwise LLM"] == pytest.approx(1000 * 0.5 / 2)


# -- experiment files ------------------------------------------------------------------------
def test_shipped_experiments_parse() -> None:
    assert {"cascade-ablation", "fuq"} <= {p.stem for p in EXPERIMENTS_DIR.glob("*.yaml")}
    ablation = load_experiment("cascade-ablation")
    full = ablation.pipeline("Full pipeline")
    assert full.parent == "Tri-modal + CE" and full.node[-1] == {
        "listwise": {"top_k": 5, "max_passage_chars": 150}}
    assert full.node[:2] == ablation.pipeline("Tri-modal").node  # the parents' steps first
    fuq = load_experiment("fuq")
    assert fuq.baseline == "dense" and fuq.pipeline("parent document").index == "chunks"
    assert fuq.sample == 100 and fuq.test_metrics == ["MRR", "nDCG@3"]


GOOD = {"dataset": "cranfield", "metrics": ["nDCG@10"],
        "pipelines": {"a": [{"bm25": {"depth": 10}}],
                      "b": {"parent": "a", "then": [{"cutoff": 5}]}}}


@pytest.mark.parametrize(("change", "message"), [
    ({"metrcs": ["nDCG@10"]}, r"unknown key\(s\) \['metrcs'\]"),
    ({"baseline": "c"}, r"baseline: 'c' is not one of the pipelines"),
    ({"metrics": ["nDCG@0"]}, r"metrics: .*cut-off must be >= 1"),
    ({"significance": {"metrics": ["MAP"]}}, r"significance.metrics: \['MAP'\] not among"),
    ({"sample": {"size": -1}}, r"sample.size: expected an integer >= 0"),
    ({"pipelines": {"a": {"then": [{"cutoff": 5}]}}}, r"pipelines.a.then: .*name a parent"),
    ({"pipelines": {"a": {"parent": "b", "then": ["bm25"]},
                    "b": {"parent": "a", "then": ["bm25"]}}}, r"pipelines.a.then: .*form a cycle"),
    ({"pipelines": {"a": {"pipeline": "bm25", "parent": "z"}}}, r"pipelines.a.parent: 'z'"),
    ({"pipelines": {"a": {"pipeline": "bm25", "config": "rrf"}}},
     r"pipelines.a: give exactly one of"),
    ({"pipelines": {"a": {"config": "nonesuch"}}}, r"pipelines.a.config: no pipeline config"),
    ({"pipelines": {"a": {"pipeline": "bm25", "index": "chunks"}}},
     r"pipelines.a.index: 'chunks'"),
    ({"report": ["tables"]}, r"report\[0\]: unknown table 'tables'"),
])
def test_bad_experiment_files_name_file_and_field(change, message) -> None:
    with pytest.raises(ConfigError, match=r"^exp.yaml: " + message):
        parse_experiment({**GOOD, **change}, "exp.yaml")


def test_bad_experiment_file_on_disk_names_the_file(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("metrics: [nDCG@10]\npipelines: {a: bm25}\nbaseline: b\n")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ": baseline"):
        load_experiment(path)
    path.write_text("metrics: [nDCG@10\n")
    with pytest.raises(ConfigError, match="cannot read experiment file"):
        load_experiment(path)
    with pytest.raises(ConfigError, match="no experiment file"):
        load_experiment(tmp_path / "missing.yaml")


def test_unknown_stage_is_reported_with_its_place(cranfield_index, sample) -> None:
    queries, qrels = sample
    spec = parse_experiment({**GOOD, "pipelines": {"a": [{"bm52": {"k": 10}}]}}, "exp.yaml")
    with pytest.raises(ConfigError, match=r"exp.yaml: pipelines.a\[0\]: unknown stage 'bm52'"):
        run_experiment(spec, index=cranfield_index, queries=queries, qrels=qrels)


def test_cli_experiment_runs_a_file_and_refuses_bad_options(data_dir, cranfield_index,
                                                            tmp_path) -> None:
    from typer.testing import CliRunner

    from intentrank.cli import app

    path = tmp_path / "exp.yaml"
    path.write_text("dataset: cranfield\nsample: {size: 50, seed: 1}\nmetrics: [nDCG@10]\n"
                    "baseline: bm25\npipelines:\n  bm25: [{bm25: {depth: 20}}]\n"
                    "  bm25 top-5: {parent: bm25, then: [{cutoff: 5}], adds: cut-off}\n")
    runner, out = CliRunner(), tmp_path / "reports" / "exp"
    res = runner.invoke(app, ["experiment", str(path), "--sample", "4", "--dataset",
                              str(data_dir / "cranfield"), "--index",
                              str(cranfield_index.path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "a seed-1 sample of 4 queries" in res.stdout and "| bm25 (baseline) |" in res.stdout
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["n_queries"] == 4 and data["swaps"]["bm25 top-5"]["queries"] == 4
    for args, message in [(["--without", "bm52"], "--without ['bm52']: not a stage name"),
                          (["--set", "bm25=3"], "expected STAGE.PARAM=VALUE"),
                          (["--set", "dense.depth=3"], "no pipeline has a 'dense' stage"),
                          (["--sample", "-1"], "--sample must be >= 0")]:
        res = runner.invoke(app, ["experiment", str(path), *args])
        assert res.exit_code == 2 and message in res.output, (args, res.output)
