"""Knowledge-aware reranking (knowledge elements, per-element rerank) and grounded answers
with citations: parsing, fallbacks and bad input with scripted LLMs, then the shipped
``knowledge`` config on the real Cranfield index."""

from __future__ import annotations

import json

import pytest
from fakes import FakeClock, Fixed

from intentrank.answer.citations import check_citations, is_abstention
from intentrank.answer.generate import AnswerGenerator, make_answer
from intentrank.core.config import resolve_pipeline
from intentrank.core.params import ParameterError
from intentrank.core.stage import Stage
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.llm.client import LLMClient
from intentrank.pipelines import pipeline_from_config
from intentrank.query.knowledge import (
    KnowledgeElements,
    element_support,
    knowledge_of,
    parse_declaration,
    parse_parts,
    parse_summary,
    top_supported,
)
from intentrank.rerank.per_element import PerElementRerank
from intentrank.types import Query, Ranking, ScoredDoc, Trace


class Docs:
    """An index stand-in: document texts by id."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts

    def doc_text(self, doc_id: str) -> str:
        return self.texts[doc_id]


class ByPrompt:
    """Replies by what the prompt asks (declaration, summary, answer)."""

    name = "fake:knowledge"

    def __init__(self, declare=None, summary: str = "", answer: str = "", parts=None) -> None:
        self.declare, self.summary, self.answer, self.parts = declare, summary, answer, parts
        self.prompts: list[str] = []

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        text = messages[-1]["content"]
        self.prompts.append(text)
        if "How many separate things" in text:
            return LLMReply(self.parts(text))
        if "Pick the two most important" in text:
            return LLMReply(self.summary)
        if "knowledge elements needed" in text:
            return LLMReply(self.declare(text) if callable(self.declare) else self.declare)
        return LLMReply(self.answer(text) if callable(self.answer) else self.answer)


def ranking(qid: str, text: str, ids: list[str]) -> Ranking:
    return Ranking(Query(qid, text), [ScoredDoc(d, float(len(ids) - i)) for i, d in
                                      enumerate(ids)])


def test_declaration_keeps_provided_numbers_inside_the_list():
    d = parse_declaration('{"needed": ["boundary layer", "Boundary layer!", "shock"], '
                          '"provided": [2, 5, 0, 2, true]}')
    assert d.needed == ("boundary layer", "shock")  # duplicates (case, punctuation) dropped
    assert d.provided == (2,) and d.violations == (5, 0, True)
    assert parse_declaration('{"needed": ["a b c"]}').provided == ()  # question-only prompt
    for bad in ('{"needed": []}', '{"needed": ["  "]}', "no json", '{"needed": "x"}'):
        with pytest.raises(ValueError):
            parse_declaration(bad)


def test_support_counts_documents_and_the_fallback_keeps_the_best_supported():
    decls = [parse_declaration('{"needed": ["lift", "drag"], "provided": [2]}'),
             parse_declaration('{"needed": ["Drag", "heat"], "provided": [1, 2]}')]
    support = element_support(decls)
    assert support == {"lift": 0, "drag": 2, "heat": 1}
    assert top_supported(support) == ["drag", "heat"]
    assert parse_summary('{"elements": ["x y", "z w"]}') == ["x y", "z w"]
    for bad in ('{"elements": ["only one"]}', '{"elements": ["same", "SAME"]}', "[]"):
        with pytest.raises(ValueError):
            parse_summary(bad)


def test_knowledge_stage_declares_per_document_and_summarises():
    def declare(prompt: str) -> str:
        if "doc-b" in prompt:
            return '{"needed": ["lift", "drag", "heat"], "provided": [3, 9]}'
        return '{"needed": ["lift", "drag"], "provided": [1]}'

    fake = ByPrompt(declare, summary='{"elements": ["lift at speed", "heat load"]}')
    stage = KnowledgeElements(LLMClient(fake, cache=None),
                              Docs({"a": "doc-a text", "b": "doc-b text", "c": "doc-c"}),
                              n_know=2)
    trace = Trace()
    out = stage([ranking("1", "wing?", ["a", "b", "c"])], trace)
    assert knowledge_of(out[0]) == ["lift at speed", "heat load"]
    assert out[0].doc_ids == ["a", "b", "c"]  # the ranking is not changed
    counters = trace.stage("knowledge").counters
    assert counters["declarations"] == 2 and counters["subset_violations"] == 1
    assert sum("Document: doc-c" in p for p in fake.prompts) == 0  # only the top n_know
    # an unreadable summary keeps the two best-supported elements, counted
    fake2 = ByPrompt(declare, summary="lift and heat")
    trace2 = Trace()
    out2 = KnowledgeElements(LLMClient(fake2, cache=None), Docs({"a": "doc-a", "b": "doc-b"}),
                             n_know=2)([ranking("1", "wing?", ["a", "b"])], trace2)
    assert knowledge_of(out2[0]) == ["lift", "heat"]
    assert trace2.stage("knowledge").counters["summary_fallbacks"] == 1


def test_knowledge_without_documents_and_with_nothing_declared():
    fake = ByPrompt('{"needed": ["alpha part", "beta part"]}')
    trace = Trace()
    out = KnowledgeElements(LLMClient(fake, cache=None), None, n_know=0)(
        [ranking("1", "q", [])], trace)
    assert knowledge_of(out[0]) == ["alpha part", "beta part"]  # two: no summary call
    assert len(fake.prompts) == 1 and "Document:" not in fake.prompts[0]
    bad = ByPrompt("I don't know")
    trace = Trace()
    out = KnowledgeElements(LLMClient(bad, cache=None), Docs({"a": "x"}), n_know=3)(
        [ranking("1", "q", ["a"]), ranking("2", "q2", [])], trace)
    assert [knowledge_of(r) for r in out] == [[], []]
    assert trace.stage("knowledge").counters["no_elements"] == 2
    assert trace.stage("knowledge").counters["fallbacks"] == 1
    with pytest.raises(ParameterError, match="needs an index"):
        KnowledgeElements(LLMClient(bad, cache=None), None, n_know=2)
    with pytest.raises(ParameterError, match="n_know"):
        KnowledgeElements(LLMClient(bad, cache=None), None, n_know=-1)


def test_knowledge_elements_as_self_contained_sub_questions():
    asks = "complete, self-contained question"
    fake = ByPrompt('{"needed": ["Does heat flux rise at the wall?", "Does drag rise?", '
                    '"Does lift fall?"], "provided": [1]}',
                    summary='{"elements": ["Does heat flux rise at the wall?", '
                            '"Does drag rise with sweep?"]}')
    stage = KnowledgeElements(LLMClient(fake, cache=None), Docs({"a": "doc-a"}), n_know=1,
                              form="questions")
    out = stage([ranking("1", "wing heat and drag?", ["a"])], Trace())
    assert knowledge_of(out[0]) == ["Does heat flux rise at the wall?",
                                    "Does drag rise with sweep?"]
    assert len(fake.prompts) == 2 and all(asks in p for p in fake.prompts)
    assert "Document: doc-a" in fake.prompts[0]
    assert "form=questions" in stage.describe()
    # from the question alone; the paper's phrases prompt does not ask for questions
    alone = ByPrompt('{"needed": ["Does heat flux rise?", "Does drag rise?"]}')
    KnowledgeElements(LLMClient(alone, cache=None), None, n_know=0, form="questions")(
        [ranking("1", "q", [])], Trace())
    assert asks in alone.prompts[0] and "Document:" not in alone.prompts[0]
    phrases = KnowledgeElements(LLMClient(alone, cache=None), None, n_know=0)
    assert "form" not in phrases.describe()
    phrases([ranking("2", "q2", [])], Trace())
    assert asks not in alone.prompts[-1] and "short phrase" in alone.prompts[-1]
    with pytest.raises(ParameterError, match="unknown form 'keywords'"):
        KnowledgeElements(LLMClient(alone, cache=None), None, n_know=0, form="keywords")
    with pytest.raises(ParameterError, match="structured must be true or false, got 'no'"):
        KnowledgeElements(LLMClient(alone, cache=None), None, n_know=0, structured="no")


def test_split_auto_declares_only_for_questions_of_several_parts():
    """``split: auto``: a question the LLM finds one part in gets no elements and no
    declaration call; an unreadable parts answer counts as several parts (a fallback)."""
    def parts(prompt: str) -> str:
        return ('{"parts": 1}' if "Question: one claim" in prompt else
                "several, I think" if "Question: unclear" in prompt else '{"parts": 2}')

    fake = ByPrompt('{"needed": ["Does A hold?", "Does B hold?"]}', parts=parts)
    stage = KnowledgeElements(LLMClient(fake, cache=None), None, n_know=0, form="questions",
                              split="auto")
    trace = Trace()
    out = stage([ranking("1", "one claim", ["a", "b"]), ranking("2", "A? And B?", ["a"]),
                 ranking("3", "unclear", ["a"])], trace)
    assert [knowledge_of(r) for r in out] == [[], ["Does A hold?", "Does B hold?"],
                                              ["Does A hold?", "Does B hold?"]]
    counters = trace.stage("knowledge").counters
    assert counters["single_part"] == 1 and counters["fallbacks"] == 1
    assert "no_elements" not in counters and counters["declarations"] == 2
    declared = [p for p in fake.prompts if "knowledge elements needed" in p]
    assert len(declared) == 2 and not any("one claim" in p for p in declared)
    assert "split=auto" in stage.describe()
    # per_element keeps a one-part question's ranking as it came
    kept = PerElementRerank(WordOverlap({"a": "one", "b": "claim one"}), against="element",
                            with_question=True)([out[0]], Trace())
    assert kept[0].doc_ids == out[0].doc_ids == ["a", "b"]
    assert parse_parts('{"parts": 3}') == 3
    for bad in ('{"parts": 0}', '{"parts": true}', '{"parts": "2"}', '{"n": 2}'):
        with pytest.raises(ValueError, match="parts must be a whole number"):
            parse_parts(bad)
    with pytest.raises(ParameterError, match="unknown split 'sometimes'; use always, auto"):
        KnowledgeElements(LLMClient(fake, cache=None), None, n_know=0, split="sometimes")
    assert "split" not in KnowledgeElements(LLMClient(fake, cache=None), None,
                                            n_know=0).describe()


class WordOverlap(Stage):
    """A fake reranker: score = words the query shares with the document text."""

    name = "overlap"

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        out = []
        for r in rankings:
            words = set(r.query.text.split())
            scores = {d.doc_id: len(words & set(self.texts[d.doc_id].split())) + 1e-3 * d.score
                      for d in r.docs}
            out.append(Ranking.from_scores(r.query, scores, trace.path_of(self), r))
        return out


def test_per_element_interleaves_one_list_per_element():
    texts = {"a": "lift", "b": "heat", "c": "lift drag", "d": "heat hot", "e": "none"}
    query = Query("1", "wing").with_derived("knowledge", ["lift drag", "heat hot"], "k")
    start = Ranking(query, [ScoredDoc(d, 5.0 - i) for i, d in enumerate("abcde")])
    trace = Trace()
    out = PerElementRerank(WordOverlap(texts), top_k=4)([start], trace)[0]
    # element 0 orders c, a, ...; element 1 orders d, b, ...; interleaved; e stays below
    assert out.doc_ids == ["c", "d", "a", "b", "e"]
    assert out.docs[0].stage_scores["per_element.element0"] == pytest.approx(2 + 3e-3)
    assert out.docs[0].score == 1.0 and out.docs[1].score == 0.5
    assert trace.stage("per_element").counters["element_queries"] == 2
    plain = Ranking(Query("2", "wing"), [ScoredDoc("e", 1.0), ScoredDoc("a", 0.5)])
    trace = Trace()
    assert PerElementRerank(WordOverlap(texts))([plain], trace)[0].doc_ids == ["e", "a"]
    assert trace.stage("per_element").counters["no_elements"] == 1


def test_per_element_seconds_leave_out_the_inner_reranker(monkeypatch):
    # the inner reranker's time is its own trace entry, not also the per_element stage's,
    # so the stages of a trace sum to the pipeline's time (the experiment latency tables)
    clock = FakeClock()
    monkeypatch.setattr("intentrank.types.time.perf_counter", clock)
    query = Query("1", "wing").with_derived("knowledge", ["lift drag", "heat"], "k")
    start = Ranking(query, [ScoredDoc(d, 3.0 - i) for i, d in enumerate("abc")])
    trace = Trace()
    PerElementRerank(Fixed("overlap", {"c": 2.0, "a": 1.0}, clock))([start], trace)
    assert trace.stage("per_element/overlap").seconds == 5.0
    assert trace.stage("per_element").seconds == 0.0
    assert trace.stage("per_element").queries == 1


def test_per_element_against_the_element_alone():
    texts = {"a": "heat flux", "b": "lift drag", "c": "wing", "d": "none"}
    query = Query("1", "heat flux").with_derived("knowledge", ["lift drag", "wing"], "k")
    start = Ranking(query, [ScoredDoc(d, 5.0 - i) for i, d in enumerate("abcd")])
    # the question's own words put a first in both lists; the elements alone find b and c
    assert PerElementRerank(WordOverlap(texts))([start], Trace())[0].doc_ids[0] == "a"
    alone = PerElementRerank(WordOverlap(texts), against="element")
    assert alone([start], Trace())[0].doc_ids[:2] == ["b", "c"]
    assert "against=element" in alone.describe()
    assert "against" not in PerElementRerank(WordOverlap(texts)).describe()
    with pytest.raises(ParameterError, match="against must be one of"):
        PerElementRerank(WordOverlap(texts), against="aspect")


def test_per_element_with_the_question_list_first():
    texts = {"a": "wing", "b": "lift drag", "c": "heat hot", "d": "lift", "e": "none"}
    query = Query("1", "wing").with_derived("knowledge", ["lift drag", "heat hot"], "k")
    start = Ranking(query, [ScoredDoc(d, 5.0 - i) for i, d in enumerate("eabcd")])
    # without: element lists b.. and c.. interleaved; with: the incoming order (e, a, ...)
    # leads every round, no extra reranker call
    assert PerElementRerank(WordOverlap(texts))([start], Trace())[0].doc_ids[:3] == \
        ["b", "c", "a"]
    trace = Trace()
    both = PerElementRerank(WordOverlap(texts), with_question=True)
    second = Ranking(Query("2", "wing").with_derived("knowledge", ["heat hot"], "k"),
                     [ScoredDoc(d, 5.0 - i) for i, d in enumerate("abc")])
    out, out2 = both([start, second], trace)
    assert out.doc_ids == ["e", "b", "c", "a", "d"]
    assert out2.doc_ids == ["a", "c", "b"]  # one element: the question's list, then its list
    assert trace.stage("per_element").counters["element_queries"] == 3
    assert "with_question=True" in both.describe()
    assert "with_question" not in PerElementRerank(WordOverlap(texts)).describe()
    with pytest.raises(ParameterError, match="with_question must be true or false"):
        PerElementRerank(WordOverlap(texts), with_question="yes")  # type: ignore[arg-type]


def test_citations_are_checked_against_the_documents_given():
    c = check_citations("Lift rises [1][7]. Drag too [2, 3] and [4-5] [9].", 5)
    assert c.valid == (1, 2, 3, 4, 5) and c.dropped == (7, 9)
    assert c.text == "Lift rises [1]. Drag too [2][3] and [4][5]."
    assert is_abstention("The documents do not answer this question.")
    assert make_answer("See [7].", ("a", "b", "c", "d", "e"), "answer").fallback == \
        "bad_citation"
    assert make_answer("No citation here.", ("a",), "answer").fallback == "no_citation"
    assert make_answer("   ", ("a",), "answer").fallback == "empty"
    ok = make_answer("Yes [2], also [1] and [2].", ("a", "b"), "answer")
    assert ok.fallback == "" and ok.citations == (2, 1) and ok.cited_ids == ["b", "a"]
    assert make_answer("The documents do not answer this question.", ("a",),
                       "answer").fallback == ""


def test_citation_markers_mixing_lists_and_ranges_and_malformed_ones():
    c = check_citations("Mixed [1, 2-4]; chained [1-2-3] and [5-6-7, 2]. End [5].", 5)
    assert c.valid == (1, 2, 3, 4, 5) and c.dropped == ()
    assert c.malformed == ("[1-2-3]", "[5-6-7, 2]")
    assert c.text == "Mixed [1][2][3][4]; chained and. End [5]."
    sources = ("a", "b", "c")
    assert make_answer("See [1-2-3] and [2].", sources, "answer").fallback == "bad_citation"
    assert make_answer("See [1; 3] and [2 - 3].", sources, "answer").citations == (1, 3, 2)


def test_answer_stage_clips_long_documents_and_counts_fallbacks():
    long = " ".join(f"w{i}" for i in range(5000))
    docs = Docs({"a": long, "b": "short text", "c": "c text"})
    replies = {"1": "Long [1] and short [2] and [7].", "2": "", "3": "Nothing cited."}

    def answer(prompt: str) -> str:
        return replies[prompt.split("Question: ", 1)[1].split("\n", 1)[0]]

    fake = ByPrompt(answer=answer)
    stage = AnswerGenerator(LLMClient(fake, cache=None), docs, top_k=2, doc_words=300,
                            context_words=400, abstain="llm", cite="llm")
    trace = Trace()
    rankings = [ranking("q1", "1", ["a", "b", "c"]), ranking("q2", "2", ["c"]),
                ranking("q3", "3", ["b"]), Ranking(Query("q4", "4"))]
    out = stage(rankings, trace)
    a = [r.query.answer for r in out]
    assert a[0].sources == ("a", "b") and a[0].citations == (1, 2)
    assert a[0].fallback == "bad_citation" and "[7]" not in a[0].text
    assert [x.fallback for x in a[1:]] == ["empty", "no_citation", "no_documents"]
    assert len(fake.prompts) == 3  # no call without documents
    first = fake.prompts[0]
    assert "w199" in first and "w200" not in first  # 400 words shared by two documents
    counters = trace.stage("answer").counters
    assert counters["fallbacks"] == 4 and counters["clipped_documents"] == 1
    assert counters["fallback.bad_citation"] == 1 and counters["citations"] == 2
    assert out[0].doc_ids == ["a", "b", "c"]  # the ranking is not changed
    with pytest.raises(ParameterError, match="top_k"):
        AnswerGenerator(LLMClient(fake, cache=None), docs, top_k=0)


def test_shipped_knowledge_config_on_real_cranfield(cranfield_index):
    def declare(prompt: str) -> str:
        return json.dumps({"needed": ["heat transfer at the wall", "boundary layer flow",
                                      "pressure gradient"], "provided": [1]})

    fake = ByPrompt(declare, summary='{"elements": ["heat transfer", "boundary layer"]}',
                    answer="Heat transfer rises [1].")
    llm = LLMClient(fake, cache=None)
    pipe = pipeline_from_config(resolve_pipeline("knowledge"), cranfield_index, llm=llm)
    q = Query("1", "how does the boundary layer affect heat transfer in hypersonic flow")
    result = pipe.run([q])
    r = result.rankings[0]
    assert knowledge_of(r) == ["heat transfer", "boundary layer"]
    assert len(r.doc_ids) == 100 and len(set(r.doc_ids)) == 100
    assert "per_element.element1" in r.docs[0].stage_scores
    assert "per_element/cross_encoder" in result.trace.stages
    assert result.trace.stage("knowledge").counters["declarations"] == 5
    answered = AnswerGenerator(llm, cranfield_index, top_k=3, abstain="llm", cite="llm")(
        result.rankings, Trace())
    assert answered[0].query.answer.cited_ids == [r.doc_ids[0]]


def test_sub_questions_alone_with_the_question_list_on_real_cranfield(cranfield_index):
    """The single-part-safe setting from YAML: elements as sub-questions from the question
    alone, each scored alone, the cross-encoder's own order interleaved first."""
    from intentrank.core.config import load_config
    from intentrank.pipelines import build_context, build_pipeline

    fake = ByPrompt(lambda prompt: json.dumps({"needed": [
        "What is heat transfer at a wall?", "How does a boundary layer form?"]}))
    steps = load_config(resolve_pipeline("knowledge"))["pipeline"]
    steps[-2] = {"knowledge": {"n_know": 0, "form": "questions"}}
    steps[-1]["per_element"].update(against="element", with_question=True)
    ctx = build_context(cranfield_index, llm=LLMClient(fake, cache=None))
    pipe, plain = build_pipeline(steps, ctx), build_pipeline(steps[:-2], ctx)
    q = Query("1", "how does the boundary layer affect heat transfer in hypersonic flow")
    r = pipe.run([q]).rankings[0]
    ce = plain.run([q]).rankings[0]
    assert knowledge_of(r) == ["What is heat transfer at a wall?",
                               "How does a boundary layer form?"]
    assert r.doc_ids[0] == ce.doc_ids[0] and set(r.doc_ids) == set(ce.doc_ids)
    assert "with_question=True" in pipe.describe() and len(fake.prompts) == 1
    assert "complete, self-contained question" in fake.prompts[0]


def test_split_auto_keeps_the_cross_encoder_order_of_a_one_part_question_on_real_cranfield(
        cranfield_index):
    """From YAML on the real index: ``split: auto`` leaves a one-part question exactly as the
    cross-encoder ranked it and reranks a two-part one per element."""
    from intentrank.core.config import load_config
    from intentrank.pipelines import build_context, build_pipeline

    one = "how does the boundary layer affect heat transfer in hypersonic flow"
    two = "what is the drag of a delta wing? And how is a shock wave detached from a cone?"
    fake = ByPrompt(lambda prompt: json.dumps({"needed": [
        "What is the drag of a delta wing?", "How is a shock wave detached from a cone?"]}),
        parts=lambda prompt: '{"parts": 1}' if one in prompt else '{"parts": 2}')
    steps = load_config(resolve_pipeline("knowledge"))["pipeline"]
    steps[-2] = {"knowledge": {"n_know": 0, "form": "questions", "split": "auto"}}
    steps[-1]["per_element"].update(against="element", with_question=True)
    ctx = build_context(cranfield_index, llm=LLMClient(fake, cache=None))
    pipe, plain = build_pipeline(steps, ctx), build_pipeline(steps[:-2], ctx)
    queries = [Query("1", one), Query("2", two)]
    result = pipe.run(queries)
    ce = plain.run(queries).rankings
    assert knowledge_of(result.rankings[0]) == [] and len(knowledge_of(result.rankings[1])) == 2
    assert result.rankings[0].doc_ids == ce[0].doc_ids
    assert result.rankings[1].doc_ids != ce[1].doc_ids
    assert result.trace.stage("knowledge").counters["single_part"] == 1
    assert "split=auto" in pipe.describe()


def test_cli_answer_prints_checked_citations(cranfield_index, fake_openai):
    from typer.testing import CliRunner

    from intentrank.cli import app

    url, _ = fake_openai("ok", "ok", "ok", reply="Sweep lowers the lift slope [1] [9].")
    runner = CliRunner()
    where = str(cranfield_index.path)
    res = runner.invoke(app, ["--llm", f"openai:m@{url}", "answer", where,
                              "effect of sweep on wing lift", "-p", "bm25", "--n-ans", "3",
                              "--abstain", "llm", "--cite", "llm"])
    assert res.exit_code == 0, res.output
    assert "answer stage added to bm25: top 3" in res.output
    assert "Sweep lowers the lift slope [1]." in res.output and "[9]" not in res.output
    assert "answer fallback: bad_citation" in res.output
    res = runner.invoke(app, ["--llm", f"openai:m@{url}", "answer", where, "sweep", "-p",
                              "bm25", "--json", "--cite", "llm", "--abstain", "llm"])
    data = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
    assert data["citations"][0]["n"] == 1 and len(data["sources"]) == 5
    assert data["citations"][0]["support"] and "title" in data["citations"][0]
    bad = runner.invoke(app, ["answer", where, "  "])
    assert bad.exit_code == 2 and "the question is empty" in bad.output


def test_cli_eval_judges_answers_against_reference_answers(cranfield_index, fake_openai,
                                                           tmp_path, data_dir):
    from typer.testing import CliRunner

    from intentrank.cli import app

    root = tmp_path / "gen"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").symlink_to(data_dir / "cranfield" / "corpus.jsonl")
    (root / "queries.jsonl").write_text(
        json.dumps({"_id": "g1", "text": "effect of sweep on lift",
                    "metadata": {"answer": "Sweep lowers the lift slope."}}) + "\n" +
        json.dumps({"_id": "g2", "text": "heat transfer at hypersonic speed"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\ng1\t1\t1\ng2\t2\t1\n")
    url, script = fake_openai(*["ok"] * 6, reply='{"relevance": 2, "faithfulness": 0}')
    runner = CliRunner()
    res = runner.invoke(app, ["--llm", f"openai:m@{url}", "eval", str(root), "--index",
                              str(cranfield_index.path), "-p", "answer", "-p", "bm25",
                              "--judge", "--metrics", "nDCG@10"])
    assert res.exit_code == 0, res.output
    row = next(ln for ln in res.output.splitlines() if ln.startswith("│ answer "))
    assert "2.00" in row and "0.00" in row  # one answer judged (g2 has no reference)
    assert "pipeline bm25 sets no answers" in res.output
    none = runner.invoke(app, ["eval", str(data_dir / "cranfield"), "--index",
                               str(cranfield_index.path), "-p", "bm25", "--judge"])
    assert none.exit_code == 2 and "has no reference answers" in none.output
