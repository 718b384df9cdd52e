"""Every command printed in README.md and docs/*.md parses against today's CLI and scripts
(issue 38): the ``intentrank`` subcommand exists and takes every option given (global options
before it), a ``bench/*.py`` script exists and its argparse parser (and subcommand) takes every
option given, a ``python -m intentrank...`` module is runnable (and its parser, if it has one,
takes the options). Nothing is run and no model is loaded: the options come from the typer
app's click commands and from the scripts' parsers, caught as their ``main`` builds them.

A command is a line of a fenced code block, or an inline code span, that starts with
``intentrank``, ``.venv/bin/intentrank``, ``python bench/...``, ``.venv/bin/python bench/...``
or ``python -m intentrank...`` (after ``$ ``, ``VAR=value`` and ``nice -n N``). Lines ending in
``\\`` are joined, ``# comments`` dropped, and ``&&``/``;``/``|`` separate commands. ``...``
where the subcommand goes stands for the rest of the command, elsewhere for an argument;
``[--opt value]`` is an optional part and is checked.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from bench_helpers import BENCH, load_bench

from intentrank.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Commands shown on purpose with an option that does not exist (the error they print is the
# point): (document, option).
INTENDED_BAD = {("docs/reliability.md", "--bogus")}

FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
SEPARATORS = {"&&", "||", ";", "|"}
NEGATIVE_NUMBER = re.compile(r"^-\.?\d")


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


# -- the intentrank CLI (click) ---------------------------------------------------------------

GROUP = typer.main.get_command(app)


def _click_options(command) -> dict:
    """Option name -> click option (typer vendors click: typed by duck, not by class)."""
    params = command.get_params(command.context_class(command))
    return {name: p for p in params if p.param_type_name == "option"
            for name in (*p.opts, *p.secondary_opts)}


def _option_name(token: str, options: dict) -> str | None:
    """The option a token names (``--x=1``, ``-k5``), or None when unknown."""
    name = token.split("=", 1)[0]
    if name in options:
        return name
    if not token.startswith("--") and token[:2] in options:  # -k5
        return token[:2]
    return None


def _unbracket(token: str) -> str:
    """``[--llm`` and ``value]`` of an optional part ``[--llm value]``."""
    if token.startswith("[-"):
        token = token[1:]
    return token[:-1] if token.endswith("]") and "[" not in token else token


def _check_click(tokens: list[str]) -> list[str]:
    errors: list[str] = []
    command = GROUP
    options = _click_options(GROUP)
    i = 0
    while i < len(tokens):
        token = _unbracket(tokens[i])
        i += 1
        if token == "--" or (token == "..." and command is GROUP):  # the rest is not shown
            break
        if token.startswith("-") and len(token) > 1 and not NEGATIVE_NUMBER.match(token):
            name = _option_name(token, options)
            if name is None:
                where = "before the subcommand" if command is GROUP else command.name
                errors.append(f"no option {token.split('=', 1)[0]} ({where})")
                continue
            param = options[name]
            if name == token and not (param.is_flag or param.count):
                i += 1  # its value
            continue
        if command is GROUP:
            if token not in GROUP.commands:
                errors.append(f"no subcommand {token!r}")
                break
            command = GROUP.commands[token]
            options = _click_options(command)
    return errors


# -- bench scripts and python -m modules (argparse) -------------------------------------------

class _Parser(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser built")
        self.parser = parser


_PARSERS: dict[str, argparse.ArgumentParser | str | None] = {}  # by script or -m module


def _catch_parser(main) -> argparse.ArgumentParser | str:
    """The parser ``main()`` builds, caught when it parses (before any work)."""
    def caught(self, *args, **kwargs):
        raise _Parser(self)

    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_args = caught
    argparse.ArgumentParser.parse_known_args = caught
    try:
        main()
    except _Parser as built:
        return built.parser
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = saved
    return "main() returned without parsing arguments"


def _script_parser(script: str) -> argparse.ArgumentParser | str:
    if script not in _PARSERS:
        path = ROOT / script
        if path.parent != BENCH or path.suffix != ".py":
            _PARSERS[script] = f"not a script of bench/: {script}"
        elif not path.is_file():
            _PARSERS[script] = f"no script {script}"
        else:
            module = load_bench(path.stem)
            _PARSERS[script] = (_catch_parser(module.main) if hasattr(module, "main")
                                else f"{script} has no main()")
    return _PARSERS[script]


def _module_parser(name: str) -> argparse.ArgumentParser | str | None:
    """The parser of ``python -m name``; None for the CLI itself (checked as ``intentrank``)."""
    key = f"-m {name}"
    if key not in _PARSERS:
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            _PARSERS[key] = f"no module {name}"
        elif spec.submodule_search_locations is not None:  # a package: needs __main__
            if importlib.util.find_spec(f"{name}.__main__") is None:
                _PARSERS[key] = f"{name} is a package without __main__ (not runnable)"
            else:
                _PARSERS[key] = None
        else:
            module = importlib.import_module(name)
            _PARSERS[key] = (_catch_parser(module.main) if hasattr(module, "main")
                             else f"{name} has no main()")
    return _PARSERS[key]


def _argparse_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {name: action for action in parser._actions for name in action.option_strings}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def _check_argparse(parser: argparse.ArgumentParser, tokens: list[str]) -> list[str]:
    errors: list[str] = []
    options = _argparse_options(parser)
    subparsers = _subparsers(parser)
    where = "the script"
    i = 0
    while i < len(tokens):
        token = _unbracket(tokens[i])
        i += 1
        if token == "--" or (token == "..." and subparsers is not None):  # the rest not shown
            break
        if token.startswith("-") and len(token) > 1 and not NEGATIVE_NUMBER.match(token):
            name = _option_name(token, options)
            if name is None:
                errors.append(f"no option {token.split('=', 1)[0]} ({where})")
                continue
            if name == token and options[name].nargs != 0 and subparsers is not None:
                i += 1  # the value of an option given before the subcommand
            continue
        if subparsers is not None:  # the first positional names the subcommand
            if token not in subparsers:
                errors.append(f"no subcommand {token!r} (one of {sorted(subparsers)})")
                break
            parser = subparsers[token]
            options, subparsers, where = _argparse_options(parser), None, token
    return errors


# -- the checks -------------------------------------------------------------------------------

def check(tokens: list[str]) -> list[str]:
    """What is wrong with one command, given as tokens (empty when it parses)."""
    if tokens[0].endswith("intentrank"):
        return _check_click(tokens[1:])
    if tokens[1] == "-m":
        parser = _module_parser(tokens[2])
        if parser is None:
            return _check_click(tokens[3:])
    else:
        parser = _script_parser(tokens[1])
    if isinstance(parser, str):
        return [parser]
    return _check_argparse(parser, tokens[3:] if tokens[1] == "-m" else tokens[2:])


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
