"""``intentrank bench``: list, plan and rebuild the benchmarks of docs/benchmarks.md from the
benchmark spec (``src/intentrank/benchmarks.yaml``; the work is in
:mod:`intentrank.eval.benchmarks` and :mod:`intentrank.eval.bench_runs`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from intentrank.cli.common import app, cli_errors, console, out
from intentrank.errors import ConfigError


def _print(text: str) -> None:
    out.print(escape(text), soft_wrap=True, highlight=False)


@app.command("bench", short_help="List, plan and rebuild the benchmarks of "
             "docs/benchmarks.md from the benchmark spec (--list, NAME, all).")
@cli_errors
def bench_cmd(
    names: Annotated[list[str] | None, typer.Argument(
        help="Benchmarks to run, each after the benchmarks it requires; `all` for every "
             "one.", show_default=False)] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the benchmarks (or the ones "
                                        "named): name, up to date or how many steps would "
                                        "run (prerequisites included), the docs/benchmarks.md "
                                        "section and the description; runs nothing.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, every step in "
                                          "order with its command and why it runs or is "
                                          "skipped; runs nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rerun every step of the named "
                                        "benchmarks even when up to date (what they require "
                                        "still runs only when stale).")] = False,
    render: Annotated[bool, typer.Option("--render", help="Only re-render the named "
                                         "benchmarks' docs/benchmarks.md sections from their "
                                         "stored results (bench/results/SECTION.json with the "
                                         "text of bench/sections/SECTION.md); runs no step.")]
        = False,
    spec_file: Annotated[Path | None, typer.Option("--spec", help="Benchmark spec file (default: "
                                                   "the shipped src/intentrank/benchmarks.yaml).")]
        = None,
    root: Annotated[Path | None, typer.Option("--root", help="Repository root the steps run from "
                                              "(default: the checkout holding the working "
                                              "directory: a folder with bench/ and "
                                              "pyproject.toml).")] = None,
) -> None:
    """Rebuild benchmarks from the benchmark spec (src/intentrank/benchmarks.yaml): each
    benchmark's steps (`intentrank ...` or `python bench/<script>.py ...`) with the files they
    read and write, the benchmarks it requires (indexes, datasets, generated sets, other runs)
    and its docs/benchmarks.md section. A step runs when an output is missing or older than
    an input, when an earlier step of the run rewrites an input, or when its command changed
    since it last ran here (.cache/bench/state.json); up-to-date steps are skipped. Steps
    run in dependency order from the repository root, without a shell, their output
    streamed; the first failure stops the run (exit status 2, the step named). {data} is
    $INTENTRANK_DATA or ../shared/data; {cache} and the steps' $INTENTRANK_CACHE are
    $INTENTRANK_CACHE or .cache/intentrank. Global options (--llm, ...) are not passed on:
    each command says what it uses."""
    from intentrank.eval.bench_runs import Workspace, find_root, plan, run_plan
    from intentrank.eval.benchmarks import load_spec

    spec = load_spec(spec_file)
    names = list(names or [])
    if "all" in names:
        if len(names) > 1:
            raise ConfigError("`all` runs every benchmark; give it alone")
        names = list(spec.benchmarks)
    if not names and not list_:
        raise ConfigError("give benchmark names, `all`, or --list (see `intentrank bench "
                          "--help`)")
    if list_ and (dry_run or force or render):
        raise ConfigError("--list runs nothing; leave out --dry-run, --force and --render")
    if render and (dry_run or force):
        raise ConfigError("--render runs no step; leave out --dry-run and --force")
    spec.order(names)  # unknown names and cycles, before looking at any file
    # steps start the command line as this interpreter runs it (`python -m intentrank.cli`)
    ws = Workspace.at(root.resolve() if root else find_root(),
                      intentrank=(sys.executable, "-m", str(__package__)))
    if list_:
        _list(spec, names or list(spec.benchmarks), ws)
        return
    if render:
        _render(spec, names, ws.root)
        return
    steps = plan(spec, names, ws, force=force)
    todo = [p for p in steps if p.run]
    benchmarks = len({p.step.benchmark for p in steps})
    _print(f"{', '.join(names) if len(names) <= 3 else f'{len(names)} benchmarks'}: "
           f"{benchmarks} benchmark(s) with their prerequisites, {len(steps)} step(s), "
           f"{len(todo)} to run (root {ws.root})")
    if dry_run:
        for p in steps:
            mark = "blocked" if p.blocked else "run" if p.run else "skip"
            _print(f"  {mark:7} {p.step.id}: {p.blocked or p.reason}")
            _print(f"          {ws.shown(p.step)}")
        return
    ran = run_plan(steps, ws, say=lambda m: console.print(escape(m), soft_wrap=True,
                                                          highlight=False))
    _print(f"done: {ran} step(s) ran, {len(steps) - ran} up to date")


def _render(spec: Any, names: list[str], root: Path) -> None:
    """Re-render the stored sections of ``names`` (every stored one for `all`)."""
    from intentrank.report import sections

    stored = set(sections.stored_sections(root))
    picked = [spec.benchmarks[n].section.name for n in names
              if spec.benchmarks[n].section and spec.benchmarks[n].section.name in stored]
    if not picked:
        raise ConfigError(f"no stored results for {', '.join(names)} (bench/results/"
                          f"SECTION.json): run the benchmark to measure them")
    for section in picked:
        changed = sections.render_into_docs(root, section)
        _print(f"{section}: {'rendered into' if changed else 'unchanged in'} "
               f"{sections.DOCS_FILE}")


def _list(spec: Any, names: list[str], ws: Any) -> None:
    """One line per benchmark (name, state, section, the commit of an archived one), its
    description below it."""
    from intentrank.eval.bench_runs import status

    width = max(len(n) for n in names)
    for name in names:
        b = spec.benchmarks[name]
        section = f"  [section {b.section.name}]" if b.section else ""
        archived = f"  [archived: runs at {b.revision}]" if b.revision else ""
        _print(f"{name:<{width}}  {status(spec, name, ws)}{section}{archived}")
        _print(f"{'':<{width}}  {b.description}")
