"""bench/bench_knowledge.py measure-real: the three systems on a collection's labelled
queries (real Cranfield index and cross-encoder, a scripted LLM), metrics checked against
recall counted by hand, and the rendered table."""

from __future__ import annotations

import json

import pytest
from bench_helpers import load_bench


@pytest.fixture(scope="module")
def bk():
    return load_bench("bench_knowledge")


def recall(ranked: list[str], gold: set[str], k: int) -> float:
    """Recall counted by hand."""
    return len(gold & set(ranked[:k])) / len(gold)


def test_rank_run_keeps_the_order_without_ties(bk):
    from intentrank.types import Query, Ranking, ScoredDoc

    r = Ranking(Query("q", "x"), [ScoredDoc("b", 1.0), ScoredDoc("a", 1.0), ScoredDoc("c", 5.0)])
    run = bk.rank_run([r])
    assert sorted(run["q"], key=run["q"].get, reverse=True) == ["b", "a", "c"]


def test_merge_reused_refuses_a_row_the_reused_run_lacks_or_scores_otherwise(bk):
    fresh = {"ce": {"q": {"R@10": 0.5}}}
    assert bk.merge_reused({"ce": {"q": {"R@10": 0.5 + 1e-12}}, "ka0": {"q": {}}}, fresh) == {
        "ce": fresh["ce"], "ka0": {"q": {}}}
    for old in ({"ce": {}}, {"ce": {"q": {}}}, {"ce": {"q": {"R@10": 0.6}}}):
        with pytest.raises(SystemExit, match="ce scores query q differently"):
            bk.merge_reused(old, fresh)
    with pytest.raises(SystemExit, match="differently"):
        bk.merge_reused(fresh, {"ce": {"q": {"R@10": float("nan")}}})


def test_pooled_runs_count_each_query_once_and_must_agree(bk):
    def run(seed: int, ce: dict, ka: dict) -> dict:
        return {"dataset": "scifact", "split": "test", "llm": "embedded", "form": "questions",
                "seed": seed, "relevant_per_query": 1.0, "cost": {"0": {"calls": 2.0}},
                "per_query": {"ce": {q: dict.fromkeys(bk.REAL_METRICS, v) for q, v in ce.items()},
                              "ka0": {q: dict.fromkeys(bk.REAL_METRICS, v)
                                      for q, v in ka.items()}}}

    a = run(0, {"q1": 1.0, "q2": 0.0}, {"q1": 0.0, "q2": 0.0})
    b = run(1, {"q2": 0.0, "q3": 1.0}, {"q2": 0.0, "q3": 1.0})
    pool = bk.pooled([a, b])
    assert pool["seed"] == "0+1" and sorted(pool["per_query"]["ce"]) == ["q1", "q2", "q3"]
    rows = {r["system"]: r for r in bk.real_rows(pool)}
    assert rows["ce"]["means"]["R@10"] == pytest.approx(2 / 3)
    assert rows["ka0"]["means"]["R@10"] == pytest.approx(1 / 3)
    rows = bk.pooled_rows([a, b], "SciFact")
    assert rows[0][:4] == ["SciFact", "embedded (questions)", "3 (seeds 0+1, pooled)", "CE"]
    assert rows[1][-3:] == ["-", "-", "-"]  # no cost of its own
    assert bk.pooled([a]) is None and bk.pooled([a, {**b, "llm": "other"}]) is None
    b["per_query"]["ka0"]["q2"]["nDCG@10"] = 1.0
    with pytest.raises(SystemExit, match="ka0 scores query q2 differently in two runs"):
        bk.pooled([a, b])


def test_measure_real_on_cranfield(bk, small_cranfield, cranfield_index, fake_openai, tmp_path):
    from intentrank.data.dataset import load_dataset

    # element 3 is not among the two declared: a subset violation per declaration
    url, script = fake_openai("ok", reply='{"needed": ["wing sweep", "lift slope"], '
                                          '"provided": [1, 3]}')
    out = tmp_path / "real.json"
    bk.main(["measure-real", str(small_cranfield), "--n", "3", "--seed", "1", "--llm",
             f"openai:m@{url}", "--n-know", "2", "--index", str(cranfield_index.path),
             "--out", str(out)])
    res = json.loads(out.read_text())
    queries, qrels = load_dataset(small_cranfield).sample("test", 3, 1)
    assert res["queries"] == [q.id for q in queries] and res["n"] == 3
    assert set(res["per_query"]) == {"none", "ce", "ka2"}
    for system, scores in res["per_query"].items():
        assert sorted(scores) == sorted(res["queries"]), system
        for row in scores.values():
            assert [row[f"R@{k}"] for k in bk.CUTS] == sorted(row[f"R@{k}"] for k in bk.CUTS)
            assert all(0.0 <= v <= 1.0 for v in row.values())
    # ir-measures recall against recall counted by hand on the same ranking
    from intentrank.pipelines import build_context, build_pipeline
    from intentrank.types import Ranking, Trace

    first = build_pipeline([{"fuse": {"method": "interleave", "inputs": [
        {"bm25": {"depth": 100}}, {"dense": {"depth": 100}}]}}, {"cutoff": 100}],
        build_context(cranfield_index), "first")
    for r in first([Ranking(q) for q in queries], Trace()):
        assert len(r.doc_ids) == len(set(r.doc_ids)) == 100
        gold = {d for d, g in qrels[r.query.id].items() if g > 0}
        for k in bk.CUTS:
            assert res["per_query"]["none"][r.query.id][f"R@{k}"] == pytest.approx(
                recall(r.doc_ids, gold, k), rel=1e-5)
    cost = res["cost"]["2"]
    assert cost["calls"] == pytest.approx(2.0)  # two declarations, no summary for two elements
    assert cost["fallbacks"]["subset_violations"] == 6
    assert res["elements"]["2"][queries[0].id] == ["wing sweep", "lift slope"]
    rows = {row["system"]: row for row in bk.real_rows(res)}
    assert set(rows["ka2"]["p"]) == {"R@10", "nDCG@10"} and not rows["ce"]["p"]
    assert all(0.0 <= p <= 1.0 for p in rows["ka2"]["p"].values())

    res["dataset"] = "scifact"
    table = bk.real_section([res])
    assert table[0].startswith("| dataset | LLM | n (seed) | system | R@3 |")  # prose: the template
    cells = [ln.count("|") for ln in table if ln.startswith("|")]
    assert len(cells) == 2 + 3 + 1 and len(set(cells)) == 1  # header, rule, 3 systems, paper
    assert any("85.0 / 85.0" in ln for ln in table)


def test_measure_real_rejects_a_missing_dataset(bk, tmp_path):
    from intentrank.errors import DataError

    with pytest.raises(DataError, match="nowhere"):
        bk.main(["measure-real", str(tmp_path / "nowhere"), "--llm", "embedded"])


def test_measure_aspects_on_composed_cranfield(bk, cranfield, cranfield_index, fake_openai,
                                               tmp_path):
    """Two real Cranfield queries composed into one question: recall against the union of
    their judgments, S-recall@10 per aspect counted by hand, KA against CE tested."""
    from intentrank.data.aspects import (
        Aspect,
        AspectQuestion,
        load_aspect_set,
        write_aspect_set,
    )
    from intentrank.generate.aspect_sets import compose_text

    queries, qrels = cranfield.split("test")
    pairs = [(queries[0], queries[1]), (queries[2], queries[3])]
    questions = [AspectQuestion(f"c{i}", compose_text(a.text, b.text), tuple(
        Aspect(str(k + 1), q.text, {d: g for d, g in qrels[q.id].items() if g > 0}, q.text)
        for k, q in enumerate((a, b))), "composed") for i, (a, b) in enumerate(pairs)]
    path = tmp_path / "cranfield-composed.jsonl"
    write_aspect_set(questions, path)
    url, _ = fake_openai("ok", reply='{"needed": ["wing sweep", "lift slope"]}')
    out = tmp_path / "aspects.json"
    bk.main(["measure-aspects", str(path), "--llm", f"openai:m@{url}", "--n-know", "0",
             "--index", str(cranfield_index.path), "--out", str(out), "--oracle-elements"])
    res = json.loads(out.read_text())
    assert res["dataset"] == "cranfield-composed" and res["n"] == 2
    assert set(res["per_query"]) == {"none", "ce", "ka0", "kaoracle"}
    assert res["elements"]["oracle"]["c1"] == [queries[2].text, queries[3].text]
    assert res["cost"]["oracle"]["calls"] == 0
    assert res["cost"]["0"]["calls"] == pytest.approx(1.0)  # one declaration, no summary

    from intentrank.pipelines import build_context, build_pipeline
    from intentrank.types import Query, Ranking, Trace

    first = build_pipeline([{"fuse": {"method": "interleave", "inputs": [
        {"bm25": {"depth": 100}}, {"dense": {"depth": 100}}]}}, {"cutoff": 100}],
        build_context(cranfield_index), "first")
    for q, r in zip(load_aspect_set(path), first([Ranking(Query(q.id, q.text))
                                                    for q in questions], Trace()),
                    strict=True):
        row = res["per_query"]["none"][q.id]
        assert row["R@10"] == pytest.approx(recall(r.doc_ids, set(q.qrels()), 10), rel=1e-5)
        covered = sum(bool(set(r.doc_ids[:10]) & set(a.docs)) for a in q.aspects)
        assert row["StRecall@10"] == pytest.approx(covered / 2)
        assert 0.0 <= row["alpha_nDCG@10"] <= 1.0
    rows = {row["system"]: row for row in bk.real_rows(res)}
    assert set(rows["ka0"]["p"]) == {"R@10", "StRecall@10"}
    table = bk.aspect_section([res])
    assert table[0].startswith("| set | LLM | n | relevant/q | system | R@3 |")
    assert sum(ln.startswith("| cranfield-composed |") for ln in table) == 4
    assert bk._system_order(res["per_query"])[-1] == "kaoracle"
    assert bk._label("kaoracle:element") == "KA oracle (element alone)"

    # --form questions: the sub-question prompts, named in the result and the table
    url, script = fake_openai("ok", reply='{"needed": ["How does wing sweep change lift?", '
                                          '"What is the lift slope?"]}')
    out = tmp_path / "aspects-questions.json"
    bk.main(["measure-aspects", str(path), "--llm", f"openai:m@{url}", "--n-know", "0",
             "--index", str(cranfield_index.path), "--out", str(out), "--n", "1",
             "--form", "questions", "--element-alone"])
    res = json.loads(out.read_text())
    assert res["form"] == "questions" and set(res["per_query"]) == {
        "none", "ce", "ka0", "ka0:element"}
    assert res["elements"]["0"]["c0"] == ["How does wing sweep change lift?",
                                          "What is the lift slope?"]
    prompt = script.bodies[0]["messages"][-1]["content"]
    assert "complete, self-contained question" in prompt and questions[0].text in prompt
    assert any(ln.startswith("| cranfield-composed | openai:m@") and "(questions)" in ln
               for ln in bk.aspect_section([res]))

    # --with-question --reuse: the kept systems as stored, one new system, the CE re-checked
    before = json.loads(out.read_text())["per_query"]
    bk.main(["measure-aspects", str(path), "--llm", f"openai:m@{url}", "--n-know", "0",
             "--index", str(cranfield_index.path), "--out", str(out), "--n", "1",
             "--form", "questions", "--element-alone", "--with-question", "--reuse"])
    res = json.loads(out.read_text())
    assert set(res["per_query"]) == {"none", "ce", "ka0", "ka0:element", "ka0:element+question"}
    assert all(res["per_query"][s] == before[s] for s in before)
    assert bk._label("ka0:element+question") == "KA 0 (element alone, CE list first)"
    assert any("| KA 0 (element alone, CE list first) |" in ln for ln in bk.aspect_section([res]))
    # --split-auto: this server answers the parts question with elements (unreadable), so
    # the question counts as several parts (a fallback) and ranks as element+question
    bk.main(["measure-aspects", str(path), "--llm", f"openai:m@{url}", "--n-know", "0",
             "--index", str(cranfield_index.path), "--out", str(out), "--n", "1",
             "--form", "questions", "--element-alone", "--with-question", "--split-auto",
             "--reuse"])
    res = json.loads(out.read_text())
    auto = "ka0:element+question+auto"
    assert res["per_query"][auto] == res["per_query"]["ka0:element+question"]
    assert res["elements"]["0:auto"] == res["elements"]["0"]
    assert res["cost"]["0:element+question+auto"]["single_part"] == 0
    assert res["cost"]["0:element+question+auto"]["fallbacks"] == {"fallback.unparseable": 1}
    assert bk._label(auto) == "KA 0 (element alone, CE list first, split auto)"
    assert any("| KA 0 (element alone, CE list first, split auto) |" in ln
               and "unparseable 1, one part 0 |" in ln for ln in bk.aspect_section([res]))
    with pytest.raises(SystemExit) as exit_info:
        bk.main(["measure-aspects", str(path), "--element-alone", "--split-auto"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit, match="another form"):
        bk.main(["measure-aspects", str(path), "--llm", f"openai:m@{url}", "--n-know", "0",
                 "--index", str(cranfield_index.path), "--out", str(out), "--n", "1",
                 "--reuse"])
    res["per_query"]["ce"]["c0"]["R@10"] += 0.5
    out.write_text(json.dumps(res))
    with pytest.raises(SystemExit, match="ce scores query c0 differently"):
        bk.main(["measure-aspects", str(path), "--llm", f"openai:m@{url}", "--n-know", "0",
                 "--index", str(cranfield_index.path), "--out", str(out), "--n", "1",
                 "--form", "questions", "--element-alone", "--reuse"])
    with pytest.raises(SystemExit) as exit_info:
        bk.main(["measure-aspects", str(path), "--with-question"])
    assert exit_info.value.code == 2


def test_measure_on_a_generated_set_with_split_auto(bk, cranfield, cranfield_index, fake_openai,
                                                    tmp_path, monkeypatch):
    """``measure SET --split-auto`` on a hand-made generated set over real Cranfield: a
    question the LLM finds one part in keeps the cross-encoder's order and recall."""
    src = cranfield.root
    root = tmp_path / "runs" / "generated" / "cf-pairs"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").symlink_to(src / "corpus.jsonl")
    questions = [
        ("p1", "How do boundary layer transition and heat transfer at hypersonic speeds "
               "interact?", "pair", ["12", "13"]),
        ("s1", "What similarity laws must a model of a wing obey in aeroelastic tests?",
         "single", ["1"])]
    (root / "queries.jsonl").write_text("".join(json.dumps(
        {"_id": q, "text": t, "metadata": {"kind": k, "documents": docs,
                                          "answer": "A reference answer."}}) + "\n"
        for q, t, k, docs in questions))
    (root / "qrels" / "generated.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t1\n" for q, _, _, docs in questions for d in docs))
    monkeypatch.setattr(bk, "ROOT", tmp_path)
    monkeypatch.setattr(bk, "OUT", tmp_path / "knowledge")
    # one reply for every call: one part (the gate) and two sub-questions (the declaration)
    url, script = fake_openai("ok", reply='{"parts": 1, "needed": ["What is A?", "What is '
                                          'B?"], "provided": []}')
    bk.main(["measure", "cf-pairs", "--llm", f"openai:m@{url}", "--n-know", "0",
             "--index", str(cranfield_index.path), "--form", "questions", "--element-alone",
             "--with-question", "--split-auto", "--answer-n", "0"])
    (path,) = (tmp_path / "knowledge").glob("cf-pairs--*.json")
    res = json.loads(path.read_text())
    auto = "ka0:element+question+auto"
    assert res["kinds"] == {"pair": 1, "single": 1}
    assert set(res["per_query"]) == {"none", "ce", "ka0", "ka0:element",
                                     "ka0:element+question", auto}
    assert res["per_query"][auto] == res["per_query"]["ce"]  # both questions judged one part
    assert res["elements"]["0"]["p1"] == ["What is A?", "What is B?"]
    assert res["elements"]["0:auto"] == {"p1": [], "s1": []}
    assert res["cost"]["0:element+question+auto"]["single_part"] == 2
    for scores in res["per_query"]["none"].values():
        assert [scores[f"R@{k}"] for k in bk.CUTS] == sorted(scores[f"R@{k}"] for k in bk.CUTS)
        assert set(scores.values()) <= {0.0, 0.5, 1.0}  # a pair question counts 0.5 per document
    md = tmp_path / "benchmarks.md"
    bk.render(md)
    text = md.read_text()
    assert "| cf-pairs | " in text and "(element alone, CE list first, split auto) |" in text
    assert text.count("one part 1 |") == 2  # each kind's table counts its own question
    assert bk.one_part(res, auto, ["p1"]) == 1
    assert bk.one_part({**res, "elements": {"0": res["elements"]["0"],
                                            "0:auto": res["elements"]["0"]}}, auto, ["p1"]) == 0


def test_memo_scorer_scores_each_pair_once_and_changes_no_score(bk, cranfield_index):
    """The bench's cross-encoder memo: real Cranfield passages through the bundled model
    score exactly as without it, and a repeated pair is not scored again."""
    import numpy as np

    from intentrank.models.cross_encoder import load_cross_encoder

    plain = load_cross_encoder(None, "onnx", 128)
    docs = cranfield_index.ids[:6]
    pairs = [("what similarity laws must be obeyed", cranfield_index.doc_text(d)) for d in docs]

    class Counting:
        scored: list = []

        def predict(self, batch, batch_size=8):
            self.scored.extend(batch)
            return plain.predict(batch, batch_size)

    memo = bk.MemoScorer(Counting())
    first = memo.predict(pairs[:4])
    again = memo.predict(pairs[2:] + pairs[:1])
    assert len(Counting.scored) == 6  # pairs 5 and 6 were new, the rest came from memory
    np.testing.assert_array_equal(first, plain.predict(pairs[:4]))
    np.testing.assert_array_equal(again, plain.predict(pairs[2:] + pairs[:1]))
    assert memo.predict([]).shape == (0,)
