"""`intentrank choose` (issue 50): known-item questions, the selection and its doubt, and the
candidates' re-fusion against the pipelines they write (real Cranfield)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from tolerances import F32_ABS, F32_REL

from intentrank.eval.candidates import cross_fitted
from intentrank.generate.known_item import (
    CooccurringWords,
    KnownItemSettings,
    WordNeighbours,
    copied_share,
    document_frequencies,
    known_item_questions,
    rewrite,
)
from intentrank.measures.selection import bootstrap_means, p_best, select, set_warnings


def approx(value, abs=F32_ABS):  # noqa: A002 (pytest.approx's name)
    return pytest.approx(value, rel=F32_REL, abs=abs)


# --- known-item questions ------------------------------------------------------------------


def test_rewrite_masks_the_rarest_content_words_first():
    df = Counter({"boundary": 50, "layer": 40, "hypersonic": 2, "flow": 90, "ablation": 1})
    tokens = ["the", "hypersonic", "boundary", "layer", "flow", "with", "ablation"]
    assert rewrite(tokens, df, 0.4, None) == ["the", "boundary", "layer", "flow", "with"]
    assert rewrite(tokens, df, 0.0, None) == tokens
    swapped = rewrite(tokens, df, 0.4, lambda w: w.upper())
    assert swapped == ["the", "HYPERSONIC", "boundary", "layer", "flow", "with", "ABLATION"]


def test_copied_share_counts_content_words_found_in_the_source():
    assert copied_share("heat transfer in nozzles", "heat transfer of a plate") == approx(2 / 3)
    assert copied_share("the of and", "anything") == 0.0


def _fake_encoder(texts: list[str]) -> np.ndarray:
    """Words close when they share their last three letters (a stand-in for meaning)."""
    out = np.zeros((len(texts), 64))
    for i, t in enumerate(texts):
        out[i, hash(t[-3:]) % 64] = 1.0
        out[i, hash(t) % 64] += 0.1
    return out


def test_neighbours_skip_source_words_and_the_same_stem():
    nb = WordNeighbours(["pressure", "pressures", "measure", "treasure", "leisure"],
                        _fake_encoder)
    got = nb.nearest("pressure", exclude={"measure"})
    assert got in {"treasure", "leisure"}  # not itself, its plural (stem) nor a source word


def test_cooccurring_words_come_from_other_passages_with_the_word():
    texts = ["supersonic nozzle flow with shock waves",
             "shock tube flow and shock waves in the nozzle",
             "supersonic flight of the nozzle with shock",
             "heat transfer in laminar layers"]
    df = document_frequencies(texts)
    co = CooccurringWords(texts, df)
    # "supersonic" occurs in passages 0 and 2; both also hold "nozzle", "shock" (excluded
    # here as the source's words) and "flow"/"flight" once each
    assert co.nearest("supersonic", exclude={"nozzle", "shock", "waves", "with"}) is None
    assert co.nearest("supersonic", exclude={"supersonic"}) in {"nozzle", "shock"}
    assert co.nearest("laminar", exclude=set()) is None  # in one passage only


def test_known_items_are_reproducible_and_name_their_source(cranfield):
    docs = [(d.id, d.title, d.text) for d in cranfield.corpus()][:300]
    s = KnownItemSettings(n=40, kinds=("masked", "title"), mask=0.5)
    a = known_item_questions(docs, s)
    assert a == known_item_questions(docs, s)
    assert len(a) == 40 and len({q.doc_id for q in a}) == 40
    text = {d: f"{t} {x}" for d, t, x in docs}
    df = document_frequencies(text.values())
    for q in a:
        assert q.copied == approx(copied_share(q.text, text[q.doc_id]), abs=1e-4)
        assert q.kind in {"masked", "title"}
    # masking drops words: each question's words are a sub-sequence of its source's
    assert all(q.copied == 1.0 for q in a if q.kind == "masked")
    # the rarest words are the ones gone: a kept content word is never rarer than every
    # dropped one of the same window (checked on the mean document frequency)
    kept = [df[w] for q in a for w in q.text.lower().split() if w in df]
    assert np.mean(kept) > 5
    other = known_item_questions(docs, KnownItemSettings(n=40, seed=1))
    assert [q.text for q in other] != [q.text for q in a]


def test_mixed_and_title_neighbour_kinds_replace_with_words_not_in_the_source(cranfield):
    docs = [(d.id, d.title, d.text) for d in cranfield.corpus()][:300]
    text = {d: f"{t} {x}" for d, t, x in docs}
    df = document_frequencies(text.values())
    vocab = sorted(w for w, c in df.items() if c >= 3 and w.isalpha() and len(w) > 3)[:800]
    nb = WordNeighbours(vocab, _fake_encoder)
    s = KnownItemSettings(n=30, kinds=("mixed", "title-neighbour"), mask=0.5)
    a = known_item_questions(docs, s, nb, df)
    assert a == known_item_questions(docs, s, nb, df)
    assert {q.kind for q in a} <= {"mixed", "title-neighbour", "neighbour"}
    assert any(q.kind == "mixed" for q in a) and any(q.kind == "title-neighbour" for q in a)
    for q in a:  # replacements are never words of the source, so some words are new
        assert q.copied == approx(copied_share(q.text, text[q.doc_id]), abs=1e-4)
        assert q.copied < 1.0
    titles = {d: t.lower() for d, t, _ in docs}
    for q in a:
        if q.kind == "title-neighbour":  # kept title words come from the title
            kept = [w for w in q.text.lower().split() if w in text[q.doc_id].lower().split()]
            assert all(w in titles[q.doc_id].split() for w in kept)


def test_known_item_settings_refuse_bad_values():
    with pytest.raises(ValueError, match="mask"):
        KnownItemSettings(mask=1.0)
    with pytest.raises(ValueError, match="kind"):
        KnownItemSettings(kinds=("paraphrase",))


# --- selection -----------------------------------------------------------------------------


def _scores(rng: np.random.Generator, means: dict[str, float], n: int = 200
            ) -> dict[str, dict[str, float]]:
    base = rng.uniform(0, 1, n)
    return {name: {f"q{i}": float(np.clip(base[i] + m + rng.normal(0, 0.05), 0, 1))
                   for i in range(n)} for name, m in means.items()}


def test_bootstrap_intervals_and_p_best():
    m = np.array([[0.1, 0.9], [0.2, 0.8], [0.3, 0.7]] * 30)
    boot = bootstrap_means(m, 500, seed=1)
    assert boot.shape == (500, 2)
    assert p_best(boot).tolist() == [0.0, 1.0]
    tied = p_best(np.array([[0.5, 0.5], [0.4, 0.6]]))
    assert tied.tolist() == [0.25, 0.75]


def test_select_picks_a_clear_winner_confidently():
    sc = _scores(np.random.default_rng(0), {"bm25": 0.0, "rrf": 0.08, "cascade": 0.02})
    sel = select(sc, {"bm25": 0.3, "rrf": 2.3, "cascade": 200})
    assert sel.chosen == sel.best == "rrf" and sel.runner_up == "cascade"
    assert sel.confident and sel.p_chosen_best > 0.95 and sel.p_value < 0.05
    e = sel.estimate("rrf")
    assert e.low < e.mean < e.high
    assert sum(x.p_best for x in sel.estimates) == approx(1.0)
    assert set_warnings(sel, copied=0.3) == []


def test_cheaper_candidate_wins_within_noise():
    rng = np.random.default_rng(1)
    sc = _scores(rng, {"bm25": 0.0, "cascade": 0.0})
    noise = rng.normal(0, 0.05, len(sc["bm25"]))
    sc["cascade"] = {q: s + 0.004 + noise[i] - noise.mean()
                     for i, (q, s) in enumerate(sc["bm25"].items())}
    sel = select(sc, {"bm25": 0.3, "cascade": 200}, noise=0.01)
    assert sel.best == "cascade" and sel.chosen == "bm25"
    assert "cheaper" in sel.reason
    warnings = set_warnings(sel, copied=0.9, min_questions=500)
    assert any(w.startswith("few questions") for w in warnings)
    assert any(w.startswith("questions copy their sources") for w in warnings)
    assert any(w.startswith("candidates within noise") for w in warnings)
    # outside the noise margin the better one stays
    assert select(sc, {"bm25": 0.3, "cascade": 200}, noise=0.0).chosen == "cascade"


def test_a_tuned_variant_is_eligible_only_beyond_noise_of_its_base():
    rng = np.random.default_rng(2)
    sc = _scores(rng, {"rrf": 0.0, "bm25": -0.05})
    sc["rrf-tuned"] = {q: s + 0.005 for q, s in sc["rrf"].items()}  # within noise
    costs = {"bm25": 0.3, "rrf": 2.3, "rrf-tuned": 2.31}
    sel = select(sc, costs, noise=0.01, bases={"rrf-tuned": "rrf"})
    assert sel.chosen == sel.best == "rrf"
    tuned = sel.estimate("rrf-tuned")
    assert not tuned.eligible and tuned.p_best == 0.0 and tuned.mean > sel.estimate("rrf").mean
    assert sum(e.p_best for e in sel.estimates) == approx(1.0)
    # without the base named, the tuned one's higher mean wins
    assert select(sc, costs, noise=0.01).chosen == "rrf-tuned"
    # a held-out gain beyond noise makes it eligible
    sc["rrf-tuned"] = {q: s + 0.03 for q, s in sc["rrf"].items()}
    sel = select(sc, costs, noise=0.01, bases={"rrf-tuned": "rrf"})
    assert sel.chosen == "rrf-tuned" and sel.estimate("rrf-tuned").eligible


def test_the_reference_stays_unless_beaten_beyond_noise_and_significantly():
    rng = np.random.default_rng(4)
    sc = _scores(rng, {"rrf": 0.0, "weighted": 0.0, "bm25": -0.1})
    jitter = rng.normal(0, 0.3, len(sc["rrf"]))
    sc["weighted"] = {q: s + 0.02 + jitter[i] - jitter.mean()
                      for i, (q, s) in enumerate(sc["rrf"].items())}
    costs = {"bm25": 0.3, "rrf": 2.3, "weighted": 2.9}
    assert select(sc, costs, noise=0.01).chosen == "weighted"  # above noise, not significant
    sel = select(sc, costs, noise=0.01, reference="rrf")
    assert sel.best == "weighted" and sel.chosen == "rrf"
    assert sel.reason.startswith("the reference pipeline: weighted is not better")
    sc["weighted"] = {q: s + 0.05 + jitter[i] / 10  # a clear gain: it wins
                      for i, (q, s) in enumerate(sc["rrf"].items())}
    assert select(sc, costs, noise=0.01, reference="rrf").chosen == "weighted"


def test_kinds_are_resampled_within_themselves():
    """The bootstrap by question kind keeps each kind's size (issue 58): kinds that disagree
    no longer count as two draws of a coin, so the estimate, its interval and P(best) are
    those of the question-weighted mean."""
    rng = np.random.default_rng(3)
    a = _scores(rng, {"rrf": 0.06, "dense": 0.0}, n=100)  # kind a: rrf far ahead
    b = _scores(rng, {"rrf": 0.0, "dense": 0.04}, n=100)  # kind b: dense ahead
    sc = {n: {**{f"a{q}": v for q, v in a[n].items()}, **{f"b{q}": v for q, v in b[n].items()}}
          for n in a}
    groups = {q: q[0] for q in sc["rrf"]}
    costs = {"rrf": 2.3, "dense": 1.4}
    flat = select(sc, costs, noise=0.0)
    grouped = select(sc, costs, noise=0.0, groups=groups)
    assert flat.chosen == grouped.chosen == "rrf"
    assert grouped.kinds == {"a": 100, "b": 100} and flat.kinds == {}
    for f, g in zip(flat.estimates, grouped.estimates, strict=True):
        assert (f.name, f.mean) == (g.name, g.mean)
        # fixed kind sizes take the between-kind share of the doubt away, never add to it
        assert g.high - g.low <= f.high - f.low + 0.005
    assert abs(grouped.p_chosen_best - flat.p_chosen_best) < 0.1
    # one group only: the plain bootstrap
    assert select(sc, costs, noise=0.0, groups=dict.fromkeys(groups, "x")).estimates \
        == flat.estimates
    boot = bootstrap_means(np.ones((6, 2)), 10, groups=list("aabbcc"))
    assert boot.shape == (10, 2) and np.allclose(boot, 1.0)


def test_select_refuses_unpaired_scores():
    with pytest.raises(ValueError, match="other queries"):
        select({"a": {"q1": 1.0}, "b": {"q2": 1.0}}, {})


def test_cross_fitting_scores_each_half_with_the_others_best():
    qids = [f"q{i}" for i in range(10)]
    table = [{q: 0.5 for q in qids}, {q: (1.0 if int(q[1:]) % 2 else 0.0) for q in qids},
             {q: 0.6 for q in qids}]
    scores, point = cross_fitted(table, seed=0)
    assert set(scores) == set(qids)
    assert point == 2  # best on all: 0.6 beats 0.5 (and the alternating point's 0.5)
    assert all(v in (0.5, 0.6, 0.0, 1.0) for v in scores.values())


# --- real data: the written pipeline is the candidate that was scored ---------------------


def test_choose_on_cranfield_writes_a_pipeline_that_scores_as_estimated(cranfield_index,
                                                                        data_dir, tmp_path):
    from fakes import GenerationLLM

    from intentrank.eval.candidates import per_query
    from intentrank.eval.choose import ChooseSettings, choose
    from intentrank.llm.client import LLMClient
    from intentrank.pipelines import build_context, build_pipeline

    settings = ChooseSettings(known_items=KnownItemSettings(n=24), llm_questions=4,
                              llm_minutes=2)
    corpus = data_dir / "cranfield" / "corpus.jsonl"
    fake = GenerationLLM()
    llm = LLMClient(fake, cache=False, retries=0)
    rec = choose(cranfield_index, tmp_path, settings, llm, corpus)
    out = json.loads((tmp_path / "recommendation.json").read_text())
    assert out["chosen"] == rec.selection.chosen and out["questions"] == 28
    assert out["kinds"]["neighbour"] == 24
    assert out["kinds"].get("llm", 0) + out["kinds"].get("llm-pair", 0) == 4
    assert 0 < out["copied_share"] < 1
    assert any(w.startswith("few questions") for w in out["warnings"])
    # 4 LLM questions among 28: reported apart, with a warning; no interval pinned at 1
    assert any(w.startswith("few llm questions: 4 of 28") for w in out["warnings"])
    assert all(c["high"] < 1.0 or c["low"] == 1.0 for c in out["candidates"])
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 1
    assert "| candidate |" in (tmp_path / "report.md").read_text()
    queries = rec.questions.queries
    # every candidate's setting, built from the YAML it would write, ranks as it was scored
    for name in ("rrf", "weighted", "cascade", "rrf-tuned", "cascade-tuned", "bm25"):
        fam, params = rec.scored.family[name], rec.scored.params[name]
        pipe = build_pipeline(fam.config(params), build_context(cranfield_index))
        got = per_query(pipe.run(queries).to_run(), rec.questions.qrels)
        want = rec.scored.scores[name]
        if not name.endswith("-tuned"):  # tuned ones are cross-fitted: other settings
            assert got == approx(want), name
    # the chosen pipeline file runs unchanged
    from intentrank.eval.candidates import compute_parts, score_settings
    from intentrank.pipelines import pipeline_from_config

    chosen = rec.selection.chosen
    run = pipeline_from_config(tmp_path / "pipeline.yaml", cranfield_index).run(queries)
    got = per_query(run.to_run(), rec.questions.qrels)
    fam = rec.scored.family[chosen]
    parts = compute_parts(cranfield_index, queries, tmp_path / "parts", fam.parts)
    want = score_settings({chosen: (fam, rec.scored.params[chosen])}, parts,
                          rec.questions.qrels)[chosen]
    assert got == approx(want)
    # a second run reuses the questions and the cached parts
    calls = fake.calls
    again = choose(cranfield_index, tmp_path, settings, llm, corpus)
    assert again.selection.estimates == rec.selection.estimates
    assert fake.calls == calls  # the generated set was complete: no new LLM call
    assert [q.text for q in read_questions(tmp_path)] == [q.text for q in queries[:24]]


def read_questions(out):
    from intentrank.types import Query

    data = json.loads((out / "questions" / "known_items.json").read_text())
    return [Query(r["id"], r["text"]) for r in data["questions"]]



@pytest.mark.parametrize(("args", "message"), [
    (["--mask", "1.5"], "--mask must be <= 0.95, got 1.5"),
    (["--n", "0"], "--n must be >= 1, got 0"),
    (["--llm-minutes", "-1"], "--llm-minutes must be >= 0, got -1"),
])
def test_choose_refuses_bad_options_before_any_work(tmp_path, args, message):
    from typer.testing import CliRunner

    from intentrank.cli import app

    res = CliRunner().invoke(app, ["choose", str(tmp_path / "nowhere"), str(tmp_path / "o"),
                                   *args])
    assert res.exit_code == 2 and f"error: {message}" in res.output
    assert not (tmp_path / "o").exists()
    res = CliRunner().invoke(app, ["choose", str(tmp_path / "nowhere"), str(tmp_path / "o")])
    assert res.exit_code == 2 and "nowhere: no such corpus or index" in res.output
