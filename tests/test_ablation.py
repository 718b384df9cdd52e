"""The ablation harness on the real Cranfield index with a scripted LLM and a fake
cross-encoder; the modality-weight tuner never tunes on test."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
from tolerances import F32_ABS, F32_REL

from intentrank.errors import ConfigError, DataError
from intentrank.eval.ablation import (
    BIMODAL,
    DEFAULT_METRICS,
    DENSE,
    DYNAMIC,
    FULL,
    TRI_CE,
    TRIMODAL,
    bimodal_weights,
    run_ablation,
    write_report,
)
from intentrank.fuse.weighted import WeightedFusion
from intentrank.llm.base import LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.report.html import render_html
from intentrank.retrieve.retrievers import DenseRetriever
from intentrank.tune.grid import feature_matrix
from intentrank.tune.modality import (
    FEATURES,
    cross_validated_modality_weights,
    modality_rankings,
    modality_weights_for,
    simplex_grid,
    tune_modality_on_split,
    tune_modality_weights,
)

N_QUERIES = 10
# the weight replies cycle per query: valid, malformed, out of range, not normalised
WEIGHT_REPLIES = ('{"dense": 0.2, "sparse": 0.7, "graph": 0.1}', "dense: high, sparse: low",
                  '{"dense": 1.4, "sparse": -0.2, "graph": -0.2}',
                  '{"dense": 0.5, "sparse": 0.5, "graph": 0.5}')


class FakeLLM:
    """Answers the modality-weight prompt from :data:`WEIGHT_REPLIES` in turn and the
    listwise prompt by swapping the first two passages."""

    name = "fake:ablation"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def chat(self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
             stop: list[str] | None = None, logprobs: int = 0) -> LLMReply:
        text = messages[-1]["content"]
        if "weights of three search methods" in text:
            reply = WEIGHT_REPLIES[self.calls["weights"] % len(WEIGHT_REPLIES)]
            self.calls["weights"] += 1
            return LLMReply(reply, prompt_tokens=50, completion_tokens=12)
        if text.startswith("Rank the"):
            self.calls["listwise"] += 1
            return LLMReply("The second passage is best. [2, 1, 3, 4, 5]")
        self.calls["other"] += 1
        return LLMReply("")


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
def ablation(cranfield_index, sample):
    """One ablation run, counting how often each fusion and the dense leg really ran."""
    queries, qrels = sample
    fused: Counter[str] = Counter()
    encoded: list[int] = []
    fuse, search = WeightedFusion.fuse, DenseRetriever.search_rows

    def counting_fuse(self, rankings, trace):
        fused[self.name] += 1
        return fuse(self, rankings, trace)

    def counting_search(self, texts):
        encoded.append(len(texts))
        return search(self, texts)

    fake, scorer = FakeLLM(), OverlapScorer()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(WeightedFusion, "fuse", counting_fuse)
        mp.setattr(DenseRetriever, "search_rows", counting_search)
        report = run_ablation(cranfield_index, queries, qrels, llm=LLMClient(fake, cache=None),
                              cross_encoder=scorer, seed=7, n_permutations=2000)
    return report, fake, scorer, fused, encoded


def test_every_configuration_runs_and_reports_metrics(ablation) -> None:
    report = ablation[0]
    assert report.names == [DENSE, BIMODAL, TRIMODAL, TRI_CE, FULL, TRIMODAL + DYNAMIC,
                            TRI_CE + DYNAMIC, FULL + DYNAMIC]
    assert report.n_queries == N_QUERIES and report.baseline == TRIMODAL
    for r in report.results:
        assert set(r.scores.aggregate) == set(DEFAULT_METRICS)
        assert len(r.scores.per_query) == N_QUERIES and len(r.rankings) == N_QUERIES
        assert all(0.0 <= v <= 1.0 for v in r.scores.aggregate.values())
    depth = {r.name: max(len(x.doc_ids) for x in r.rankings) for r in report.results}
    assert depth[DENSE] == depth[TRIMODAL] == 100 and depth[TRI_CE] == depth[FULL] == 10
    assert report.result(TRIMODAL).scores.aggregate["nDCG@10"] > 0
    assert any("0.588/0.412" in n for n in report.notes)
    assert bimodal_weights((0.5, 0.35, 0.15)) == pytest.approx((0.5 / 0.85, 0.35 / 0.85))


def test_configurations_share_stage_outputs(ablation) -> None:
    report, fake, scorer, fused, encoded = ablation
    # each fusion and the dense leg ran once per query across every configuration using it
    assert fused == {"sparse": N_QUERIES, "bimodal": N_QUERIES, "trimodal": N_QUERIES}
    assert encoded == [N_QUERIES]
    assert fake.calls["weights"] == N_QUERIES
    assert N_QUERIES <= fake.calls["listwise"] <= 2 * N_QUERIES
    assert N_QUERIES * 100 <= scorer.pairs - 1 <= 2 * N_QUERIES * 100  # 1: the warm-up pair
    # ... and the later configurations replayed them, charged at their recorded cost
    full = report.result(FULL)
    assert full.trace.stages["trimodal"].counters["replayed"] == N_QUERIES
    assert full.trace.stages["cross_encoder"].counters["replayed"] == N_QUERIES
    assert full.latency["cross-encoder"] == pytest.approx(report.result(TRI_CE)
                                                          .latency["cross-encoder"])
    assert full.latency["fusion"] > 0 and full.latency["listwise LLM"] > 0
    dense = report.result(DENSE).latency
    assert dense["dense"] > 0 and dense["cross-encoder"] == dense["listwise LLM"] == 0


def test_dynamic_weight_fallbacks_are_counted(ablation) -> None:
    report = ablation[0]
    for name in (TRIMODAL, TRI_CE, FULL):
        assert report.result(name + DYNAMIC).counters["fallbacks"] == pytest.approx(7)
        assert report.result(name).counters["fallbacks"] == 0
    assert report.dynamic["queries"] == N_QUERIES
    assert report.dynamic["llm_share"] == pytest.approx(0.3)
    assert report.dynamic["fallbacks"] == {"malformed JSON": 3, "out of range": 2,
                                           "not normalised": 2}
    assert set(report.dynamic_tests) == {n + DYNAMIC for n in (TRIMODAL, TRI_CE, FULL)}


def test_swap_metrics_per_reranking_stage(ablation) -> None:
    report = ablation[0]
    assert set(report.swaps) == {TRI_CE, FULL, TRI_CE + DYNAMIC, FULL + DYNAMIC}
    listwise = report.swaps[FULL]  # the fake LLM swaps the first two passages
    assert listwise.mean_swaps == pytest.approx(1.0) and listwise.top1_changed == 1.0
    assert listwise.queries == N_QUERIES and listwise.depth == 10
    assert report.swaps[TRI_CE].mean_swaps > 0


def test_error_analysis_and_significance(ablation) -> None:
    report = ablation[0]
    for name, deg in report.degradations.items():
        r = report.result(name)
        before = report.result(r.parent).scores.column("nDCG@10")
        after = r.scores.column("nDCG@10")
        assert deg.count == sum(after[q] < before[q] - 1e-12 for q in before)
        assert len(deg.worst) == min(deg.count, 5)
    assert set(report.tests) == set(report.names) - {TRIMODAL}
    for tests in report.tests.values():
        assert set(tests) == {"nDCG@10", "MRR@10", "MAP@10", "Recall@10", "P@10"}
        assert all(0 < t.p_randomization <= 1 and t.n == N_QUERIES for t in tests.values())


def test_markdown_json_and_self_contained_html(ablation, tmp_path) -> None:
    report = ablation[0]
    md = report.to_markdown()
    for n in ("I", "II", "III", "IV", "VI", "VII"):
        assert f"### Table {n}." in md, n
    assert all(name in md for name in report.names)
    data = json.loads(report.to_json())
    assert [c["name"] for c in data["configs"]] == report.names
    assert data["dynamic_weights"]["fallbacks"]["malformed JSON"] == 3
    page = render_html(report)
    assert page.count("data:image/png;base64,") == 3
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", page)
    assert "<script" not in page and "<link" not in page
    assert page.count("<table>") == len(report.tables())
    paths = write_report(report, tmp_path / "out" / "cranfield")
    assert [p.name for p in paths] == ["cranfield.md", "cranfield.html", "cranfield.json"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_missing_llm_and_cross_encoder_skip_configurations(cranfield_index, sample) -> None:
    queries, qrels = sample
    report = run_ablation(cranfield_index, queries[:4], qrels, n_permutations=200)
    assert report.names == [DENSE, BIMODAL, TRIMODAL]
    assert any("no cross-encoder" in n for n in report.notes)
    assert any("no LLM" in n for n in report.notes)
    assert "Table II" not in report.to_markdown()
    with pytest.raises(ConfigError, match="baseline"):
        run_ablation(cranfield_index, queries[:2], qrels, baseline=FULL)


# -- modality-weight tuning ---------------------------------------------------------------
class SplitSpy:
    """A dataset stand-in that records which split was read."""

    name = "spy"

    def __init__(self, queries, qrels, splits=("train", "test")) -> None:
        self.queries, self.qrels, self.splits, self.read = queries, qrels, list(splits), []

    def sample(self, split, n, seed):
        self.read.append(split)
        return self.queries, self.qrels


def test_simplex_grid() -> None:
    for step, n in ((0.1, 66), (0.05, 231)):
        grid = simplex_grid(step)
        assert len(grid) == n and all(sum(p) == pytest.approx(1) for p in grid)
    with pytest.raises(ConfigError):
        simplex_grid(0.3)


def test_modality_tuner_refuses_test_and_weights_sum_to_one(cranfield_index, sample) -> None:
    queries, qrels = sample
    spy = SplitSpy(queries[:6], qrels)
    with pytest.raises(DataError, match="on the test split"):
        tune_modality_on_split(spy, cranfield_index, split="test")
    res = tune_modality_on_split(spy, cranfield_index, split="train", step=0.1, k=30)
    assert spy.read == ["train"]
    assert set(res.best) == set(FEATURES) and sum(res.best.values()) == pytest.approx(1)
    assert len(res.table) == 66 and res.score == max(s for _, s in res.table)


def test_reweighting_stage_scores_reproduces_weighted_fusion(ablation, cranfield_index,
                                                             sample) -> None:
    report, queries = ablation[0], sample[0]
    rankings = modality_rankings(cranfield_index, queries[:3], k=100)
    tri = {r.query.id: r for r in report.result(TRIMODAL).rankings}
    for r in rankings:
        ids, mat = feature_matrix(r, FEATURES, normalise=True)
        score = dict(zip(ids, mat @ np.array([0.5, 0.35, 0.15]), strict=True))
        for d in tri[r.query.id].docs[:10]:
            assert score[d.doc_id] == pytest.approx(d.score, rel=F32_REL, abs=F32_ABS)


def test_cross_validated_weights_feed_the_ablation(cranfield_index, sample) -> None:
    queries, qrels = sample
    rankings = modality_rankings(cranfield_index, queries, k=30)
    cv = cross_validated_modality_weights(rankings, qrels, step=0.1, folds=3, seed=1)
    assert len(cv.folds) == 3 and set(cv.by_query) == {q.id for q in queries}
    assert all(sum(w) == pytest.approx(1) for w in cv.by_query.values())
    assert set(cv.run) == {q.id for q in queries}
    best = tune_modality_weights(rankings, qrels, step=0.1)
    assert sum(best.best.values()) == pytest.approx(1)
    report = run_ablation(cranfield_index, queries[:3], qrels, weights=cv.by_query,
                          n_permutations=100, k=30)
    assert report.names == [DENSE, BIMODAL, TRIMODAL]
    assert any("cross-validated" in n for n in report.notes)


def test_weights_come_from_train_when_there_is_one_else_from_cv(cranfield_index, sample):
    queries, qrels = sample
    with_train = SplitSpy(queries[:6], qrels, splits=("train", "test"))
    weights, how = modality_weights_for(with_train, cranfield_index, "test", k=30)
    assert with_train.read == ["train"] and "tuned on spy/train" in how
    assert len(weights) == 3 and sum(weights) == pytest.approx(1)
    test_only = SplitSpy(queries[:6], qrels, splits=("test",))
    per_query, how = modality_weights_for(test_only, cranfield_index, "test", folds=3, k=30)
    assert "3-fold cross-validated" in how and set(per_query) == {q.id for q in queries[:6]}


def test_shallow_cascade_scores_fewer_pairs_and_shorter_passages(cranfield_index, sample):
    """ce_depth bounds the pairs the cross-encoder scores; listwise_chars the passage text."""
    queries, qrels = sample
    seen: list[str] = []

    class RecordingLLM(FakeLLM):
        def chat(self, messages, **kwargs):
            seen.append(messages[-1]["content"])
            return super().chat(messages, **kwargs)

    scorer = OverlapScorer()
    report = run_ablation(cranfield_index, queries[:3], qrels,
                          llm=LLMClient(RecordingLLM(), cache=None), cross_encoder=scorer,
                          dynamic=False, ce_depth=20, listwise_chars=50, n_permutations=200,
                          warm=False)
    assert report.names == [DENSE, BIMODAL, TRIMODAL, TRI_CE, FULL]
    assert scorer.pairs == 3 * 20
    assert "top-20 -> CE -> top-10" in report.result(TRI_CE).description
    listwise = [p for p in seen if p.startswith("Rank the")]
    assert len(listwise) == 3
    for prompt in listwise:
        passages = re.findall(r"^\[\d\] (.*)$", prompt, flags=re.M)
        assert len(passages) == 5 and all(len(p) <= 50 for p in passages)
    with pytest.raises(ConfigError, match="ce_depth"):
        run_ablation(cranfield_index, queries[:1], qrels, cross_encoder=scorer, ce_depth=5)


def test_latency_charges_cached_llm_replies_their_generation_time() -> None:
    from intentrank.eval.ablation import latency_ms
    from intentrank.types import Trace

    trace = Trace()
    dyn = trace.stage("dynamic")
    dyn.seconds = 1.0  # wall: 0.6 s of fresh LLM calls + 0.4 s of fusion work
    dyn.counters.update(llm_seconds=0.6, llm_cached_seconds=3.0)
    listwise = trace.stage("listwise")
    listwise.seconds = 0.5
    listwise.counters.update(llm_cached_seconds=4.5)
    out = latency_ms(trace, 2)
    assert out["LLM weights"] == pytest.approx(1000 * 3.6 / 2)
    assert out["fusion"] == pytest.approx(1000 * 0.4 / 2)
    assert out["listwise LLM"] == pytest.approx(1000 * 5.0 / 2)


def test_ce_rrf_fuses_first_stage_and_cross_encoder_ranks(cranfield_index, sample) -> None:
    from intentrank.fuse.rrf import rrf

    queries, qrels = sample
    report = run_ablation(cranfield_index, queries[:3], qrels, cross_encoder=OverlapScorer(),
                          dynamic=False, ce_depth=20, ce_rrf=True, n_permutations=200,
                          warm=False)
    plain = run_ablation(cranfield_index, queries[:3], qrels, cross_encoder=OverlapScorer(),
                         dynamic=False, ce_depth=20, n_permutations=200, warm=False)
    assert "RRF(fusion, CE)" in report.result(TRI_CE).description
    for tri, ce, fused in zip(report.result(TRIMODAL).rankings, plain.result(TRI_CE).rankings,
                              report.result(TRI_CE).rankings, strict=True):
        scored = OverlapScorer().predict(
            [(tri.query.text, cranfield_index.doc_text(d)) for d in tri.doc_ids[:20]])
        ce_order = [tri.doc_ids[i] for i in np.argsort(-scored, kind="stable")]
        assert ce.doc_ids == ce_order[:10]
        expected = rrf([tri.doc_ids[:20], ce_order], k=60)
        best = sorted(expected.values(), reverse=True)[:10]  # ties may break either way
        assert [expected[d] for d in fused.doc_ids] == pytest.approx(best)
