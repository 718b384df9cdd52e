"""Choose a corpus's pipeline without relevance labels, and say how sure (issue 50).

1. A question set with known sources is drawn from the corpus itself
   (:func:`question_set`): known-item questions without an LLM
   (:mod:`intentrank.generate.known_item`: a sentence window or title with its rarest words
   masked or replaced by embedding neighbours), plus, within a time budget, the LLM
   generator's single- and two-document questions (:mod:`intentrank.generate.generator`).
   Both are saved in ``OUT/questions`` and ``OUT/generated`` and reused (a killed run
   resumes).
2. Every candidate (:mod:`intentrank.eval.candidates`: the shipped pipelines without an LLM
   step and their variants tuned on half the questions, scored on the other half) is scored
   by nDCG@10 per question; the parts are cached in ``OUT/parts``.
3. :func:`~intentrank.measures.selection.select` picks one with bootstrap intervals,
   P(best) and the paired test against the runner-up; :func:`write_recommendation` writes
   ``pipeline.yaml`` (runs unchanged: ``-p OUT/pipeline.yaml``), ``recommendation.json``
   and ``report.md`` / ``report.html`` (:mod:`intentrank.report.choose`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from intentrank.data.trec import Qrels
from intentrank.eval.candidates import (
    METRIC,
    REFERENCE,
    Scored,
    compute_parts,
    cost,
    families,
    score_candidates,
)
from intentrank.generate.known_item import (
    KnownItemSettings,
    WordNeighbours,
    copied_share,
    document_frequencies,
    known_item_questions,
    vocabulary,
)
from intentrank.measures.selection import Selection, select, set_warnings
from intentrank.types import Query

Log = Callable[[str], None]


@dataclass(frozen=True)
class ChooseSettings:
    """What a choice depends on (``recommendation.json`` records it)."""

    known_items: KnownItemSettings = field(default_factory=KnownItemSettings)
    llm_questions: int = 30  # questions the LLM generator keeps at most
    llm_minutes: float = 5.0  # its time budget (0: no LLM questions)
    noise: float = 0.01  # a cheaper candidate this close to the best, not significantly
    alpha: float = 0.05  # worse at alpha, wins
    confidence: float = 0.8  # P(best) from which the pick is called confident
    seed: int = 0


@dataclass
class QuestionSet:
    """Questions, their known sources as qrels, and per question its kind and the share of
    its content words found in its source(s)."""

    queries: list[Query]
    qrels: Qrels
    kinds: dict[str, str]
    copied: dict[str, float]

    @property
    def mean_copied(self) -> float:
        return sum(self.copied.values()) / max(len(self.copied), 1)


def _docs(index: Any) -> list[tuple[str, str, str]]:
    out = []
    for doc_id in index.ids:
        d = index.doc(doc_id)
        out.append((doc_id, d.title, d.text))
    return out


def known_item_set(index: Any, out: Path, settings: KnownItemSettings,
                   log: Log | None = None) -> QuestionSet:
    """The known-item questions of ``settings``, from ``out/known_items.json`` when it was
    drawn with the same settings from the same corpus."""
    path = out / "known_items.json"
    identity = {"settings": asdict(settings), "corpus_sha256": index.corpus_sha256}
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("identity") == json.loads(json.dumps(identity)):
            return _as_set(saved["questions"])
    if log:
        log(f"drawing {settings.n} known-item questions")
    docs = _docs(index)
    df = document_frequencies(f"{t} {x}" for _, t, x in docs)
    neighbours = None
    if any(k.endswith("neighbour") or k == "mixed" for k in settings.kinds) \
            and index.has("dense"):
        neighbours = WordNeighbours(vocabulary(df, settings.vocabulary, len(docs)),
                                    index.embedder.encode_queries)
    items = known_item_questions(docs, settings, neighbours, df)
    rows = [asdict(q) for q in items]
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"identity": identity, "questions": rows}, indent=1),
                   encoding="utf-8")
    tmp.replace(path)
    return _as_set(rows)


def _as_set(rows: Sequence[dict[str, Any]]) -> QuestionSet:
    return QuestionSet([Query(r["id"], r["text"]) for r in rows],
                       {r["id"]: {r["doc_id"]: 1} for r in rows},
                       {r["id"]: r["kind"] for r in rows},
                       {r["id"]: r["copied"] for r in rows})


def llm_set(index: Any, corpus_path: Path, out: Path, llm: Any, n: int, minutes: float,
            seed: int = 0, log: Log | None = None) -> QuestionSet:
    """The LLM generator's questions (single- and two-document) within ``minutes``,
    resuming ``out``."""
    from intentrank.data.dataset import load_dataset
    from intentrank.generate.generator import GenerationSettings, generate_questions

    gen = GenerationSettings(n=n, multi_doc=0.5, seed=seed, split="generated",
                             max_minutes=minutes)
    generate_questions(index, corpus_path, out, llm, settings=gen, progress=False, log=log)
    qrels_path = out / "qrels" / "generated.tsv"
    if not qrels_path.is_file() or not qrels_path.read_text().strip().count("\n"):
        return QuestionSet([], {}, {}, {})
    queries, qrels = load_dataset(out).split("generated")
    kinds = {q.id: "llm-pair" if len(qrels[q.id]) > 1 else "llm" for q in queries}
    copied = {q.id: copied_share(q.text, " ".join(index.doc_text(d) for d in qrels[q.id]))
              for q in queries}
    return QuestionSet(queries, qrels, kinds, copied)


def merge(*sets: QuestionSet) -> QuestionSet:
    out = QuestionSet([], {}, {}, {})
    for s in sets:
        out.queries += s.queries
        out.qrels.update(s.qrels)
        out.kinds.update(s.kinds)
        out.copied.update(s.copied)
    return out


def question_set(index: Any, out: Path, settings: ChooseSettings, llm: Any = None,
                 corpus_path: Path | None = None, log: Log | None = None) -> QuestionSet:
    """Known-item questions plus, with an ``llm`` and a time budget, generated ones."""
    sets = [known_item_set(index, out / "questions", settings.known_items, log)]
    if llm is not None and settings.llm_minutes > 0 and settings.llm_questions > 0:
        if corpus_path is None:
            raise ValueError("LLM questions need the corpus file (corpus_path)")
        sets.append(llm_set(index, corpus_path, out / "generated", llm,
                            settings.llm_questions, settings.llm_minutes,
                            settings.seed, log))
    return merge(*sets)


@dataclass
class Recommendation:
    """The pick, the evidence, the set it was made on, and the pipeline node to run."""

    selection: Selection
    scored: Scored
    questions: QuestionSet
    settings: ChooseSettings
    pipeline: Any
    seconds: float
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        s = self.selection
        return {
            "chosen": s.chosen, "best": s.best, "runner_up": s.runner_up,
            "reason": s.reason, "reference": REFERENCE, "p_value_vs_runner_up": s.p_value,
            "p_chosen_best": s.p_chosen_best, "confident": s.confident,
            "warnings": s.warnings, "metric": METRIC, "questions": s.n_queries,
            "copied_share": round(self.questions.mean_copied, 4),
            "kinds": {k: sum(v == k for v in self.questions.kinds.values())
                      for k in sorted(set(self.questions.kinds.values()))},
            "candidates": [{**asdict(e), "params": self.scored.params[e.name]}
                           for e in s.estimates],
            "by_kind": self.by_kind, "pipeline": self.pipeline,
            "settings": asdict(self.settings), "seconds": round(self.seconds, 1),
        }


def choose(index: Any, out: str | Path, settings: ChooseSettings | None = None,
           llm: Any = None, corpus_path: Path | None = None,
           log: Log | None = None) -> Recommendation:
    """Draw (or reuse) the question set, score every candidate, pick one and write the
    recommendation into ``out`` (see the module docstring)."""
    settings = settings or ChooseSettings()
    out = Path(out)
    t0 = time.perf_counter()
    qs = question_set(index, out, settings, llm, corpus_path, log)
    if not qs.queries:
        raise ValueError("no questions could be drawn from this corpus")
    fams = families()
    parts = compute_parts(index, qs.queries, out / "parts",
                          sorted({p for f in fams for p in f.parts}), log)
    scored = score_candidates(fams, parts, qs.qrels, settings.seed)
    return recommend(scored, qs, settings, out, time.perf_counter() - t0)


def selection(scored: Scored, qs: QuestionSet, settings: ChooseSettings,
              qids: Sequence[str] | None = None, n_boot: int = 2000) -> Selection:
    """:func:`~intentrank.measures.selection.select` on ``scored`` (on ``qids`` only, if
    given): the questions grouped by kind (LLM pairs with LLM singles), each tuned variant
    eligible only beyond noise of its family's shipped setting, and :data:`REFERENCE` kept
    unless the pick beats it beyond noise."""
    scores = scored.scores
    if qids is not None:
        scores = {n: {q: sc[q] for q in qids} for n, sc in scores.items()}
    costs = {n: cost(n, scored.family[n]) for n in scores}
    bases = {n: scored.family[n].name for n in scores if n.endswith("-tuned")}
    groups = {q: k.removesuffix("-pair") for q, k in qs.kinds.items()}
    return select(scores, costs, settings.noise, settings.alpha, settings.confidence,
                  n_boot=n_boot, seed=settings.seed, groups=groups, bases=bases,
                  reference=REFERENCE if REFERENCE in scores else None)


def recommend(scored: Scored, qs: QuestionSet, settings: ChooseSettings, out: Path | None,
              seconds: float = 0.0) -> Recommendation:
    """Select from ``scored`` and (with ``out``) write the recommendation files."""
    sel = selection(scored, qs, settings)
    sel.warnings = set_warnings(sel, qs.mean_copied, settings.noise, settings.alpha)
    fam = scored.family[sel.chosen]
    kinds = sorted(set(qs.kinds.values()))
    by_kind = {name: {k: _mean([s for q, s in sc.items() if qs.kinds.get(q) == k])
                      for k in kinds} for name, sc in scored.scores.items()}
    rec = Recommendation(sel, scored, qs, settings, fam.config(scored.params[sel.chosen]),
                         seconds, by_kind)
    if out is not None:
        write_recommendation(rec, out)
    return rec


def _mean(xs: Sequence[float]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else float("nan")


def write_recommendation(rec: Recommendation, out: Path) -> list[Path]:
    """``pipeline.yaml``, ``recommendation.json``, ``report.md`` and ``report.html``."""
    from intentrank.report.choose import render_html, render_markdown

    out.mkdir(parents=True, exist_ok=True)
    s = rec.selection
    e = s.estimate(s.chosen)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (f"# Chosen by `intentrank choose` on {date}: {s.chosen}\n"
              f"# estimated {METRIC} {e.mean:.4f} [{e.low:.4f}, {e.high:.4f}] on {s.n_queries} "
              f"generated questions; P(best) {s.p_chosen_best:.2f}\n"
              f"# {s.reason}\n# see recommendation.json and report.md\n")
    files = {
        "pipeline.yaml": header + yaml.safe_dump({"pipeline": rec.pipeline}, sort_keys=False),
        "recommendation.json": json.dumps(rec.to_dict(), indent=1) + "\n",
        "report.md": render_markdown(rec),
        "report.html": render_html(rec),
    }
    paths = []
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


__all__ = ["ChooseSettings", "QuestionSet", "Recommendation", "choose", "known_item_set",
           "llm_set", "merge", "question_set", "recommend", "selection",
           "write_recommendation"]
