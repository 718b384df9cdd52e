"""Every command printed in README.md and docs/*.md parses against today's CLI and scripts
(issue 38): the ``intentrank`` subcommand exists and takes every option given (global options
before it), a ``bench/*.py`` script exists and its argparse parser (and subcommand) takes every
option given, a ``python -m intentrank...`` module is runnable (and its parser, if it has one,
takes the options). Nothing is run and no model is loaded; the check of one command is
tests/command_check.py's ``check``.

A command is a line of a fenced code block, or an inline code span, that starts with
``intentrank``, ``.venv/bin/intentrank``, ``python bench/...``, ``.venv/bin/python bench/...``
or ``python -m intentrank...`` (after ``$ ``, ``VAR=value`` and ``nice -n N``). Lines ending in
``\\`` are joined, ``# comments`` dropped, and ``&&``/``;``/``|`` separate commands. ``...``
where the subcommand goes stands for the rest of the command, elsewhere for an argument;
``[--opt value]`` is an optional part and is checked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from command_check import check

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Commands shown on purpose with an option that does not exist (the error they print is the
# point): (document, option).
INTENDED_BAD = {("docs/reliability.md", "--bogus")}

FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
SEPARATORS = {"&&", "||", ";", "|"}


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str

    def where(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


# -- extraction -------------------------------------------------------------------------------

def _fenced_lines(lines: list[str]) -> list[bool]:
    inside, fenced = False, []
    for line in lines:
        if FENCE.match(line):
            fenced.append(True)
            inside = not inside
        else:
            fenced.append(inside)
    return fenced


def _blocks(lines: list[str], fenced: list[bool]):
    """(first line number, text) of each run of prose lines; a table row is a run alone."""
    block: list[str] = []
    start = 0
    for number, (line, in_fence) in enumerate(zip(lines, fenced, strict=True), 1):
        table_row = line.lstrip().startswith("|")
        if in_fence or not line.strip() or table_row:
            if block:
                yield start, "\n".join(block)
                block = []
            if table_row and not in_fence:
                yield number, line
            continue
        if not block:
            start = number
        block.append(line)
    if block:
        yield start, "\n".join(block)


def _segments(text: str) -> list[list[str]]:
    """The commands of a shell line: tokens split at ``&&``, ``;`` and ``|``, comments
    dropped."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: split on whitespace
        tokens = text.split("#", 1)[0].split()
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


def _strip_prefix(tokens: list[str]) -> list[str]:
    """Drop ``$``, ``VAR=value`` and ``nice [-n N]`` before the program."""
    i = 0
    while i < len(tokens):
        if tokens[i] == "$" or re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[i]):
            i += 1
        elif tokens[i] == "nice":
            i += 3 if i + 1 < len(tokens) and tokens[i + 1] == "-n" else 1
        else:
            break
    return tokens[i:]


def _is_command(tokens: list[str]) -> bool:
    if not tokens:
        return False
    program = tokens[0]
    if program in ("intentrank", ".venv/bin/intentrank"):
        return len(tokens) > 1  # not the name alone
    if program in ("python", "python3", ".venv/bin/python") and len(tokens) > 1:
        return (tokens[1].startswith("bench/")
                or (tokens[1] == "-m" and len(tokens) > 2
                    and tokens[2].split(".")[0] == "intentrank"))
    return False


def extract(path: Path, doc: str | None = None) -> list[tuple[Command, list[str]]]:
    """(command, its tokens) of every command shown in a Markdown file."""
    doc = doc or path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced = _fenced_lines(lines)
    found: list[tuple[int, str]] = []
    # fenced code blocks: one command a line, backslash continuations joined
    number = 0
    while number < len(lines):
        if not fenced[number] or FENCE.match(lines[number]):
            number += 1
            continue
        start, text = number + 1, lines[number]
        while text.rstrip().endswith("\\") and number + 1 < len(lines) and fenced[number + 1]:
            number += 1
            text = text.rstrip()[:-1] + " " + lines[number].strip()
        found.append((start, text.strip()))
        number += 1
    # inline code spans (which may wrap onto the next line of a paragraph)
    for start, block in _blocks(lines, fenced):
        for match in SPAN.finditer(block):
            line = start + block.count("\n", 0, match.start())
            found.append((line, " ".join(match.group(2).split())))
    commands = []
    for line, text in sorted(found):
        for tokens in _segments(text):
            tokens = _strip_prefix(tokens)
            if _is_command(tokens):
                commands.append((Command(doc, line, text), tokens))
    return commands


def bad_commands(path: Path) -> list[str]:
    """``file:line: command -> what is wrong`` for each command of a document that does not
    parse."""
    bad = []
    for command, tokens in extract(path):
        errors = [e for e in check(tokens)
                  if not any(command.doc == doc and f"no option {opt} " in e
                             for doc, opt in INTENDED_BAD)]
        if errors:
            bad.append(f"{command.where()}\n    -> {'; '.join(errors)}")
    return bad


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_in_the_docs_parses(path):
    bad = bad_commands(path)
    assert not bad, (f"{len(bad)} command(s) in {path.relative_to(ROOT)} do not parse against "
                     "today's CLI and scripts:\n" + "\n".join(bad))


def test_the_checks_catch_stale_commands():
    # the options bench_ablation.py lost when the cascade moved into the experiment file
    stale = "python bench/bench_ablation.py --collection scifact --ce-depth 30 --ce-rrf --tag x"
    assert check(shlex.split(stale)) == [
        "no option --ce-depth (the script)", "no option --ce-rrf (the script)"]
    assert check(["intentrank", "eval", "d", "--ce-depth", "3"]) == ["no option --ce-depth (eval)"]
    assert check(["intentrank", "--strict", "evaluate"]) == ["no subcommand 'evaluate'"]
    assert check(["intentrank", "search", "--strict", "i", "q"]) == ["no option --strict (search)"]
    assert check(["intentrank", "--llm", "x", "search", "i", "q", "-k", "-5", "--json"]) == []
    assert check(["intentrank", "[--llm", "x]", "answer", "i", "...", "-p", "rrf"]) == []
    assert check(["python", "bench/bench_nope.py"]) == ["no script bench/bench_nope.py"]
    # a script without main(): the arguments its docstring shows
    assert check(["python", "bench/bench_defaults.py", "render"]) == []
    assert check(["python", "bench/bench_defaults.py", "draw"]) != []
    assert check(["python", "bench/bench_coverage.py", "walk"])[0].startswith(
        "no subcommand 'walk'")
    assert check(["python", "bench/bench_coverage.py", "run", "--sample", "4"]) == []
    assert check(["python", "bench/bench_coverage.py", "sets", "--sample", "4"]) == [
        "no option --sample (sets)"]
    assert check(["python", "-m", "intentrank", "eval"]) == [
        "intentrank is a package without __main__ (not runnable)"]
    assert check(["python", "-m", "intentrank.cli", "eval", "d", "--nope"]) == [
        "no option --nope (eval)"]


def test_commands_are_found_in_code_blocks_and_inline_spans(tmp_path):
    sample = tmp_path / "sample.md"
    sample.write_text("```bash\n$ intentrank eval d \\\n    --bogus 1   # a comment\n```\n"
                      "Run `intentrank\nserve` or `nice -n 10 .venv/bin/python bench/x.py -v`;\n"
                      "`bash setup.sh && intentrank quickstart`, not `intentrank` alone.\n")
    assert [(c.line, t) for c, t in extract(sample, "sample.md")] == [
        (2, ["intentrank", "eval", "d", "--bogus", "1"]),
        (5, ["intentrank", "serve"]),
        (6, [".venv/bin/python", "bench/x.py", "-v"]),
        (7, ["intentrank", "quickstart"]),
    ]
    assert sum(len(extract(p)) for p in DOCS) > 200  # the docs show many commands
