"""Answers whose abstention is a decision (the cross-encoder's relevance gate) and whose
citations are attributed after the LLM writes (post-hoc): unit tests with a word-overlap
scorer, then the bundled cross-encoder on real Cranfield passages and the embedded LLM on a
real SciFact question."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import RecordingLLM

from intentrank.answer.attribution import (
    SentenceSimilarity,
    attribute,
    best_snippet,
    most_relevant,
    relevant_enough,
    split_sentences,
    strip_markers,
)
from intentrank.answer.citations import ABSTENTION, is_abstention
from intentrank.answer.generate import AnswerGenerator
from intentrank.core.params import ParameterError
from intentrank.llm.base import LLMReply
from intentrank.llm.client import LLMClient
from intentrank.types import Query, Ranking, ScoredDoc, Trace

PASSAGES = {"a": "Cold exposure recruits brown fat. Mice were kept at 4 C for a week.",
            "b": "Exercise raises heart rate. Training lowers resting pulse.",
            "c": "Sweep lowers the lift slope of a wing."}


class Overlap:
    """A scorer stand-in: the share of the first text's words found in the second."""

    name = "overlap"

    def predict(self, pairs, batch_size: int = 8) -> np.ndarray:
        def score(a: str, b: str) -> float:
            words = set(a.lower().replace(".", "").split())
            return len(words & set(b.lower().replace(".", "").split())) / max(len(words), 1)

        return np.array([score(a, b) for a, b in pairs], dtype=np.float32)


class Words:
    """An embedder stand-in: bag-of-words vectors (a word, a hashed dimension), so the cosine
    is word overlap; counts its calls."""

    name = "words"

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def _vec(self, texts) -> np.ndarray:
        self.encoded += list(texts)
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace(".", " ").replace("?", " ").split():
                out[i, sum(map(ord, w)) % 64] += 1
        return out

    encode_queries = encode_passages = _vec


class Docs:
    def doc_text(self, doc_id: str) -> str:
        return PASSAGES[doc_id]


class Replying(RecordingLLM):
    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply = reply

    def answer(self, messages, params) -> LLMReply:
        return LLMReply(self.reply)


def _ranking(text: str, ids: list[str]) -> Ranking:
    return Ranking(Query("q", text), [ScoredDoc(d, 1.0) for d in ids])


def test_sentences_markers_and_snippets():
    assert split_sentences("Yes. Cold exposure recruits brown fat [1]. It takes a week.") == [
        "Yes. Cold exposure recruits brown fat [1].", "It takes a week."]
    assert strip_markers("Brown fat [1, 2] rises [3-4] and [2].") == "Brown fat rises and."
    assert best_snippet("kept at 4 C", PASSAGES["a"]) == "Mice were kept at 4 C for a week."


def test_each_sentence_is_cited_by_the_passage_that_supports_it():
    texts = [PASSAGES["b"], PASSAGES["a"]]
    done = attribute("Cold exposure recruits brown fat [2]. Training lowers resting pulse [9]. "
                     "Nobody knows why the sky is green.", texts, Overlap(), threshold=0.5)
    assert done.text == ("Cold exposure recruits brown fat [2]. Training lowers resting pulse "
                         "[1]. Nobody knows why the sky is green.")
    assert done.citations == (2, 1) and done.unsupported == 1
    assert [e.n for e in done.evidence] == [2, 1, None]
    assert done.evidence[0].snippet == "Cold exposure recruits brown fat."


def test_a_sentence_may_cite_every_passage_that_supports_it():
    texts = [PASSAGES["a"], PASSAGES["b"], "Cold exposure recruits brown fat in mice."]
    done = attribute("Cold exposure recruits brown fat.", texts, Overlap(), threshold=0.5,
                     max_citations=2)
    assert done.text == "Cold exposure recruits brown fat [1][3]."
    assert done.citations == (1, 3) and done.sentences == 1 and done.unsupported == 0
    assert [e.n for e in done.evidence] == [1, 3]


def test_relevance_gate():
    assert relevant_enough("cold exposure brown fat", list(PASSAGES.values()), Overlap(),
                           0.5)[0]
    ok, best = relevant_enough("quantum chromodynamics", list(PASSAGES.values()), Overlap(),
                               0.5)
    assert not ok and best == 0.0
    assert relevant_enough("anything", [], Overlap(), 0.1) == (False, 0.0)


def test_the_gate_abstains_without_a_call_and_posthoc_cites_the_supporting_passage():
    llm = Replying("Cold exposure recruits brown fat [3]. The documents do not say more.")
    stage = AnswerGenerator(LLMClient(llm, cache=None), Docs(), top_k=3, scorer=Overlap(),
                            abstain="relevance", cite="posthoc", abstain_threshold=0.5,
                            support_threshold=0.6, max_citations=1)
    trace = Trace()
    out = stage([_ranking("does cold exposure recruit brown fat", ["b", "a", "c"]),
                 _ranking("quantum chromodynamics of quarks", ["b", "c"])], trace)
    answered, gated = (r.query.answer for r in out)
    assert answered.text == "Cold exposure recruits brown fat [2]. The documents do not say more."
    assert answered.cited_ids == ["a"] and answered.fallback == ""
    assert [e.n for e in answered.evidence] == [2, None]
    assert gated.text == ABSTENTION and is_abstention(gated.text) and not gated.citations
    assert len(llm.requests) == 1  # the gated question cost no call
    prompt = llm.requests[0]["messages"][-1]["content"]
    assert "do not answer" not in prompt and "cite" not in prompt  # nothing to imitate
    c = trace.stage("answer").counters
    assert c["gated"] == 1 and c["abstentions"] == 1 and c["unsupported"] == 1
    assert "cite=posthoc" in stage.describe() and "abstain=relevance" in stage.describe()


def test_the_papers_modes_stay_available():
    llm = Replying("The documents do not answer this question.")
    stage = AnswerGenerator(LLMClient(llm, cache=None), Docs(), top_k=2, abstain="llm",
                            cite="llm")
    (out,) = stage([_ranking("anything", ["a", "b"])], Trace())
    assert is_abstention(out.query.answer.text) and stage.scorer is None
    assert "reply exactly" in llm.requests[0]["messages"][-1]["content"]


def test_sentence_similarity_matches_the_closest_sentence_of_a_passage():
    """A statement found late in a passage scores as if the passage said only that; each
    distinct text is encoded once."""
    emb = Words()
    late = "Exercise raises heart rate. Mice were kept at 4 C. Cold exposure recruits brown fat."
    scores = SentenceSimilarity(emb).predict([("cold exposure recruits brown fat", late),
                                              ("cold exposure recruits brown fat", PASSAGES["b"]),
                                              ("exercise raises heart rate", late)])
    assert scores[0] == pytest.approx(1.0) and scores[2] == pytest.approx(1.0)
    assert scores[1] < 0.5
    assert len(emb.encoded) == len(set(emb.encoded)) == 6  # a shared sentence encoded once
    assert set(emb.encoded) == {"cold exposure recruits brown fat", "exercise raises heart rate",
                                *split_sentences(late), *split_sentences(PASSAGES["b"])}
    assert SentenceSimilarity(emb).predict([]).shape == (0,)


def test_sentence_similarity_keeps_passage_sentence_vectors():
    """The gate and the citations of one answer score the same passages: their sentences
    are encoded once, with the same scores; at most ``memory`` sentences are kept."""
    emb = Words()
    sim = SentenceSimilarity(emb)
    pairs = [("cold exposure", PASSAGES["a"]), ("cold exposure", PASSAGES["b"])]
    first = sim.predict(pairs)
    sentences = [*split_sentences(PASSAGES["a"]), *split_sentences(PASSAGES["b"])]
    assert sorted(emb.encoded) == sorted(["cold exposure", *sentences])
    emb.encoded.clear()
    again = sim.predict([("Yes, it does.", p) for _, p in pairs] + pairs)
    assert emb.encoded == ["Yes, it does.", "cold exposure"]  # no passage sentence again
    assert np.array_equal(again[2:], first)
    small = SentenceSimilarity(emb, memory=1)
    small.predict(pairs)
    assert len(small._vectors) == 1
    emb.encoded.clear()
    assert np.array_equal(small.predict(pairs), first)  # evicted sentences encoded again
    assert set(sentences[:-1]) <= set(emb.encoded) and sentences[-1] not in emb.encoded


def test_context_margin_and_anchor():
    """A bare "Yes." is attributed by the question it answers; the margin keeps only
    passages close to the best; the anchor (the passage most relevant to the question) is
    cited by the first sentence after its own citations."""
    texts = [PASSAGES["b"], PASSAGES["a"], "Brown fat burns energy. Cold exposure recruits it."]
    sim = SentenceSimilarity(Words())
    bare = attribute("Yes.", texts, sim, threshold=0.5)
    assert bare.citations == () and bare.unsupported == 1
    done = attribute("Yes.", texts, sim, threshold=0.5, max_citations=3,
                     context="Does cold exposure recruit brown fat?")
    assert done.citations[0] == 2 and 1 not in done.citations
    tight = attribute("Yes.", texts, sim, threshold=0.2, max_citations=3,
                      context="Does cold exposure recruit brown fat?", margin=0.01)
    assert tight.citations == (2,) and tight.text == "Yes [2]."
    anchored = attribute("Yes. Cold exposure recruits brown fat.", texts, sim, threshold=0.2,
                         max_citations=1, margin=0.01, anchor=0)
    assert anchored.text.startswith("Yes. Cold exposure recruits brown fat [2][1].")
    assert [e.n for e in anchored.evidence] == [2, 1]
    assert most_relevant("heart rate training", texts, Overlap()) == 0
    assert most_relevant("anything", [], Overlap()) is None


def test_the_similarity_gate_and_context_citations_in_the_stage():
    """``abstain: similarity`` gates by the embedder (no call for the unrelated question);
    ``cite: context`` cites by the embedder in the question's context plus the
    cross-encoder's most relevant passage."""
    llm = Replying("Yes, it does.")
    emb = Words()
    stage = AnswerGenerator(LLMClient(llm, cache=None), Docs(), top_k=3, scorer=Overlap(),
                            embedder=emb, abstain="similarity", cite="context")
    assert stage.abstain_threshold == 0.45 and stage.support_threshold == 0.45
    trace = Trace()
    out = stage([_ranking("Does cold exposure recruit brown fat?", ["b", "a", "c"]),
                 _ranking("quantum chromodynamics of quarks", ["b", "c"])], trace)
    answered, gated = (r.query.answer for r in out)
    assert answered.cited_ids == ["a"] and answered.text == "Yes, it does [2]."
    assert gated.text == ABSTENTION and len(llm.requests) == 1
    assert "cite=context" in stage.describe() and "cite_margin=0.05" in stage.describe()
    assert "embedder=words" in stage.describe()
    assert trace.stage("answer").counters["gated"] == 1


@pytest.mark.parametrize(("params", "message"), [
    ({"abstain": "never"}, "abstain"), ({"cite": "model"}, "cite"),
    ({"cite_margin": -0.1}, "cite_margin"),
    ({"abstain_threshold": 1.5}, "abstain_threshold"),
    ({"support_threshold": -1}, "support_threshold"), ({"max_citations": 0}, "max_citations")])
def test_bad_answer_options_are_refused(params, message):
    with pytest.raises(ParameterError, match=message):
        AnswerGenerator(LLMClient(Replying(""), cache=None), Docs(), scorer=Overlap(),
                        embedder=Words(), **params)


def test_posthoc_citations_with_the_bundled_cross_encoder_on_real_cranfield(cranfield_index):
    """Real passages, the real bundled cross-encoder: a sentence copied from the third
    passage cites [3] first, whatever number the LLM wrote."""
    ids = ["1", "12", "184"]
    texts = [cranfield_index.doc_text(d) for d in ids]
    copied = split_sentences(texts[2])[0]
    llm = Replying(f"{copied} [1]")
    stage = AnswerGenerator(LLMClient(llm, cache=None), cranfield_index, top_k=3,
                            abstain="llm", cite="posthoc")
    (out,) = stage([_ranking("what is known about this", ids)], Trace())
    assert out.query.answer.citations[0] == 3, out.query.answer  # the best support first
    assert out.query.answer.evidence[0].snippet == copied


@pytest.mark.slow
def test_the_embedded_model_answers_and_cites_the_evidence_on_real_scifact(scifact_bm25):
    """The issue's example: the passages BM25 gives for "Does cold exposure increase brown
    adipose tissue recruitment?" hold the evidence (SciFact judges 970012); the default
    answer stage answers (no abstention) and cites passages that say it: 970012, or
    29381091 (white fat acquiring a brown phenotype by cold exposure, the cross-encoder's
    and the embedder's best) or 4319174 (cold induces thermogenic genes in brown fat), which
    the default ``cite: context`` prefers to 970012 (a plaque-growth abstract)."""
    from intentrank.pipelines import build_context, build_pipeline

    question = "Does cold exposure increase brown adipose tissue recruitment?"
    pipe = build_pipeline([{"bm25": {"depth": 5}}, {"answer": {"top_k": 5}}],
                          build_context(scifact_bm25, llm="llamacpp:qwen2.5-coder-0.5b"))
    result = pipe.run([Query("q", question)])
    answer = result.rankings[0].query.answer
    assert "970012" in result.rankings[0].doc_ids
    assert not is_abstention(answer.text), answer
    assert answer.cited_ids, answer
    assert set(answer.cited_ids) <= {"970012", "29381091", "4319174"}, answer


@pytest.mark.parametrize(("option", "message"), [
    (["--abstain", "never"], "unknown abstain 'never'; use similarity, relevance, llm"),
    (["--cite", "model"], "unknown cite 'model'; use context, posthoc, llm")])
def test_cli_refuses_bad_answer_options_before_any_work(tmp_path, option, message):
    from fakes import write_collection
    from typer.testing import CliRunner

    from intentrank.cli import app
    from intentrank.data.dataset import load_dataset
    from intentrank.index import IndexSettings, build_index

    root = write_collection(tmp_path / "c", {"a": "wing flutter", "b": "heat transfer"},
                            {"q": "flutter"}, [("q", "a", 1)])
    index = build_index(load_dataset(root).corpus(), tmp_path / "idx",
                        IndexSettings(legs=("bm25",)))
    res = CliRunner().invoke(app, ["--llm", "openai:m@http://127.0.0.1:9/v1", "answer",
                                   str(index.path), "flutter", "-p", "bm25", *option])
    assert res.exit_code == 2 and message in res.output, res.output


def test_the_answer_stage_shares_the_loaded_cross_encoder(tmp_path, monkeypatch):
    """One copy of the bundled model per config: the answer stage's gate and citations use
    the scorer the config's cross_encoder step loaded (with the loader that loads anew each
    call, not the test session's shared one)."""
    from fakes import write_collection
    from model_loads import ORIGINALS

    from intentrank.data.dataset import load_dataset
    from intentrank.index import IndexSettings, build_index
    from intentrank.pipelines import build_context, build_pipeline
    from intentrank.rerank import cross_encoder

    root = write_collection(tmp_path / "c", {"a": "wing flutter", "b": "heat transfer"},
                            {"q": "flutter"}, [("q", "a", 1)])
    index = build_index(load_dataset(root).corpus(), tmp_path / "idx",
                        IndexSettings(legs=("bm25",)))
    monkeypatch.setattr(cross_encoder, "load_cross_encoder", ORIGINALS["load_cross_encoder"])
    pipe = build_pipeline(["bm25", {"cross_encoder": {"top_k": 5, "backend": "onnx",
                                                      "max_length": 128}}, "answer"],
                          build_context(index, llm="openai:m@http://127.0.0.1:9/v1"))
    ce, answer = pipe.stages[1], pipe.stages[2]
    assert answer.scorer is ce.scorer


# Real SciFact claims (test split, bench_answers.py's seed-0 sample) with the passages the
# `answer` pipeline gives them and a reply the embedded 0.5B wrote for each: the gold passage
# is [2] for the first (the cross-encoder ranks it below [1]); the other two replies say only
# "No." / "Yes, it is true.".
REAL_SCIFACT = [
    ("Is it true that the myocardial lineage develops from cardiac progenitors of mesodermal "
     "origin?", ["12411274", "4427392", "3619372", "9122283", "2828460"], "4427392",
     "The myocardial lineage develops from cardiac progenitors of mesodermal origin."),
    ("Is it true that ubiquitin ligase UBC13 generates a K63-linked polyubiquitin moiety at "
     "PCNA K164?", ["20231138", "6422576", "1635872", "33068577", "13277623"], "20231138",
     "The answer is: No."),
    ("Is it true that increased microtubule acetylation repairs LRRK2 Roc-COR domain mutation "
     "induced locomotor deficits?", ["9638032", "1371440", "5108807", "1964163", "36830715"],
     "9638032", "Yes, it is true."),
]


@pytest.mark.slow
@pytest.mark.parametrize(("question", "ids", "gold", "reply"), REAL_SCIFACT)
def test_context_citations_with_the_real_models_on_real_scifact(scifact_bm25, question, ids,
                                                                gold, reply):
    """The default stage (``abstain: similarity``, ``cite: context``) with the real
    embedder and cross-encoder: it answers each and cites the gold passage first, among
    at most three; given another claim's passages, it abstains without a call."""
    llm = Replying(reply)
    stage = AnswerGenerator(LLMClient(llm, cache=None), scifact_bm25, top_k=5)
    (out,) = stage([_ranking(question, ids)], Trace())
    answer = out.query.answer
    assert answer.cited_ids[0] == gold and len(answer.cited_ids) <= 3, answer
    other = next(i for q, i, _, _ in REAL_SCIFACT if q != question)
    (off,) = stage([_ranking(question, other)], Trace())
    assert is_abstention(off.query.answer.text) and len(llm.requests) == 1, off.query.answer
