"""Label-free reformulation scores (measures/label_free.py): cosine to gold by conversation-length
bucket, the Reranker Support Score, the LLM Citation Score and the agreement check, each
against hand-computed values with fakes, then on real models and data (MiniLM on CAsT 2019
turns, the bundled cross-encoder on SciFact, the embedded 0.5B answering with citations)."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import RecordingLLM
from tolerances import F32_ABS, F32_REL

from intentrank.core.params import ParameterError
from intentrank.errors import DataError
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.llm.parsing import Repaired
from intentrank.measures.label_free import (
    BUCKETS,
    HYDE,
    PARAPHRASE,
    CitedAnswer,
    aggregate_cosine,
    average_citation_score,
    citation_scores,
    cite_answers,
    conversation_length,
    cosine_rows,
    cosine_to_gold,
    cosine_to_gold_queries,
    length_bucket,
    method_agreement,
    read_citations,
    reranker_support,
)
from intentrank.types import Query, Ranking, ScoredDoc, Trace, Turn


def approx(x: float) -> Any:
    return pytest.approx(x, rel=F32_REL, abs=F32_ABS)


class VectorEmbedder:
    """Encodes each text as the vector given for it (not normalised); counts calls."""

    name, dim = "fake:vectors", 3

    def __init__(self, vectors: dict[str, tuple[float, ...]]) -> None:
        self.vectors, self.calls = vectors, []

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


VECTORS = {"gold": (1, 0, 0), "gold b": (0, 0, 1), "gold c": (1, 0, 0), "gold d": (1, 0, 0),
           "ref a": (3, 4, 0), "raw a": (0, 1, 0), "ref b": (0, 0, 2), "raw b": (0, 1, 1),
           "ref c": (1, 1, 0), "raw c": (-1, 0, 0), "ref d": (0, 1, 0), "raw d": (3, 4, 0)}
GOLDS = {"a": "gold", "b": "gold b", "c": "gold c", "d": "gold d"}
RAWS = {"a": "raw a", "b": "raw b", "c": "raw c", "d": "raw d"}
LENGTHS = {"a": 4, "b": 5, "c": 10, "d": 9}  # the bucket edges: 4 | 5 (and 9) | 10
REFS = {"a": "ref a", "b": "ref b", "c": "ref c", "d": "ref d"}
R2 = 1 / math.sqrt(2)


# ------------------------------------------------------------------------- cosine to gold

def test_length_buckets_at_their_edges():
    assert [length_bucket(n) for n in (1, 4, 5, 9, 10, 11)] == [
        "<5", "<5", "5-10", "5-10", ">=10", ">=10"]
    with pytest.raises(ParameterError, match="conversation length"):
        length_bucket(0)
    turn = Query("c_4", "and its cost?", history=(Turn("q1"), Turn("q2", "a2"), Turn("q3")))
    assert conversation_length(turn) == 4 and conversation_length(Query("x", "q")) == 1


def test_cosine_to_gold_per_turn_and_by_bucket():
    emb = VectorEmbedder(VECTORS)
    turns = cosine_to_gold(emb, REFS, GOLDS, RAWS, LENGTHS)
    assert [t.query_id for t in turns] == ["a", "b", "c", "d"]
    # a: (3,4,0)/5 . (1,0,0) = 0.6, raw (0,1,0) -> 0; b: 1 and 1/sqrt2; c: 1/sqrt2 and -1;
    # d: 0 and 0.6
    assert [t.cos_gold for t in turns] == [approx(0.6), approx(1.0), approx(R2), approx(0.0)]
    assert [t.cos_raw for t in turns] == [approx(0.0), approx(R2), approx(-1.0), approx(0.6)]
    assert [t.delta for t in turns] == [approx(0.6), approx(1 - R2), approx(R2 + 1),
                                        approx(-0.6)]
    assert [t.bucket for t in turns] == ["<5", "5-10", ">=10", "5-10"]
    means = aggregate_cosine(turns)
    assert list(means) == ["all", *BUCKETS]
    assert (means["<5"].n, means["<5"].cos_gold, means["<5"].delta) == (1, approx(0.6),
                                                                         approx(0.6))
    assert (means["5-10"].n, means["5-10"].cos_gold, means["5-10"].delta) == (
        2, approx(0.5), approx((1 - R2 - 0.6) / 2))
    assert (means[">=10"].cos_gold, means[">=10"].delta) == (approx(R2), approx(R2 + 1))
    assert (means["all"].n, means["all"].cos_gold, means["all"].delta) == (
        4, approx((0.6 + 1 + R2) / 4), approx(0.5))
    assert len(emb.calls) == 1 and len(emb.calls[0]) == len(set(emb.calls[0])) == 12
    assert aggregate_cosine(turns[:1])[">=10"].cos_gold is None


def test_cosine_of_reformulated_queries_reads_text_turn_and_history():
    history = tuple(Turn(f"q{i}") for i in range(9))  # the 10th turn
    q = Query("c", "raw c", history).reformulated("ref c", "full_dialog")
    (turn,) = cosine_to_gold_queries(VectorEmbedder(VECTORS), [q], GOLDS)
    assert (turn.cos_gold, turn.cos_raw, turn.n_turns, turn.bucket) == (
        approx(R2), approx(-1.0), 10, ">=10")


def test_cosine_rows_grouped_with_texts_embedded_once():
    vectors = {**VECTORS, "hyde a": (1, 0, 0), "hyde b": (0, 0, 1), "hyde c": (1, 0, 0),
               "hyde d": (1, 0, 0)}
    emb = VectorEmbedder(vectors)
    hyde = {q: f"hyde {q}" for q in "abcd"}
    methods = {"hyde_vanilla": hyde, "full_dialog": REFS, "hyde_document": hyde}
    groups = {"hyde_vanilla": HYDE, "full_dialog": PARAPHRASE, "hyde_document": HYDE}
    rows = cosine_rows(emb, methods, groups, GOLDS, RAWS, LENGTHS)
    assert [(r.group, r.method) for r in rows] == [
        (HYDE, "hyde_vanilla"), (HYDE, "hyde_document"), (PARAPHRASE, "full_dialog")]
    flat = rows[0].flat()
    # every hyde text equals its gold: cos 1, delta 1 - mean raw cos per bucket
    assert (flat["n"], flat["cos"], flat["delta"]) == (4, approx(1.0),
                                                       approx(1 - (0 + R2 - 1 + 0.6) / 4))
    assert (flat["n <5"], flat["delta <5"], flat["delta >=10"]) == (1, approx(1.0), approx(2.0))
    assert rows[2].flat()["cos"] == approx((0.6 + 1 + R2) / 4)
    assert len(emb.calls) == 1 and len(emb.calls[0]) == 16  # 4 golds, 4 raws, 8 texts
    with pytest.raises(ParameterError, match="no group given for method.*'full_dialog'"):
        cosine_rows(emb, methods, {"hyde_vanilla": HYDE, "hyde_document": HYDE}, GOLDS, RAWS,
                    LENGTHS)


def test_cosine_bad_input_names_the_query_and_field():
    emb = VectorEmbedder(VECTORS)
    with pytest.raises(DataError, match=r"field 'gold rewrite'.*query 'd' has no gold"):
        cosine_to_gold(emb, REFS, {k: v for k, v in GOLDS.items() if k != "d"}, RAWS, LENGTHS)
    with pytest.raises(DataError, match=r"query 'a': the reformulation must be a non-empty"):
        cosine_to_gold(emb, {**REFS, "a": " "}, GOLDS, RAWS, LENGTHS)
    with pytest.raises(ParameterError, match="conversation length"):
        cosine_to_gold(emb, REFS, GOLDS, RAWS, {**LENGTHS, "b": 0})


# --------------------------------------------------------------- reranker support score

class PairTable:
    """A cross-encoder returning the score given for each (query, passage); records pairs."""

    name = "fake:pairs"

    def __init__(self, scores: dict[tuple[str, str], float]) -> None:
        self.scores, self.pairs = scores, []

    def predict(self, pairs: list[tuple[str, str]], batch_size: int = 8) -> np.ndarray:
        self.pairs.extend(pairs)
        return np.array([self.scores[p] for p in pairs], dtype=np.float32)


def ranking(qid: str, doc_ids: list[str], text: str = "the reformulation") -> Ranking:
    return Ranking(Query(qid, text), [ScoredDoc(d, 1.0 / (i + 1)) for i, d in enumerate(doc_ids)])


def test_reranker_support_scores_the_top_k_against_the_gold():
    texts = {"d1": "text 1", "d2": "text 2", "d3": "text 3"}
    scorer = PairTable({("gold 1", "text 1"): 0.9, ("gold 1", "text 2"): 0.5,
                        ("gold 2", "text 1"): 0.3})
    rss = reranker_support([ranking("q1", ["d1", "d2", "d3"]), ranking("q2", ["d1"])],
                           {"q1": "gold 1", "q2": "gold 2"}, texts.__getitem__, scorer, k=2)
    # q1: (0.9 + 0.5) / 2; q2 has one document: 0.3 / 2 (the missing one adds 0)
    assert rss.per_query == {"q1": approx(0.7), "q2": approx(0.15)}
    assert (rss.mean, rss.k, rss.short) == (approx(0.425), 2, 1)
    assert sorted(scorer.pairs) == sorted(scorer.scores)  # the gold is scored, never the query
    with pytest.raises(DataError, match="query 'q2' has no gold rewrite"):
        reranker_support([ranking("q2", ["d1"])], {"q1": "gold 1"}, texts.__getitem__, scorer)
    with pytest.raises(ParameterError, match="RSS k"):
        reranker_support([], {}, texts.__getitem__, scorer, k=0)
    assert math.isnan(reranker_support([], {}, texts.__getitem__, scorer).mean)


# --------------------------------------------------------------------- citation score

class CitingLLM(RecordingLLM):
    """Replies by (question, first passage) from ``script``; ``cite_all`` cites every
    passage of every prompt instead."""

    name, model = "fake:citing", "citing"

    def __init__(self, script: dict[tuple[str, str], str] | None = None) -> None:
        super().__init__()
        self.script = script

    def answer(self, messages: list[Message], params: ChatParams) -> LLMReply:
        prompt = messages[-1]["content"]
        numbers = [int(n) for n in re.findall(r"^\[(\d+)\] ", prompt, flags=re.M)]
        if self.script is None:
            text = json.dumps({"answer": "All of them.", "citations": numbers})
        else:
            question = prompt.rsplit("Question: ", 1)[1].strip()
            first = re.search(r"^\[1\] (.*)$", prompt, flags=re.M).group(1)  # type: ignore[union-attr]
            text = self.script[(question, first)]
        return LLMReply(text, 50, 10, raw={"finish_reason": "stop"})


RANKINGS = {"A": [ranking("q1", ["a1", "a2"]), ranking("q2", ["a3"])],
            "B": [ranking("q1", ["b1", "b2"]), ranking("q2", ["b3"])],
            "C": [ranking("q1", ["c1", "c2", "c3"]), ranking("q2", ["c4"])]}
CIT_GOLDS = {"q1": "What is one?", "q2": "What is two?"}
SCRIPT = {("What is one?", "a1"): '{"answer": "One [1][2].", "citations": [1, 2]}',
          ("What is one?", "b1"): '{"answer": "One [1].", "citations": [1, 7]}',
          ("What is one?", "c1"): '{"answer": "One [3].", "citations": [2]}',
          ("What is two?", "a3"): "Two is a number, see passage 1.",
          ("What is two?", "b3"): '{"answer": "No passage answers this question.", '
                                  '"citations": []}',
          ("What is two?", "c4"): '{"answer": "Two.", "citations": [9]}'}


def client(backend: Any) -> LLMClient:
    return LLMClient(backend, cache=None)


def test_cite_answers_counts_distinct_valid_citations_and_fallbacks():
    backend, trace = CitingLLM(SCRIPT), Trace()
    run = cite_answers(client(backend), RANKINGS, CIT_GOLDS, lambda d: d, k=5, trace=trace)
    # A q1 cites 1 and 2; B q1 cites 1 (7 is no passage: dropped, a repair); C q1 lists 2 and
    # marks [3]: 2; A q2 is prose (unparseable: a fallback, 0); B q2 refuses; C q2 cites only
    # the missing 9 (a repair, 0 citations: a refusal)
    assert run.counts() == {"A": {"q1": 2, "q2": 0}, "B": {"q1": 1, "q2": 0},
                            "C": {"q1": 2, "q2": 0}}
    assert run.answers["C"]["q1"] == CitedAnswer("One [3].", (2, 3))
    assert run.answers["A"]["q2"] == CitedAnswer("", (), ok=False)
    assert (run.fallbacks, run.fallback_reasons, run.refusals, run.empty, run.calls) == (
        1, {"unparseable": 1}, 2, 0, 6)
    counters = trace.stages["cite_answer"].counters
    assert (counters["fallbacks"], counters["fallback.unparseable"], counters["repairs"]) == (
        1, 1, 2)
    request = backend.requests[0]
    assert request["json_schema"]["required"] == ["answer", "citations"]
    assert "[1] a1\n[2] a2\n\nQuestion: What is one?" in request["messages"][-1]["content"]
    # the gold query is asked, never the reformulation the rankings were retrieved for
    assert all("the reformulation" not in r["messages"][-1]["content"] for r in backend.requests)


def test_cite_answers_shares_a_call_between_methods_with_the_same_top_k():
    backend = CitingLLM()
    rankings = {"A": RANKINGS["A"], "same_as_A": [ranking("q1", ["a1", "a2", "zz"])],
                "none": [ranking("q1", [])]}
    run = cite_answers(client(backend), rankings, CIT_GOLDS, lambda d: d, k=2,
                       structured=False)
    assert run.counts() == {"A": {"q1": 2, "q2": 1}, "same_as_A": {"q1": 2}, "none": {"q1": 0}}
    assert (run.calls, len(backend.requests), run.empty) == (2, 2, 1)
    assert "json_schema" not in backend.requests[0]


def test_average_citation_score_by_hand():
    acs = average_citation_score({"x": {"q1": 3, "q2": 1}, "y": {"q1": 1, "q2": 1},
                                  "z": {"q1": 2, "q2": 4}})
    # q1: mean 2 -> x +0.5, y -0.5, z 0; q2: mean 2 -> x -0.5, y -0.5, z +1
    assert acs.scores == {"x": approx(0.0), "y": approx(-0.5), "z": approx(0.5)}
    assert (acs.queries, acs.skipped) == (2, ())


def test_average_citation_score_skips_queries_nobody_cites_for():
    acs = average_citation_score({"x": {"q1": 2, "q2": 0}, "y": {"q1": 0, "q2": 0}})
    assert acs.scores == {"x": approx(1.0), "y": approx(-1.0)}
    assert (acs.queries, acs.skipped) == (1, ("q2",))
    nobody = average_citation_score({"x": {"q1": 0}, "y": {"q1": 0}})
    assert math.isnan(nobody.scores["x"]) and nobody.skipped == ("q1",)
    with pytest.raises(ParameterError, match="method 'y' and 'x' cover different queries"):
        average_citation_score({"x": {"q1": 1}, "y": {"q2": 1}})


def test_citation_scores_per_llm_and_averaged():
    trace = Trace()
    report = citation_scores([client(CitingLLM(SCRIPT)), client(CitingLLM())], RANKINGS,
                             CIT_GOLDS, lambda d: d, k=5, trace=trace)
    assert {n: st.counters["llm_calls"] for n, st in trace.stages.items()} == {
        "cite_answer": 6, "cite_answer#2": 6}
    first, second = report.per_llm.values()
    # LLM 1, q1 only (q2: no citations at all): mean 5/3 -> A +0.2, B -0.4, C +0.2
    assert first.scores == {"A": approx(0.2), "B": approx(-0.4), "C": approx(0.2)}
    assert first.skipped == ("q2",)
    # LLM 2 cites everything: q1 2, 2, 3 (mean 7/3) -> -1/7, -1/7, +2/7; q2 1, 1, 1 -> 0
    assert second.scores == {"A": approx(-1 / 14), "B": approx(-1 / 14), "C": approx(1 / 7)}
    assert report.scores == {"A": approx((0.2 - 1 / 14) / 2), "B": approx((-0.4 - 1 / 14) / 2),
                             "C": approx((0.2 + 1 / 7) / 2)}
    assert report.mean_citations == {"A": approx((1 + 1.5) / 2), "B": approx((0.5 + 1.5) / 2),
                                     "C": approx((1 + 2) / 2)}
    assert list(report.per_llm) == ["fake:citing", "fake:citing#2"]
    with pytest.raises(ParameterError, match="at least one LLM"):
        citation_scores([], RANKINGS, CIT_GOLDS, lambda d: d)


def test_format_passages_numbers_and_clips():
    from intentrank.llm.prompts import format_passages

    assert format_passages(["a b c", "d  e\nf"], max_words=2) == "[1] a b\n[2] d e"


# ------------------------------------------------------------------------------ agreement

def test_method_agreement_is_kendalls_tau():
    agreement = method_agreement({"a": 1, "b": 2, "c": 3, "d": 4},
                                 {"a": 0.1, "b": 0.3, "c": 0.2, "d": 0.4})
    # 5 concordant pairs, 1 discordant: tau = 4/6; exact two-sided p = 8/24 (4 of the 24
    # orders of 4 have at most one inversion, 4 at least five)
    assert (agreement.tau, agreement.p_value, agreement.n_methods) == (
        approx(2 / 3), approx(1 / 3), 4)
    with pytest.raises(ParameterError, match="different methods: 'd'"):
        method_agreement({"a": 1, "b": 2, "d": 3}, {"a": 1, "b": 2})
    with pytest.raises(ParameterError, match="at least 2 methods"):
        method_agreement({"a": 1}, {"a": 2})


# ------------------------------------------------------------------------ real data

def cast_2019(data_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Raw utterances and gold rewrites of the CAsT 2019 evaluation turns, by turn id."""
    root = data_dir / "trec-cast" / "2019"
    lines = (root / "evaluation_topics_annotated_resolved_v1.0.tsv").read_text().splitlines()
    gold = dict(line.split("\t", 1) for line in lines)
    topics = json.loads((root / "evaluation_topics_v1.0.json").read_text())
    raw = {f"{t['number']}_{u['number']}": u["raw_utterance"] for t in topics for u in t["turn"]}
    return raw, gold


def scifact_docs(data_dir: Path, ids: set[str]) -> dict[str, str]:
    out = {}
    with gzip.open(data_dir / "scifact" / "corpus.jsonl.gz", "rt") as fh:
        for line in fh:
            doc = json.loads(line)
            if doc["_id"] in ids:
                out[doc["_id"]] = f"{doc['title']} {doc['text']}"
    return out


# cos(raw turn, gold) of CAsT 2019 turns 31_2, 31_4, 31_5, 31_9, measured with the bundled
# all-MiniLM-L6-v2: the packaged int8 ONNX (the fast test) and sentence-transformers at
# precision fp32 (queries through its fp32 export, equal to torch: slow)
MEASURED_RAW_COS = {"onnx": (0.4894, 0.5369, 0.7613, 0.4691),
                    "sentence-transformers": (0.4905, 0.5400, 0.7594, 0.4691)}


@pytest.mark.parametrize("backend", [
    "onnx", pytest.param("sentence-transformers", marks=pytest.mark.slow)])
def test_real_cast_turns_with_minilm(data_dir, backend):
    from intentrank.models.embedder import load_embedder

    fp32 = {"precision": "fp32"} if backend == "sentence-transformers" else {}
    minilm = load_embedder("minilm", backend, **fp32)
    raw, gold = cast_2019(data_dir)
    ids = ["31_2", "31_4", "31_5", "31_9"]  # "Is it treatable?" -> "Is throat cancer ..."
    turns = cosine_to_gold(minilm, {i: gold[i] for i in ids}, gold, raw,
                           {i: int(i.split("_")[1]) for i in ids})
    assert [t.cos_gold for t in turns] == [pytest.approx(1.0, abs=1e-5)] * 4
    assert [t.cos_raw for t in turns] == [pytest.approx(v, abs=2e-3)
                                          for v in MEASURED_RAW_COS[backend]]
    assert all(t.delta > 0.2 for t in turns)
    assert [t.bucket for t in turns] == ["<5", "<5", "5-10", "5-10"]
    # the raw turn as the "reformulation" gains nothing
    same = cosine_to_gold(minilm, {i: raw[i] for i in ids}, gold, raw,
                          {i: int(i.split("_")[1]) for i in ids})
    assert [t.delta for t in same] == [pytest.approx(0.0, abs=1e-6)] * 4


SCIFACT_CLAIM = ("1,000 genomes project enables mapping of genetic sequence variation consisting "
                 "of rare variants with larger penetrance effects than common variants.")
RELEVANT, OTHER, PRION = "14717500", "31715818", "13734012"  # SciFact query 3's doc first


def test_real_reranker_support_on_scifact(data_dir):
    from intentrank.models.cross_encoder import load_cross_encoder

    docs = scifact_docs(data_dir, {RELEVANT, OTHER, PRION})
    ce = load_cross_encoder()
    direct = ce.predict([(SCIFACT_CLAIM, docs[d]) for d in (RELEVANT, OTHER, PRION)])
    # the bundled reranker's sigmoid probabilities, one pair at a time (measured): the judged
    # document 0.939, nanotechnology and stem cells 0.171, prion protein in appendixes 0.846
    assert direct.tolist() == [pytest.approx(v, abs=2e-3) for v in (0.9393, 0.1710, 0.8460)]
    rss = reranker_support([ranking("good", [RELEVANT, OTHER]), ranking("bad", [OTHER, PRION])],
                           {"good": SCIFACT_CLAIM, "bad": SCIFACT_CLAIM}, docs.__getitem__, ce,
                           k=2)
    assert rss.per_query == {"good": approx((direct[0] + direct[1]) / 2),
                             "bad": approx((direct[1] + direct[2]) / 2)}
    assert rss.per_query["good"] > rss.per_query["bad"] and 0 < rss.mean < 1


@pytest.mark.slow
def test_real_embedded_llm_cites_the_relevant_passage(data_dir):
    from intentrank.llm.client import load_llm

    docs = scifact_docs(data_dir, {RELEVANT, OTHER, PRION})
    question = "What does the 1,000 Genomes project enable mapping of?"
    rankings = {"relevant_first": [ranking("3", [RELEVANT, OTHER])],
                "unrelated": [ranking("3", [OTHER, PRION])]}
    trace = Trace()
    run = cite_answers(load_llm("embedded"), rankings, {"3": question}, docs.__getitem__, k=5,
                       trace=trace)
    # measured with qwen2.5-coder-0.5b (structured output): it cites the judged passage when
    # it is given and refuses (cites nothing) on the two unrelated ones
    assert run.counts() == {"relevant_first": {"3": 1}, "unrelated": {"3": 0}}
    assert run.answers["relevant_first"]["3"].cited == (1,)
    assert (run.fallbacks, run.calls) == (0, 2)
    counters = trace.stages["cite_answer"].counters  # made now, or replayed from the cache
    assert counters.get("llm_calls", 0) + counters.get("llm_cache_hits", 0) == 2


def test_read_citations_reads_the_markers_the_answer_stage_reads():
    got = read_citations({"answer": "See [1, 3] and [2-4] and [5].", "citations": []}, 4)
    assert isinstance(got, Repaired) and got.value.cited == (1, 3, 2, 4)
    assert "outside 1..4: [5]" in got.detail
    malformed = read_citations({"answer": "See [1-2-3] and [2].", "citations": [1]}, 4)
    assert isinstance(malformed, Repaired) and malformed.value.cited == (1, 2)
    assert "malformed citation markers: ['[1-2-3]']" in malformed.detail
    assert read_citations({"answer": "Fine [2].", "citations": [1]}, 2) == CitedAnswer(
        "Fine [2].", (1, 2))
