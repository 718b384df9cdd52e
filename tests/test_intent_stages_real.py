"""The LLM-driven stages (follow-ups + FUQ, multi-query, listwise, compression, dynamic
weights) run from YAML configs on the real Cranfield index, with a scripted LLM; the FUQ
tuner never reads test judgments."""

from __future__ import annotations

import json
import textwrap

import pytest
from tolerances import F32_ABS

from intentrank.core.config import resolve_pipeline
from intentrank.errors import ConfigError, DataError
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.pipelines import pipeline_from_config
from intentrank.types import Query


class ScriptedLLM:
    """Answers each prompt kind with a fixed reply (recognised by its opening words)."""

    name = "fake:scripted"

    def __init__(self, **replies: str) -> None:
        self.replies = replies
        self.calls: list[str] = []

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        text = messages[-1]["content"]
        kind = ("followups" if "follow-up questions" in text else
                "listwise" if text.startswith("Rank the") else
                "compress" if text.startswith("Given the question") else
                "variants" if "different versions" in text else
                "weights" if "weights of three search methods" in text else "other")
        self.calls.append(kind)
        reply = self.replies.get(kind, "")
        return LLMReply(reply(text) if callable(reply) else reply)


QUERIES = [Query("1", "what similarity laws must be obeyed when constructing aeroelastic "
                      "models of heated high speed aircraft"),
           Query("2", "what are the structural and aeroelastic problems associated with "
                      "flight of high speed aircraft")]


def _config(tmp_path, body: str):
    path = tmp_path / "pipe.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def _client(**replies: str) -> tuple[ScriptedLLM, LLMClient]:
    fake = ScriptedLLM(**replies)
    return fake, LLMClient(fake, cache=None)


def test_fuq_config_predicts_followups_and_reranks(cranfield_index):
    fake, llm = _client(followups=(
        "Breakdown: aeroelastic models.\nMissing perspectives: heating.\nFollow-up questions:\n"
        "1. How does aerodynamic heating change aeroelastic similarity?\n"
        "2. How does aerodynamic heating change aeroelastic similarity?\n"  # duplicate
        "3. Which materials keep stiffness at high temperature?"))
    pipe = pipeline_from_config(resolve_pipeline("fuq"), index=cranfield_index, llm=llm)
    res = pipe.run(QUERIES)
    r = res.rankings[0]
    assert r.query.derived_of("followup") == [
        "How does aerodynamic heating change aeroelastic similarity?",
        "Which materials keep stiffness at high temperature?"]
    assert len(r.docs) == 100 and {"dense", "fuq", "fuq.cos", "fuq.followups",
                                   "fuq.distance"} <= set(r.docs[0].stage_scores)
    scores = [d.score for d in r.docs]
    assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(1.0, abs=F32_ABS)
    assert res.trace.stage("followups").counters["followups"] == 4
    assert fake.calls.count("followups") == 2


def test_fuq_followup_fallback_is_counted(cranfield_index):
    _, llm = _client(followups="I cannot help with that.")
    pipe = pipeline_from_config(resolve_pipeline("fuq"), index=cranfield_index, llm=llm)
    res = pipe.run(QUERIES[:1])
    assert res.trace.stage("followups").counters["fallbacks"] == 1
    assert res.rankings[0].query.derived_of("followup") == []
    assert res.rankings[0].docs  # the query stands in for its follow-ups


def test_saved_fuq_params_are_used(cranfield_index, tmp_path, monkeypatch):
    from intentrank.core.saved_params import save_params
    from intentrank.tune.grid import TuneResult

    monkeypatch.setenv("INTENTRANK_CACHE", str(tmp_path))
    save_params("fuq-test", TuneResult("nDCG@3", {"alpha": 0.0, "beta": 1.0, "gamma": 0.0},
                                       0.5, 3))
    _, llm = _client(followups="Follow-up questions:\n1. What is flutter of a wing panel?")
    cfg = _config(tmp_path, """
        pipeline:
          - dense: {depth: 50}
          - followups: {m: 1}
          - fuq: {params: fuq-test, top_k: 50}
    """)
    r = pipeline_from_config(cfg, index=cranfield_index, llm=llm).run(QUERIES[:1]).rankings[0]
    fup = [d.stage_scores["fuq.followups"] for d in r.docs]
    assert fup == sorted(fup, reverse=True)  # beta only: ordered by follow-up similarity
    with pytest.raises(ConfigError, match="no saved parameter set 'nope'"):
        pipeline_from_config(_config(tmp_path, "pipeline: [dense, {fuq: {params: nope}}]"),
                             index=cranfield_index, llm=llm)


def test_multi_query_listwise_compression_from_config(cranfield_index, tmp_path):
    fake, llm = _client(
        variants="1. heated aircraft model similarity\n2. aeroelastic scaling laws\n3. ",
        listwise="The second is best. [2, 1, 9, 2]",  # out of range and repeated: repaired
        compress=lambda text: "NO_OUTPUT" if "flutter" not in text.lower() else "flutter.")
    cfg = _config(tmp_path, """
        pipeline:
          - multi_query: {retriever: {bm25: {depth: 20}}, n: 3}
          - cutoff: 10
          - listwise: {top_k: 5}
          - compression: {top_k: 5}
    """)
    res = pipeline_from_config(cfg, index=cranfield_index, llm=llm).run(QUERIES[:1])
    r = res.rankings[0]
    assert r.query.derived_of("variant") == ["heated aircraft model similarity",
                                             "aeroelastic scaling laws"]
    c = {s: st.counters for s, st in res.trace.stages.items()}
    assert c["listwise"]["repairs"] == 1
    assert c["compression"]["dropped"] + len(r.docs) == 5
    assert all("flutter" in cranfield_index.doc_text(d).lower() for d in r.doc_ids)
    assert fake.calls.count("compress") == 5


def test_listwise_repair_keeps_every_candidate_once(cranfield_index, tmp_path):
    _, llm = _client(listwise="[3, 3, 1]")
    cfg = _config(tmp_path, "pipeline: [{bm25: {depth: 10}}, {listwise: {top_k: 5}}]")
    r = pipeline_from_config(cfg, index=cranfield_index, llm=llm).run(QUERIES[:1]).rankings[0]
    assert len(r.doc_ids) == 10 and len(set(r.doc_ids)) == 10
    assert r.docs[0].stage_scores["listwise"] > r.docs[1].stage_scores["listwise"]


@pytest.mark.parametrize("reply, reason", [
    ("weights: dense high", "malformed"),
    (json.dumps({"dense": 1.4, "sparse": -0.2, "graph": -0.2}), "out of range"),
    (json.dumps({"dense": 0.5, "sparse": 0.5, "graph": 0.5}), "not normalised"),
])
def test_dynamic_weights_fall_back_on_bad_replies(cranfield_index, tmp_path, reply, reason):
    _, llm = _client(weights=reply)
    res = _run_dynamic(cranfield_index, tmp_path, llm)
    st = res.trace.stage("dynamic")
    assert st.counters["fallbacks"] == 2, reason
    events = [e.details for e in res.trace.events if e.kind == "weights"]
    assert {e["source"] for e in events} == {"rule"} and len(events) == 2


def test_dynamic_weights_use_a_valid_reply(cranfield_index, tmp_path):
    _, llm = _client(weights='{"dense": 0.2, "sparse": 0.7, "graph": 0.1}')
    res = _run_dynamic(cranfield_index, tmp_path, llm)
    events = [e.details for e in res.trace.events if e.kind == "weights"]
    assert [e["source"] for e in events] == ["llm", "llm"]
    assert res.trace.stage("dynamic").counters.get("fallbacks", 0) == 0


def _run_dynamic(index, tmp_path, llm):
    cfg = _config(tmp_path, """
        pipeline:
          - fuse:
              method: dynamic
              inputs: [{dense: {depth: 20}}, {sparse: {depth: 20}}, {graph: {depth: 20}}]
    """)
    return pipeline_from_config(cfg, index=index, llm=llm).run(QUERIES)


def test_tuner_refuses_test_and_reads_only_train(cranfield_index, monkeypatch):
    from intentrank.tune.fuq import tune_fuq_on_split

    class Spy:
        def __init__(self) -> None:
            self.splits: list[str] = []

        def sample(self, split, n, seed):
            self.splits.append(split)
            return QUERIES, {"1": {"12": 2}, "2": {"12": 1}}

    spy = Spy()
    _, llm = _client(followups="Follow-up questions:\n1. What is aeroelastic divergence?")
    with pytest.raises(DataError, match="on the test split"):
        tune_fuq_on_split(spy, cranfield_index, llm, split="test")
    res = tune_fuq_on_split(spy, cranfield_index, llm, split="train",
                            grid={"alpha": (0.5, 1.0), "beta": (0.0, 0.5), "gamma": (0.0,)})
    assert spy.splits == ["train"] and res.n_queries == 2
    assert set(res.best) == {"alpha", "beta", "gamma"} and len(res.table) == 4
