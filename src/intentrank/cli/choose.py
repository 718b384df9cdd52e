"""``intentrank choose``: pick a corpus's pipeline without relevance labels, and say how
sure (the work is :mod:`intentrank.eval.choose`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from intentrank.cli.common import (
    app,
    check_output_dir,
    cli_errors,
    console,
    llm_health,
    log,
    open_or_build,
    settings_of,
    warn,
)
from intentrank.core.params import check_int, check_number
from intentrank.errors import ConfigError


@app.command("choose")
@cli_errors
def choose_cmd(
    ctx: typer.Context,
    source: Annotated[Path, typer.Argument(help="A corpus (BEIR directory, .jsonl/.csv) or an "
                                           "index directory.")],
    out_dir: Annotated[Path, typer.Argument(help="Directory for the question set, the cached "
                                            "runs and the recommendation (pipeline.yaml, "
                                            "recommendation.json, report.md/.html); an "
                                            "earlier run there is resumed.")],
    n: Annotated[int, typer.Option("--n", help="Known-item questions (no LLM).")] = 150,
    mask: Annotated[float, typer.Option(help="Share of a known-item question's content "
                                        "words, rarest first, replaced by corpus words not "
                                        "in the source (docs/choose.md).")] = 0.7,
    llm_questions: Annotated[int, typer.Option(help="Questions the LLM generator keeps at "
                                               "most (needs a corpus, not an index).")] = 30,
    llm_minutes: Annotated[float, typer.Option(help="Time budget of the LLM generator "
                                               "(0 = no LLM questions).")] = 5.0,
    noise: Annotated[float, typer.Option(help="A cheaper candidate within this much nDCG@10 "
                                         "of the best and not significantly worse wins; a "
                                         "tuned variant, or any pick over rrf, must gain "
                                         "more than this, significantly.")]
        = 0.01,
    seed: Annotated[int, typer.Option(help="Random seed (questions, folds, bootstrap).")] = 0,
    index_dir: Annotated[Path | None, typer.Option("--index", help="Index of the corpus "
                                                   "(default indexes/<corpus name>, built "
                                                   "if missing).")] = None,
) -> None:
    """Choose a pipeline for a corpus without labels: generated questions with known sources,
    every shipped pipeline without an LLM step and variants tuned on half the questions,
    bootstrap intervals, P(best) and a paired test; writes OUT_DIR/pipeline.yaml (run it
    with -p) and a report."""
    from dataclasses import replace

    from intentrank.data.dataset import corpus_file
    from intentrank.eval.choose import ChooseSettings, choose
    from intentrank.generate.known_item import KnownItemSettings
    from intentrank.index import Index
    from intentrank.types import Trace

    settings = settings_of(ctx)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_int("--n", n)
    check_int("--llm-questions", llm_questions, 0)
    check_number("--mask", mask, minimum=0, maximum=0.95)
    check_number("--llm-minutes", llm_minutes, minimum=0)
    check_number("--noise", noise, minimum=0, maximum=1)
    check_output_dir(out_dir, "OUT_DIR")
    if not source.exists():
        raise ConfigError(f"{source}: no such corpus or index")
    corpus_path = None
    if Index.exists(source):
        idx = Index.open(source)
        if llm_minutes > 0 and llm_questions > 0:
            warn("an index has no corpus file for the LLM generator: known-item questions "
                 "only (give the corpus to add LLM questions)")
            llm_minutes = 0
    else:
        corpus_path = corpus_file(source)
        if not corpus_path.is_file():
            raise ConfigError(f"{source}: no such corpus file or directory")
        name = source.name if source.is_dir() else source.name.split(".")[0]
        idx = open_or_build(source, index_dir or Path("indexes") / name)
    choice = ChooseSettings(known_items=replace(KnownItemSettings(), n=n, mask=mask,
                                                seed=seed),
                            llm_questions=llm_questions, llm_minutes=llm_minutes,
                            noise=noise, seed=seed)
    trace = Trace()
    llm = None
    if llm_minutes > 0 and llm_questions > 0:
        from intentrank.llm.client import LLMClient

        llm = settings.load_llm(role="questions")
        llm = llm if isinstance(llm, LLMClient) else LLMClient(llm)
    rec = choose(idx, out_dir, choice, llm, corpus_path, log)
    if llm is not None:
        llm_health(settings, trace)
    sel = rec.selection
    table = Table("candidate", "nDCG@10", "95% interval", "P(best)", "ms/query")
    for e in sel.estimates:
        mark = " *" if e.name == sel.chosen else "" if e.eligible else " (not eligible)"
        table.add_row(e.name + mark, f"{e.mean:.4f}",
                      f"[{e.low:.4f}, {e.high:.4f}]", f"{e.p_best:.2f}", f"{e.cost:.1f}")
    console.print(table)
    for w in sel.warnings:
        warn(w)
    console.print(f"[green]chosen[/] {sel.chosen} ({sel.reason}; P(best) "
                  f"{sel.p_chosen_best:.2f}, {'confident' if sel.confident else 'not confident'}"
                  f"): run it with -p {out_dir / 'pipeline.yaml'}")
