"""``intentrank generate``, ``generate-conversations``, ``reformulate`` and
``cast-passages``: test sets and training data written by an LLM, conversational turns
rewritten, TREC CAsT passages as a dataset."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from intentrank.cli.common import (
    DEFAULT_DATA,
    app,
    check_new_dir,
    check_output_dir,
    check_output_file,
    cli_errors,
    console,
    llm_health,
    log,
    open_or_build,
    settings_of,
    write_text,
)
from intentrank.cli.options import CorpusArg
from intentrank.core.params import check_int, check_number
from intentrank.errors import ConfigError

MinutesOption = Annotated[float, typer.Option(
    help="Stop after this many minutes, keeping what was generated (0 = no limit).")]


@app.command("generate")
@cli_errors
def generate_cmd(
    ctx: typer.Context,
    corpus: CorpusArg,
    out_dir: Annotated[Path, typer.Argument(help="Directory for the question set (BEIR "
                                            "layout); an earlier run there is resumed.")],
    config: Annotated[Path | None, typer.Option("--config", help="Categorisation file (YAML), or "
                                                "a shipped one by name: 'default' (DataMorgana's "
                                                "taxonomy) or 'search-queries' (training data).")]
        = None,
    n: Annotated[int, typer.Option("--n", help="Questions to keep.")] = 100,
    multi_doc: Annotated[float, typer.Option(help="Share of attempts that are two-document "
                                             "questions.")] = 0.5,
    minutes: MinutesOption = 0.0,
    max_attempts: Annotated[int, typer.Option(help="Stop after this many attempts (0 = 5 x "
                                              "--n).")] = 0,
    split: Annotated[str, typer.Option(help="Write qrels/<split>.tsv ('train' for training "
                                       "data).")] = "test",
    seed: Annotated[int, typer.Option(help="Random seed of the sampling.")] = 0,
    index_dir: Annotated[Path | None, typer.Option("--index", help="Index of the corpus (default "
                                                   "indexes/<corpus name>, built if missing).")]
        = None,
    llm_checks: Annotated[bool, typer.Option("--llm-checks/--no-llm-checks",
                                             help="Also ask an LLM whether each answer is "
                                             "supported and whether one document answers a "
                                             "two-document question alone (the embedded 1.5B "
                                             "by default: it rejects wrong answers, the 0.5B "
                                             "says yes to nearly all; docs/benchmarks.md).")]
        = False,
) -> None:
    """Generate questions with known source documents (single- and two-document, categories
    sampled from a taxonomy), filtered for faithfulness; writes a BEIR dataset."""
    from intentrank.data.dataset import corpus_file
    from intentrank.generate.categories import load_taxonomy
    from intentrank.generate.generator import GenerationSettings, generate_questions
    from intentrank.types import Trace

    settings = settings_of(ctx)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_int("--n", n)
    check_int("--max-attempts", max_attempts, 0)
    check_number("--multi-doc", multi_doc, minimum=0, maximum=1)
    check_number("--minutes", minutes, minimum=0)
    generation = GenerationSettings(n=n, multi_doc=multi_doc, seed=seed, split=split,
                                    max_minutes=minutes or None,
                                    max_attempts=max_attempts or None, llm_checks=llm_checks)
    taxonomy = load_taxonomy(config)
    source = corpus_file(corpus)
    if not source.is_file():
        raise ConfigError(f"{corpus}: no such corpus file or directory")
    check_new_dir(out_dir)
    name = corpus.name if corpus.is_dir() else corpus.name.split(".")[0]
    idx = open_or_build(corpus, index_dir or Path("indexes") / name)
    llm = settings.load_llm(role="questions")
    trace = Trace()
    checker = settings.load_llm(role="support") if llm_checks else None
    report = generate_questions(idx, source, out_dir, llm, taxonomy=taxonomy,
                                settings=generation, trace=trace, progress=True, log=log,
                                checker=checker)
    info = report.info
    llm_health(settings, trace)
    console.print(f"[green]question set ready[/] {report.out_dir}: {report.kept} questions "
                  f"kept of {report.attempts} attempts (stopped by "
                  f"{info['runs'][-1]['stopped_by']}); rejected: "
                  + (", ".join(f"{k} {v}" for k, v in info["rejected"].items()) or "none"))
    table = Table("categorisation", "category", "attempts", "kept", "yield", "too long/short")
    for group, rows in info["yield"].items():
        for cat, row in rows.items():
            share = f"{row['kept'] / row['attempts']:.0%}" if row["attempts"] else "-"
            table.add_row(group, cat, str(row["attempts"]), str(row["kept"]), share,
                          str(row.get("rejected", {}).get("length", 0)))
    console.print(table)


CAST_YEARS = ("cast2019", "cast2020", "cast2021")


def _conversations(source: str) -> list[Any]:
    """Conversations from a conversations.jsonl file, a dataset directory holding one, or a
    TREC CAsT year (``cast2019``, ``cast2020``, ``cast2021``, read from the shared data)."""
    from intentrank.data.conversations import load_cast, load_conversations

    if source in CAST_YEARS:
        return load_cast(int(source[4:]), DEFAULT_DATA / "trec-cast")
    path = Path(source)
    if path.is_dir():
        path = path / "conversations.jsonl"
    if not path.exists():
        raise ConfigError(f"{source}: no such conversations file or directory (give a "
                          f"conversations.jsonl, a directory with one, or one of "
                          f"{', '.join(CAST_YEARS)})")
    return load_conversations(path)


@app.command("reformulate")
@cli_errors
def reformulate_cmd(
    ctx: typer.Context,
    conversations: Annotated[str, typer.Argument(help="A conversations.jsonl file, a "
                                                 "directory with one, or cast2019 / cast2020 "
                                                 "/ cast2021.")],
    method: Annotated[list[str], typer.Option("--method", "-m", help="Reformulation "
                                              "method (repeat for several): rewrite_full, "
                                              "rewrite_summary, rewrite_questions, hyde, "
                                              "hyde_masked, hyde_doc, hyde_doc_masked; "
                                              "without an LLM: concat_turns, first_turn, "
                                              "history_terms. Default rewrite_full on the "
                                              "1.5B (the best measured on CAsT 2021, "
                                              "docs/benchmarks.md Defaults).")]
        = ["rewrite_full"],  # noqa: B006
    out_file: Annotated[Path | None, typer.Option("--out", help="JSONL output (default: stdout).")]
        = None,
    genre: Annotated[str, typer.Option(help="What the corpus's documents are, for "
                                       "hyde_doc / hyde_doc_masked.")] = "passage",
    max_history_words: Annotated[int, typer.Option(help="History budget in words (longer "
                                                   "conversations keep the first and the "
                                                   "latest turns).")] = 300,
    max_answer_words: Annotated[int, typer.Option(help="Each earlier answer clipped to this "
                                                  "many words.")] = 40,
    limit: Annotated[int, typer.Option(help="Only the first N turns (0 = all).")] = 0,
) -> None:
    """Rewrite conversational turns into standalone queries (one JSON line per turn and
    method: the turn, the reformulation, the gold rewrite when known, any fallback)."""
    from rich.progress import Progress

    from intentrank.core.registry import BuildContext
    from intentrank.pipelines import build_pipeline
    from intentrank.query.reformulate import (
        METHODS,
        NO_LLM_METHODS,
        ConversationalReformulator,
        conversation_turns,
        reformulate_turns,
    )
    from intentrank.types import Trace

    settings = settings_of(ctx)
    check_int("--limit", limit, 0)
    known = [*METHODS, *NO_LLM_METHODS]
    unknown = [m for m in method if m not in known]
    if unknown:
        raise ConfigError(f"--method: unknown {', '.join(map(repr, unknown))}; choose "
                          f"from {', '.join(known)}")
    check_output_file(out_file, "--out")
    llm = settings.load_llm(role="rewrite") if any(m in METHODS for m in method) else None
    stages = [build_pipeline(m, BuildContext()) if m in NO_LLM_METHODS else
              ConversationalReformulator(llm, m, genre=genre,  # type: ignore[arg-type]
                                         max_history_words=max_history_words,
                                         max_answer_words=max_answer_words)
              for m in method]
    turns = conversation_turns(_conversations(conversations), limit)
    lines, traces = [], []
    with Progress(console=console, transient=True) as bar:
        for stage in stages:
            task = bar.add_task(stage.name, total=len(turns))
            trace = Trace()
            for records in reformulate_turns(stage, turns, trace):
                lines.extend(records)
                bar.advance(task, len(records))
            traces.append(trace)
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    if out_file is None:
        sys.stdout.write(text)
    else:
        write_text(out_file, text)
        console.print(f"[green]wrote[/] {out_file}: {len(lines)} reformulations "
                      f"({len(turns)} turns x {len(stages)} method(s))")
    llm_health(settings, traces, separate=True)


@app.command("cast-passages")
@cli_errors
def cast_passages_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Directory for the dataset (corpus.jsonl, "
                                            "conversations.jsonl, qrels/test.tsv).")],
    cast_root: Annotated[Path | None, typer.Option(help="The trec-cast data directory.")]
        = None,
) -> None:
    """Write TREC CAsT 2021's canonical response passages as a labelled conversational
    dataset: each turn's own passage is its relevant document."""
    from intentrank.data.conversations import write_cast2021_passages

    check_output_dir(out_dir, "OUT_DIR")
    root = write_cast2021_passages(out_dir, cast_root or DEFAULT_DATA / "trec-cast")
    console.print(f"[green]wrote[/] {root} (evaluate with `intentrank eval {root} -p ...`)")


@app.command("generate-conversations")
@cli_errors
def generate_conversations_cmd(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Argument(help="A judged BEIR collection (corpus, queries, "
                                            "qrels).")],
    out_dir: Annotated[Path, typer.Argument(help="Directory for the conversational set "
                                            "(conversations.jsonl, qrels/, corpus link); an "
                                            "earlier run there is resumed.")],
    turns: Annotated[int, typer.Option(help="Turns per conversation, the judged query "
                                       "last (3, 6, 11, ...).")] = 3,
    n: Annotated[int, typer.Option("--n", help="Conversations to keep.")] = 50,
    split: Annotated[str, typer.Option(help="The split whose judged queries end the "
                                       "conversations.")] = "test",
    seed: Annotated[int, typer.Option(help="Random seed of the query order.")] = 0,
    minutes: MinutesOption = 0.0,
    max_attempts: Annotated[int, typer.Option(help="Stop after this many attempts (0 = no "
                                              "limit).")] = 0,
    follow_up: Annotated[str, typer.Option(
        "--follow-up", help="Who writes the contextual last turn: llm (the LLM's follow-up), "
        "rule (the query with its topic replaced by a pronoun, no other term lost) or "
        "llm_or_rule (the LLM's, unless it would be rejected as self_contained, drifted or "
        "unrecoverable: then the rule's, counted as rule_follow_ups).")] = "llm_or_rule",
    history_from: Annotated[str, typer.Option(
        "--history-from", help="The document the earlier turns are written from: neighbour "
        "(the gold document's nearest BM25 neighbour not judged relevant to the query, so the "
        "history cannot leak the answer) or gold (the most relevant document itself, as "
        "before issue 34).")] = "neighbour",
) -> None:
    """Generate labelled conversations: LLM-written earlier turns, then the judged query as a
    contextual follow-up (its original text is the gold rewrite, its qrels label the turn)."""
    from intentrank.generate.conversations import generate_conversations
    from intentrank.types import Trace

    settings = settings_of(ctx)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    trace = Trace()
    check_int("--n", n)
    check_int("--turns", turns, 2)
    check_int("--max-attempts", max_attempts, 0)
    check_number("--minutes", minutes, minimum=0)
    llm = settings.load_llm(role="questions")
    report = generate_conversations(dataset, out_dir, split=split, n=n, turns=turns,
                                    seed=seed, llm=llm, minutes=minutes or None,
                                    max_attempts=max_attempts or None, trace=trace,
                                    follow_up=follow_up, history_from=history_from,
                                    progress=True, log=log)
    llm_health(settings, trace)
    rejected = report.info.get("rejected", {})
    console.print(f"[green]conversations ready[/] {report.out_dir}: {report.kept} kept of "
                  f"{report.attempts} attempts; rejected: "
                  + (", ".join(f"{k} {v}" for k, v in rejected.items() if v) or "none")
                  + f"; follow-ups by rule: {report.info.get('rule_follow_ups', 0)}")
