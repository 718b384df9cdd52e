"""Method 4 (RichRAG): sub-aspects, multi-faceted pooling, coverage-aware list ranking, MMR,
and the coverage measures (NCOM by hand, ndeval's alpha-nDCG / ERR-IA / S-recall), on
hand-computed cases and on the real Cranfield index with a scripted LLM."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from fakes import FakeClock, Fixed
from tolerances import F32_ABS, F32_REL

from intentrank.core.params import ParameterError
from intentrank.core.registry import BuildContext
from intentrank.data.aspects import Aspect, AspectQuestion, load_aspect_set, write_aspect_set
from intentrank.errors import DataError
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.llm.parsing import ParseError
from intentrank.measures.diversity import evaluate_diversity
from intentrank.measures.ncom import NcomScorer, com, rouge_phi, silver_list, tokens
from intentrank.pipelines import build_pipeline, pipeline_from_config
from intentrank.query.aspects import AspectExplorer, aspects_of, parse_aspects
from intentrank.query.multi_faceted import MultiFacetedRetriever, aspects_found
from intentrank.rerank.coverage import CoverageReranker, coverage_weights, greedy_coverage
from intentrank.rerank.mmr import mmr_order
from intentrank.retrieve.retrievers import DenseRetriever
from intentrank.types import Query, Ranking, ScoredDoc, Trace

approx = lambda v: pytest.approx(v, rel=F32_REL, abs=F32_ABS)  # noqa: E731


# -- NCOM and ROUGE by hand -------------------------------------------------------------------
def test_rouge_phi_by_hand():
    # reference bigrams: the cat, cat on, on the, the mat (4); 3 in the passage -> 0.75;
    # LCS = all 5 reference tokens -> 1.0; phi = (0.75 + 1.0) / 2
    assert rouge_phi("The cat sat on the mat, today.", "the cat on the mat") == approx(0.875)
    assert tokens("Heat-transfer, Mach 7!") == ["heat", "transfer", "mach", "7"]
    assert rouge_phi("a word", "word") == approx(0.5)  # one token: no bigram, LCS 1/1
    assert rouge_phi("", "heat transfer") == 0.0


def test_com_weights_use_the_documents_before_each_position():
    phi = np.array([[0.8, 0.0], [0.4, 0.2], [0.0, 0.6]])
    # t=1: w=(1,1) -> 0.8; covered (0.8, 0): w=(0,1) -> 0.2; covered (0.8, 0.2): w=(0.2, 0.8)
    # -> 0.6 * 0.8 = 0.48
    assert com(phi) == approx(1.48)
    assert silver_list(phi, 2) == [0, 2]  # 0.8, then 0.6 beats 0.2
    assert com(phi[[0, 2]]) == approx(1.4)


def test_ncom_by_hand():
    texts = {"p1": "The heat transfer rate was measured.", "p2": "Wing flutter speed rises.",
             "p3": "Unrelated text."}
    scorer = NcomScorer(["heat transfer rate", "flutter speed of the wing"], texts.__getitem__)
    # phi(p1) = (1, (0 + 1/5) / 2) = (1, 0.1); phi(p2) = (0, (1/4 + 2/5) / 2) = (0, 0.325)
    assert scorer.phi(["p1", "p2", "p3"]) == pytest.approx(
        np.array([[1.0, 0.1], [0.0, 0.325], [0.0, 0.0]]))
    # list [p3, p1]: 0 + 1.1; silver [p1, p2]: 1.1 + 0.325 * (1 - 0.1 / 1.1) = 15.35 / 11
    assert scorer.ncom(["p3", "p1"], ["p1", "p2", "p3"], k=2) == approx(12.1 / 15.35)
    assert scorer.ncom(["p1", "p2"], ["p3"], k=2) == approx(1.0)  # the list joins the pool
    assert NcomScorer(["zebra"], texts.__getitem__).ncom(["p1"], ["p2"], k=2) == 0.0


# -- the greedy coverage list -----------------------------------------------------------------
def test_coverage_weights_normalise_by_the_sum():
    assert coverage_weights(np.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    assert coverage_weights(np.array([0.6, 0.2, 0.2])) == approx(np.array([0.4, 0.8, 0.8]))


def test_greedy_coverage_by_hand():
    phi = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.7]])
    c = greedy_coverage(phi, 2)
    # t=1: gains 1.0, 1.0, 0.8 (tie on gain and relevance: the earlier); covered (0.9, 0.1),
    # w = (0.1, 0.9): row 1 gains 0.26, row 2 gains 0.64
    assert c.order == [0, 2] and c.gains == approx([1.0, 0.64]) and c.covers == [0, 1]


def test_greedy_coverage_one_aspect_ranks_by_phi_and_small_pools():
    one = greedy_coverage(np.array([[0.3], [0.9], [0.5]]), 10)  # pool of 3 < k
    assert one.order == [1, 2, 0] and one.gains == approx([0.9, 0.0, 0.0])
    assert greedy_coverage(np.zeros((0, 2)), 5).order == []
    with pytest.raises(ValueError, match=">= 0"):
        greedy_coverage(np.array([[-0.1, 0.2]]), 1)


def test_mmr_order_by_hand():
    rel = np.array([0.9, 0.85, 0.5])
    sim = np.array([[1.0, 0.95, 0.1], [0.95, 1.0, 0.2], [0.1, 0.2, 1.0]])
    # lambda 0.5: first 0.9; then 0.5*0.85 - 0.5*0.95 = -0.05 vs 0.5*0.5 - 0.5*0.1 = 0.2
    order, red = mmr_order(rel, sim, 3, 0.5)
    assert order == [0, 2, 1] and red == approx([0.0, 0.1, 0.95])
    assert mmr_order(rel, sim, 3, 1.0)[0] == [0, 1, 2]  # lambda 1: relevance order


# -- parsing the explorer's replies -----------------------------------------------------------
def test_parse_aspects_bad_replies():
    q = "How does wind power compare with solar power?"
    assert parse_aspects("1. Wind cost\n2. wind  COST!\n3. Solar cost\n4. " + q, q, 4) == [
        "Wind cost", "Solar cost"]  # duplicates (case, punctuation) and the echo dropped
    assert parse_aspects("1. solar cost only", q, 4) == ["solar cost only"]  # one aspect
    assert parse_aspects('{"aspects": ["a wind", "b solar", "c storage"]}', q, 2) == [
        "a wind", "b solar"]
    for bad in ("", "1. " + q, "1. ok\n"):
        with pytest.raises(ParseError, match="no usable aspect"):
            parse_aspects(bad, q, 4)


class ScriptedLLM:
    """Replies by the query in the prompt's last line (``default`` otherwise)."""

    name = "fake:aspects"

    def __init__(self, replies: dict[str, str], default: str = "") -> None:
        self.replies, self.default, self.calls = replies, default, 0

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        self.calls += 1
        last = messages[-1]["content"].rsplit("Question: ", 1)[-1].strip()
        return LLMReply(self.replies.get(last, self.default))


def test_explorer_pushes_aspects_and_counts_fallbacks():
    llm = LLMClient(ScriptedLLM({"a": "1. alpha part\n2. Alpha part\n3. beta part",
                                 "b": "I cannot list aspects."}), cache=None)
    trace = Trace()
    out = AspectExplorer(llm, n=4)([Ranking(Query("1", "a")), Ranking(Query("2", "b"))], trace)
    assert out[0].query.derived_of("aspect") == ["alpha part", "beta part"]
    assert {d.stage for d in out[0].query.derived} == {"aspects"}
    # "I cannot list aspects." is a line, so it is one aspect; an echo is a fallback
    assert out[1].query.derived_of("aspect") == ["I cannot list aspects."]
    llm2 = LLMClient(ScriptedLLM({}, default="1. c"), cache=None)
    trace2 = Trace()
    none = AspectExplorer(llm2)([Ranking(Query("3", "c"))], trace2)
    assert none[0].query.derived_of("aspect") == [] and aspects_of(none[0].query) == ["c"]
    assert trace2.stage("aspects").counters["fallbacks"] == 1
    assert trace.stage("aspects").counters["aspects"] == 3
    with pytest.raises(ParameterError, match="n \\(aspects per query\\)"):
        AspectExplorer(llm, n=0)
    with pytest.raises(ParameterError, match="structured"):
        AspectExplorer(llm, structured="yes")  # type: ignore[arg-type]


# -- diversity measures (TREC ndeval through ir-measures) -------------------------------------
QUESTIONS = [AspectQuestion("q", "x", (Aspect("1", "a", {"d1": 1, "d3": 1}),
                                       Aspect("2", "b", {"d2": 1, "d4": 0})))]


def test_diversity_measures_by_hand():
    run = {"q": {"d1": 3.0, "d3": 2.0, "d2": 1.0}}
    r = evaluate_diversity(run, QUESTIONS)
    # alpha 0.5: gains 1, 0.5, 1 -> 1 + 0.5/log2(3) + 1/2; ideal d1, d2, d3: 1 + 1/log2(3)
    # + 0.5/2
    dcg, ideal = 1 + 0.5 / np.log2(3) + 0.5, 1 + 1 / np.log2(3) + 0.25
    assert r.aggregate["alpha_nDCG@10"] == approx(dcg / ideal)
    assert r.aggregate["StRecall@10"] == approx(1.0)
    only_one = evaluate_diversity({"q": {"d1": 2.0, "d3": 1.0}}, QUESTIONS)
    assert only_one.aggregate["StRecall@10"] == approx(0.5)
    assert evaluate_diversity({}, QUESTIONS).aggregate["ERR_IA@10"] == 0.0
    assert QUESTIONS[0].qrels() == {"d1": 1, "d3": 1, "d2": 1, "d4": 0}


def test_aspect_set_round_trip_and_bad_lines(tmp_path):
    path = tmp_path / "set.jsonl"
    write_aspect_set(QUESTIONS, path)
    assert load_aspect_set(path) == QUESTIONS
    good = json.loads(path.read_text())
    cases = [
        ("not json", ":1", None),
        (json.dumps({**good, "aspects": []}), ":1", "aspects"),
        (json.dumps({**good, "text": ""}), ":1", "text"),
        (json.dumps({**good, "aspects": [{"id": "1", "answer": "a", "docs": {"d1": 0}}]}),
         ":1", "aspects[0].docs"),
        (json.dumps({**good, "aspects": [{"id": "1", "answer": "a", "docs": {"d1": 1.5}}]}),
         ":1", "aspects[0].docs"),
        (json.dumps({**good, "aspects": [{"id": "1", "docs": {"d1": 1}}]}), ":1",
         "aspects[0].answer"),
        (json.dumps(good) + "\n" + json.dumps(good), ":2", "id"),
    ]
    for text, line, field in cases:
        path.write_text(text + "\n")
        with pytest.raises(DataError) as err:
            load_aspect_set(path)
        assert f"set.jsonl{line}" in str(err.value) and err.value.field == field, text


# -- the stages on the real Cranfield index ---------------------------------------------------
Q = Query("1", "what similarity laws must be obeyed when constructing aeroelastic models of "
               "heated high speed aircraft")
ASPECTS = "1. aeroelastic model similarity laws\n2. aerodynamic heating of aircraft structures"


@pytest.mark.slow
def test_coverage_config_runs_on_the_real_index(cranfield_index, tmp_path):
    fake = ScriptedLLM({Q.text: ASPECTS})
    llm = LLMClient(fake, cache=None)
    pipe = pipeline_from_config("src/intentrank/configs/coverage.yaml", index=cranfield_index,
                                llm=llm)
    res = pipe.run([Q])
    r = res.rankings[0]
    assert r.query.derived_of("aspect") == ["aeroelastic model similarity laws",
                                            "aerodynamic heating of aircraft structures"]
    top = r.docs[:10]
    assert [d.score for d in top] == [10.0 - t for t in range(10)]
    assert len(r.docs) == len({d.doc_id for d in r.docs}) <= 60  # de-duplicated pool
    for d in top:
        found = aspects_found(d)
        assert found and set(found) <= {0, 1}
        assert {"coverage.gain", "coverage.covers", "coverage.phi0", "coverage.phi1"} <= set(
            d.stage_scores)
        assert 0.0 <= d.stage_scores["coverage.phi0"] <= 1.0
    # the greedy list recomputed from the recorded phi is the one returned
    phi = np.array([[d.stage_scores[f"coverage.phi{i}"] for i in (0, 1)] for d in top])
    assert greedy_coverage(phi, 10).order == list(range(10))
    assert {int(d.stage_scores["coverage.covers"]) for d in top} <= {0, 1}
    # nothing is covered before the first pick: every weight is 1, its gain is its phi sum
    assert top[0].stage_scores["coverage.gain"] == pytest.approx(phi[0].sum(), rel=F32_REL,
                                                                 abs=F32_ABS)
    assert res.trace.stage("multi_faceted").counters["aspect_queries"] == 2
    assert fake.calls == 1


def test_multi_faceted_seconds_leave_out_the_retriever(monkeypatch):
    # the retriever's time is its own trace entry, not also multi_faceted's, so the stages of
    # a trace sum to the pipeline's time (the experiment latency tables)
    clock = FakeClock()
    monkeypatch.setattr("intentrank.types.time.perf_counter", clock)
    q = Q.with_derived("aspect", ["similarity laws", "heating"], "aspects")
    trace = Trace()
    pooled = MultiFacetedRetriever(Fixed("slow", {"d1": 2.0, "d2": 1.0}, clock))([Ranking(q)],
                                                                               trace)[0]
    assert pooled.doc_ids == ["d1", "d2"]
    assert trace.stage("multi_faceted/slow").seconds == 5.0
    assert trace.stage("multi_faceted").seconds == 0.0
    assert trace.stage("multi_faceted").counters["aspect_queries"] == 2


@pytest.mark.slow
def test_multi_faceted_pool_and_the_baselines_from_python(cranfield_index):
    q = Q.with_derived("aspect", ["similarity laws", "heating"], "aspects")
    dense = DenseRetriever(cranfield_index, depth=5)
    trace = Trace()
    pooled = MultiFacetedRetriever(dense, depth=3)([Ranking(q)], trace)[0]
    ref = dense([Ranking(Query("a", f"{Q.text} similarity laws")),
                 Ranking(Query("b", f"{Q.text} heating"))], Trace())
    expect: dict[str, dict[int, float]] = {}
    for i, rr in enumerate(ref):
        for d in rr.docs[:3]:
            expect.setdefault(d.doc_id, {})[i] = d.score
    got = {d.doc_id: aspects_found(d) for d in pooled.docs}
    assert got.keys() == expect.keys()
    for doc, scores in expect.items():
        assert got[doc] == approx(scores), doc
    assert [d.score for d in pooled.docs] == approx(sorted((max(v.values()) for v in
                                                            expect.values()), reverse=True))
    fused = MultiFacetedRetriever(dense, depth=3, merge="rrf")([Ranking(q)], Trace())[0]
    assert fused.docs[0].score == approx(max(sum(1 / (60 + r.doc_ids.index(d) + 1)
                                                 for r in ref if d in r.doc_ids[:3])
                                             for d in expect))
    # a pool smaller than k: every pooled document is listed once, in the chosen order
    cov = CoverageReranker(cranfield_index, top_k=10, scorer="cosine")([pooled], Trace())[0]
    assert sorted(cov.doc_ids) == sorted(expect) and len(cov.docs) == len(expect) <= 6
    no_aspects = CoverageReranker(cranfield_index, top_k=3, scorer="cosine")(
        [MultiFacetedRetriever(dense)([Ranking(Q)], Trace())[0]], Trace())[0]
    assert {"coverage.phi0"} <= set(no_aspects.docs[0].stage_scores)  # the query alone
    assert "coverage.phi1" not in no_aspects.docs[0].stage_scores
    ctx = BuildContext(index=cranfield_index)
    mmr = build_pipeline([{"dense": {"depth": 20}}, {"mmr": {"top_k": 5, "lambda": 1.0}}], ctx)
    plain = build_pipeline([{"dense": {"depth": 20}}], ctx)
    assert mmr.run([Q]).rankings[0].doc_ids[:5] == plain.run([Q]).rankings[0].doc_ids[:5]


def test_bad_parameters_are_refused(tmp_path):
    ctx = BuildContext(index=None)
    with pytest.raises(Exception, match="needs an index"):
        build_pipeline([{"coverage": {"top_k": 10}}], ctx)

    class NoIndex:
        row_of: dict = {}

    with pytest.raises(ParameterError, match="unknown scorer 'rouge'"):
        CoverageReranker(NoIndex(), scorer="rouge")
    with pytest.raises(ParameterError, match="top_k"):
        CoverageReranker(NoIndex(), top_k=0, scorer="cosine")
    with pytest.raises(ParameterError, match="ranker must have choose"):
        CoverageReranker(NoIndex(), ranker=object())  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="lambda must be <= 1"):
        from intentrank.rerank.mmr import MMRReranker
        MMRReranker(NoIndex(), lam=1.5)
    with pytest.raises(ParameterError, match="unknown merge 'sum'"):
        MultiFacetedRetriever(DenseRetriever.__new__(DenseRetriever), merge="sum")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(textwrap.dedent("""\
        pipeline:
          - multi_faceted: {retriever: {dense: {depth: 5}}, k: 3}
        """))
    with pytest.raises(Exception, match="did you mean 'depth'"):
        pipeline_from_config(cfg, index=None)


@pytest.mark.slow
def test_the_embedded_llm_lists_aspects(tmp_path):
    from intentrank.llm.embedded import LlamaCppLLM

    model = LlamaCppLLM(n_threads=1)
    model.load()
    llm = LLMClient(model, cache=tmp_path / "llm.sqlite")
    text = "How does vitamin D deficiency relate to bone fractures and to immune function?"
    trace = Trace()
    out = AspectExplorer(llm, n=4)([Ranking(Query("v", text))], trace)[0]
    aspects = out.query.derived_of("aspect")
    counters = trace.stage("aspects").counters
    assert counters["llm_calls"] == 1 and counters["aspects"] == len(aspects)
    assert counters.get("fallbacks", 0) + (1 if aspects else 0) == 1
    assert len(aspects) <= 4 and len({a.lower() for a in aspects}) == len(aspects)
    assert text not in aspects


class RecordingScorer:
    """A pair scorer that returns logits (outside [0, 1]) and records its pairs."""

    name = "recording"

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def predict(self, pairs, batch_size=8):
        self.pairs += list(pairs)
        return np.array([float(len(d) % 3) - 1.0 for _, d in pairs])  # -1, 0 or 1


class Texts:
    row_of = {"a": 0, "b": 1, "c": 2}

    def doc_text(self, doc_id: str) -> str:
        return {"a": "x" * 3, "b": "x" * 4, "c": "x" * 5}[doc_id]


def test_coverage_scores_query_plus_aspect_or_the_aspect_alone_through_a_sigmoid():
    q = Query("1", "broad question").with_derived("aspect", ["part one", "part two"], "aspects")
    ranking = Ranking(q, [ScoredDoc(d, 1.0) for d in "abc"])
    for against, first in (("query+aspect", "broad question part one"), ("aspect", "part one")):
        scorer = RecordingScorer()
        out = CoverageReranker(Texts(), top_k=2, model=scorer, against=against)(
            [ranking], Trace())[0]
        assert scorer.pairs[:2] == [(first, "xxx"), (first.replace("one", "two"), "xxx")]
        # logits -1, 0, 1 (lengths 3, 4, 5) -> sigmoids; c first, then b, a stays below
        assert out.doc_ids == ["c", "b", "a"] and [d.score for d in out.docs[:2]] == [2.0, 1.0]
        assert out.docs[0].stage_scores["coverage.phi0"] == approx(1 / (1 + np.exp(-1.0)))
    with pytest.raises(ParameterError, match="unknown against"):
        CoverageReranker(Texts(), model=RecordingScorer(), against="doc")


def test_aspect_labels_name_the_covered_or_finding_aspects():
    from intentrank.rerank.coverage import aspect_labels

    q = Query("1", "broad").with_derived("aspect", ["one", "two"], "aspects")
    r = Ranking(q, [ScoredDoc("a", 2.0, {"multi_faceted.aspect1": 0.5, "coverage.covers": 0.0}),
                    ScoredDoc("b", 1.0, {"multi_faceted.aspect0": 0.4,
                                         "multi_faceted.aspect1": 0.3}),
                    ScoredDoc("c", 0.0, {"dense": 0.1})])
    assert aspect_labels(r) == ["one", "one; two", ""]
    plain = Ranking(Query("2", "just me"), [ScoredDoc("a", 1.0, {"coverage.covers": 0.0})])
    assert aspect_labels(plain) == ["just me"]


def test_minmax_calibration_by_hand():
    from intentrank.rerank.coverage import minmax_columns

    phi = np.array([[0.5, 0.2], [0.5, 0.6], [0.5, 0.4]])
    assert minmax_columns(phi, logits=False) == approx(
        np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 0.5]]))
    p = 1 / (1 + np.exp(-np.array([[-1.0], [0.0], [2.0]])))  # logits -1, 0, 2
    assert minmax_columns(p, logits=True) == approx(np.array([[0.0], [1 / 3], [1.0]]))
    q = Query("1", "broad").with_derived("aspect", ["one", "two"], "aspects")
    out = CoverageReranker(Texts(), top_k=3, model=RecordingScorer(), calibrate="minmax")(
        [Ranking(q, [ScoredDoc(d, 1.0) for d in "abc"])], Trace())[0]
    # logits -1, 0, 1 for a, b, c on both aspects -> 0, 0.5, 1: c, then b (0.5 * w), then a
    assert out.doc_ids == ["c", "b", "a"]
    assert [d.stage_scores["coverage.phi0"] for d in out.docs] == approx([1.0, 0.5, 0.0])
    with pytest.raises(ParameterError, match="unknown calibrate"):
        CoverageReranker(Texts(), model=RecordingScorer(), calibrate="z")


def test_structured_explorer_sends_the_schema_and_reads_json():
    class SchemaLLM:
        name = "fake:schema"

        def __init__(self) -> None:
            self.schemas: list = []

        def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
            self.schemas.append(params.json_schema)
            return LLMReply('{"aspects": ["wind cost", "Wind cost", "solar cost"]}')

    fake = SchemaLLM()
    out = AspectExplorer(LLMClient(fake, cache=None), n=4, structured=True)(
        [Ranking(Query("1", "wind versus solar"))], Trace())[0]
    assert out.query.derived_of("aspect") == ["wind cost", "solar cost"]
    assert fake.schemas[0]["required"] == ["aspects"] and fake.schemas[0]["title"] == "aspects"


def test_cli_search_shows_the_aspect_each_result_covers(cranfield_index, fake_openai,
                                                         tmp_path):
    """``intentrank search`` with a multi-aspect pipeline on the real Cranfield index: the
    aspects above the table and an aspect per result (JSON: ``aspects`` and ``aspect``)."""
    import json

    from typer.testing import CliRunner

    from intentrank.cli import app

    config = tmp_path / "cov.yaml"
    config.write_text("pipeline:\n  - aspects: {n: 2}\n"
                      "  - multi_faceted: {retriever: {bm25: {depth: 10}}, merge: max}\n"
                      "  - coverage: {top_k: 5, scorer: cosine}\n")
    url, _ = fake_openai("ok", reply="1. boundary layer transition\n2. heat transfer")
    args = ["--llm", f"openai:fake@{url}", "--no-llm-cache", "search",
            str(cranfield_index.path), "boundary layer heat transfer", "-p", str(config),
            "-k", "5"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout[r.stdout.index("["):])
    assert body[0]["aspects"] == ["boundary layer transition", "heat transfer"]
    labels = [res["aspect"] for res in body[0]["results"]]
    assert len(labels) == 5 and set(labels) <= {"boundary layer transition", "heat transfer"}
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "aspects: boundary layer transition; heat transfer" in \
        table.stdout
