"""Generate a question set with known source documents from a corpus (DataMorgana-style).

Each attempt samples, from a seed and its own number (so attempt ``i`` is the same on every
run): single- or two-document (``multi_doc``), a user and one category per categorisation
(:mod:`.categories`), then a source document, or a pair of related documents (dense
neighbours that are not near-duplicates). The LLM writes a question and a reference answer
(``generate_single`` / ``generate_pair`` prompts, JSON-schema constrained), then the filters
run in order, the first failure rejecting the attempt:

``malformed``            no usable ``{question, answer}`` (see :func:`.filters.malformed`)
``length``               the question's word count is outside a category's ``words: [min,
                         max]`` (e.g. a "short search query" of 25 words)
``copied_wording``       a "distant" question that copies the document's word pairs
``near_duplicate``       nearly the same words as a question already kept
``unsupported``          under half of the answer's content words occur in the source(s) (or,
                         with ``llm_checks``, the LLM check says it is not supported)
``support_check_failed`` (``llm_checks``) the support check gave no readable verdict
                         (rejected: kept questions are the checked ones)
``one_doc_suffices``     two-document question that draws on one document only: the question
                         and answer use fewer than 2 content words found only in one of them
                         (or, with ``llm_checks``, the LLM says one document answers it alone)
``no_partner``           (before any call) a two-document draw whose document has no related,
                         non-duplicate neighbour

The LLM checks are off by default (the embedded 0.5B calls nearly everything supported and
answerable; docs/generation.md): turn them on with a strong model (``--llm openai:...``).

Every attempt is appended to ``OUT/attempts.jsonl`` as it ends, so a killed run resumes where
it stopped (replies come back from the LLM reply cache); ``OUT`` is a BEIR directory
(``queries.jsonl`` with categories and reference answers in ``metadata``, ``qrels/<split>.tsv``
with one or two gold documents, a link to the corpus), rewritten after every kept question,
plus ``generation.json``: the settings a resume must match, written first, then settings,
model, counts and yield per category at the end of each run.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from intentrank.core.protocols import LLMLike
from intentrank.data.readers import write_jsonl
from intentrank.data.trec import write_qrels
from intentrank.errors import ConfigError, DataError
from intentrank.generate.categories import Taxonomy, load_taxonomy
from intentrank.generate.filters import (
    DuplicateFilter,
    copies_wording,
    malformed,
    one_document_only,
    unsupported,
    words,
    wrong_length,
)
from intentrank.generate.runlog import (
    Budget,
    Log,
    RunReport,
    RunSettings,
    clip,
    link_corpus,
    open_run,
    run_attempts,
    runs_so_far,
    write_info,
)
from intentrank.index.store import Index
from intentrank.llm.step import run_step
from intentrank.types import Trace

STAGE = "generate"
REASONS = ("no_partner", "malformed", "length", "copied_wording", "near_duplicate",
           "unsupported", "support_check_failed", "one_doc_suffices")


@dataclass(frozen=True)
class GenerationSettings(RunSettings):
    """What a generated set depends on; recorded in ``generation.json``."""

    n: int = 100  # questions to keep
    multi_doc: float = 0.5  # share of attempts that are two-document questions
    seed: int = 0
    split: str = "test"  # qrels/<split>.tsv
    max_minutes: float | None = None  # stop after this long (the set keeps what it has)
    max_attempts: int | None = None  # default 5 * n
    doc_chars: int = 1500  # each source document is clipped to this many characters
    min_doc_words: int = 20  # shorter documents are never sampled
    neighbours: int = 10  # two-document partners come from a document's dense top-N
    max_pair_cosine: float = 0.95  # above: near-duplicates, not a pair
    min_pair_cosine: float = 0.3  # below: unrelated, not a pair
    min_support: float = 0.5  # share of the answer's content words found in the source(s)
    llm_checks: bool = False  # also ask the LLM (support; one document answers alone)

    def __post_init__(self) -> None:
        if not 0 <= self.multi_doc <= 1:
            raise ConfigError(f"--multi-doc must be in [0, 1], got {self.multi_doc!r}")
        self.check_run()
        if not 0 <= self.min_support <= 1:
            raise ConfigError(f"min_support must be in [0, 1], got {self.min_support!r}")
        if not 0 <= self.min_pair_cosine < self.max_pair_cosine <= 1:
            raise ConfigError("need 0 <= min_pair_cosine < max_pair_cosine <= 1")


@dataclass
class Attempt:
    """One sampled attempt and what became of it (a line of ``attempts.jsonl``)."""

    attempt: int
    kind: str  # "single" or "pair"
    user: str
    categories: dict[str, str]
    documents: list[str]
    pair_type: str | None = None
    question: str = ""
    answer: str = ""
    status: str = "kept"  # "kept" or one of REASONS
    detail: str = ""
    query_id: str | None = None
    seconds: float = 0.0


class Sampler:
    """Deterministic sampling of attempt ``i``: kind, user, categories and documents."""

    def __init__(self, index: Index, taxonomy: Taxonomy, settings: GenerationSettings,
                 eligible: list[int]) -> None:
        self.index, self.taxonomy, self.settings = index, taxonomy, settings
        self.eligible = eligible
        self._eligible_set = set(eligible)

    def partners(self, row: int) -> list[int]:
        """Rows of related, not near-duplicate, eligible documents (best first)."""
        emb = self.index.embeddings
        sims = np.asarray(emb @ emb[row], dtype=np.float32)
        sims[row] = -np.inf
        k = min(self.settings.neighbours * 3, len(sims) - 1)
        if k <= 0:
            return []
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return [int(r) for r in top
                if self.settings.min_pair_cosine <= sims[r] <= self.settings.max_pair_cosine
                and int(r) in self._eligible_set][: self.settings.neighbours]

    def sample(self, attempt: int) -> Attempt | None:
        """Attempt ``attempt``'s draw; None for a two-document draw with no partner."""
        rng = random.Random(f"{self.settings.seed}:{attempt}")
        pair = rng.random() < self.settings.multi_doc
        user = self.taxonomy.users.sample(rng)
        cats = self.taxonomy.for_pairs() if pair else self.taxonomy.question
        categories = {c.name: c.sample(rng).name for c in cats}
        row = self.eligible[rng.randrange(len(self.eligible))]
        ids = [self.index.ids[row]]
        pair_type = None
        if pair:
            pair_type = self.taxonomy.two_document.sample(rng).name
            options = self.partners(row)
            if not options:
                return None
            ids.append(self.index.ids[rng.choice(options)])
        return Attempt(attempt, "pair" if pair else "single", user.name, categories, ids,
                       pair_type)


class Generator:
    """Runs attempts against an LLM and filters them; see the module docstring."""

    def __init__(self, index: Index, llm: LLMLike, taxonomy: Taxonomy,
                 settings: GenerationSettings, trace: Trace | None = None,
                 checker: LLMLike | None = None) -> None:
        self.index, self.llm, self.taxonomy, self.settings = index, llm, taxonomy, settings
        self.checker = checker or llm  # the LLM of the support and one-document checks
        self.trace = trace if trace is not None else Trace()
        self.duplicates = DuplicateFilter()

    def _properties(self, a: Attempt) -> str:
        lines = [self.taxonomy[k][v].description for k, v in a.categories.items()]
        return "\n".join(f"- {line}" for line in lines)

    def _step(self, contract: str, values: dict[str, Any], llm: LLMLike | None = None) -> Any:
        result = run_step(llm or self.llm, contract, [values], fallback=lambda v: None,
                          trace=self.trace, stage=STAGE, structured=True)[0]
        return result.value if result.ok else None

    def run(self, a: Attempt) -> Attempt:
        """Generate and filter attempt ``a`` (its status and detail are set)."""
        start = time.perf_counter()
        self.trace.stage(STAGE).queries += 1  # an attempt is the health line's query
        texts = [clip(self.index.doc_text(d), self.settings.doc_chars) for d in a.documents]
        user = self.taxonomy.users[a.user].description
        if a.kind == "single":
            value = self._step("generate_single", {"document": texts[0], "user": user,
                                                   "properties": self._properties(a)})
        else:
            kind = self.taxonomy.two_document[a.pair_type].description
            value = self._step("generate_pair", {
                "document_a": texts[0], "document_b": texts[1], "user": user, "kind": kind,
                "properties": self._properties(a)})
        a.status, a.detail = self._filter(a, value, texts)
        a.seconds = round(time.perf_counter() - start, 3)
        return a

    def _filter(self, a: Attempt, value: Any, texts: list[str]) -> tuple[str, str]:
        problem = malformed(value)
        if problem:
            return "malformed", problem
        a.question, a.answer = value["question"].strip(), value["answer"].strip()
        chosen = [self.taxonomy[k][v] for k, v in a.categories.items()]
        sized = [self.taxonomy.users[a.user], *chosen] + (
            [self.taxonomy.two_document[a.pair_type]] if a.pair_type else [])
        for c in sized:  # user, question categories and two-document type, each checked
            if problem := wrong_length(a.question, c.name, c.words):
                return "length", problem
        checks = {c for cat in chosen for c in cat.checks}
        if "distant_wording" in checks and (problem := copies_wording(a.question, texts)):
            return "copied_wording", problem
        if problem := self.duplicates.check(a.question):
            return "near_duplicate", problem
        if problem := unsupported(a.answer, texts, self.settings.min_support):
            return "unsupported", problem
        if a.kind == "pair" and (problem := one_document_only(a.question, a.answer, *texts)):
            return "one_doc_suffices", problem
        if self.settings.llm_checks:
            labelled = ([f"Document:\n{texts[0]}"] if len(texts) == 1 else
                        [f"Document {i}:\n{t}" for i, t in enumerate(texts, 1)])
            verdict = self._step("check_support", {"documents": "\n\n".join(labelled),
                                                   "question": a.question,
                                                   "answer": a.answer}, self.checker)
            if not isinstance(verdict, dict) or not isinstance(verdict.get("supported"), bool):
                return "support_check_failed", "no readable verdict from the support check"
            if not verdict["supported"]:
                return "unsupported", "the check found the answer not supported"
            pairs = zip(a.documents, texts, strict=True) if a.kind == "pair" else ()
            for doc_id, text in pairs:
                verdict = self._step("check_answerable", {"document": text,
                                                          "question": a.question},
                                     self.checker)
                answerable = verdict.get("answerable") if isinstance(verdict, dict) else None
                if answerable is True:
                    return "one_doc_suffices", f"{doc_id} alone answers it"
                if not isinstance(answerable, bool):
                    self.trace.count(STAGE, "answerable_check_failed")
        return "kept", ""


# --- the output directory ----------------------------------------------------------------


def yield_table(attempts: Iterable[Attempt]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{categorisation: {category: {"attempts": n, "kept": k, "rejected": {reason: r}}}}``
    (users, two-document types and kinds included; ``rejected`` lists the reasons met)."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for a in attempts:
        pair = [("two_document", a.pair_type)] if a.pair_type else []
        for group, name in [("kind", a.kind), ("user", a.user), *pair, *a.categories.items()]:
            row = table.setdefault(group, {}).setdefault(
                name, {"attempts": 0, "kept": 0, "rejected": {}})
            row["attempts"] += 1
            if a.status == "kept":
                row["kept"] += 1
            else:
                row["rejected"][a.status] = row["rejected"].get(a.status, 0) + 1
    return table


def write_dataset(out: Path, attempts: list[Attempt], split: str) -> int:
    """Write ``queries.jsonl`` and ``qrels/<split>.tsv`` for the kept attempts."""
    kept = [a for a in attempts if a.status == "kept"]
    records = []
    for a in kept:
        meta = {"kind": a.kind, "user": a.user, "categories": a.categories,
                "answer": a.answer, "documents": a.documents, "attempt": a.attempt}
        if a.pair_type:
            meta["two_document_type"] = a.pair_type
        records.append({"_id": a.query_id, "text": a.question, "metadata": meta})
    write_jsonl(out / "queries.jsonl", records)
    write_qrels(((a.query_id, d, 1) for a in kept for d in a.documents),
                out / "qrels" / f"{split}.tsv")
    return len(kept)


# --- the run -------------------------------------------------------------------------------


def generate_questions(
    index: Index,
    corpus_path: Path,
    out_dir: str | Path,
    llm: LLMLike,
    *,
    taxonomy: Taxonomy | str | Path | None = None,
    settings: GenerationSettings | None = None,
    trace: Trace | None = None,
    progress: bool = True,
    log: Log | None = None,
    checker: LLMLike | None = None,
) -> RunReport:
    """Generate ``settings.n`` questions about the documents of ``index`` into ``out_dir``
    (resuming what is there); see the module docstring for what is written. ``checker``
    answers the ``llm_checks`` (default: ``llm``)."""
    settings = settings or GenerationSettings()
    if not isinstance(taxonomy, Taxonomy):
        taxonomy = load_taxonomy(taxonomy)
    if len(index) == 0:
        raise DataError("the corpus is empty: no documents to generate questions from",
                        corpus_path)
    eligible = [row for row, doc_id in enumerate(index.ids)
                if len(words(index.doc_text(doc_id))) >= settings.min_doc_words]
    if not eligible:
        raise DataError(f"no document has {settings.min_doc_words} words or more",
                        corpus_path)
    sampler = Sampler(index, taxonomy, settings, eligible)
    if settings.multi_doc > 0 and (len(eligible) < 2 or not _any_pair(sampler)):
        raise DataError(f"the corpus is too small for two-document questions ({len(eligible)} "
                        f"eligible documents, no related pair with cosine in "
                        f"[{settings.min_pair_cosine}, {settings.max_pair_cosine}]); use "
                        f"--multi-doc 0", corpus_path)
    identity = {**settings.identity(), "taxonomy_sha256": taxonomy.sha256,
                "model": getattr(llm, "model", getattr(llm, "name", "?")),
                "corpus_sha256": index.corpus_sha256}
    if settings.llm_checks and checker is not None:
        identity["checker_model"] = getattr(checker, "model", getattr(checker, "name", "?"))
    out = Path(out_dir)
    attempts = open_run(out, identity, "generated question set", Attempt, log, "questions")
    gen = Generator(index, llm, taxonomy, settings, trace, checker)
    for a in attempts:
        if a.status == "kept":
            gen.duplicates.add(a.query_id or "", a.question)
    linked = link_corpus(corpus_path, out)
    budget = Budget(settings.n, settings.max_attempts or 5 * settings.n, settings.max_minutes)
    stopped_by = _loop(gen, sampler, settings, attempts, out, budget, progress)
    info = _record(out, settings, taxonomy, identity, attempts, gen.trace, linked,
                   corpus_path, stopped_by, budget.seconds)
    kept = write_dataset(out, attempts, settings.split)
    return RunReport(out, kept, len(attempts), info)


def _any_pair(sampler: Sampler, tries: int = 50) -> bool:
    rng = random.Random(sampler.settings.seed)
    rows = sampler.eligible if len(sampler.eligible) <= tries else \
        rng.sample(sampler.eligible, tries)
    return any(sampler.partners(r) for r in rows)


def _loop(gen: Generator, sampler: Sampler, settings: GenerationSettings,
          attempts: list[Attempt], out: Path, budget: Budget, progress: bool) -> str:
    def attempt(i: int) -> Attempt:
        a = sampler.sample(i)
        if a is None:  # a two-document draw without a partner: try a single one
            return Attempt(i, "pair", "", {}, [], status="no_partner")
        gen.run(a)
        if a.status == "kept":
            a.query_id = f"g{i:05d}"
            gen.duplicates.add(a.query_id, a.question)
        return a

    return run_attempts(out, attempts, budget, attempt,
                        lambda: write_dataset(out, attempts, settings.split),
                        "questions kept", "q", progress)


def _record(out: Path, settings: GenerationSettings, taxonomy: Taxonomy,
            identity: dict[str, Any], attempts: list[Attempt], trace: Trace, linked: str,
            corpus_path: Path, stopped_by: str, seconds: float) -> dict[str, Any]:
    reasons = Counter(a.status for a in attempts)
    kept = reasons.pop("kept", 0)
    runs = runs_so_far(out, trace, STAGE, stopped_by, seconds)
    # the attempts' own time: a killed run records no ``runs`` entry, but its attempts count
    spent = sum(a.seconds for a in attempts)
    return write_info(out, {
        "identity": identity, "settings": asdict(settings),
        "taxonomy": taxonomy.source, "corpus": str(corpus_path.resolve()), "corpus_link": linked,
        "split": settings.split, "kept": kept, "attempts": len(attempts),
        "rejected": dict(sorted(reasons.items())),
        "yield": yield_table(attempts), "runs": runs,
        "minutes": round(spent / 60, 1),
        "questions_per_minute": round(kept / (spent / 60), 2) if spent else None,
    })
