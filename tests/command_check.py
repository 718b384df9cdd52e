"""Whether one command line parses against today's CLI and scripts, without running it
(shared by tests/test_docs_commands.py, which checks the commands the docs print, and
tests/test_bench_entry.py, which checks the benchmark spec's steps).

:func:`check` takes a command as words: an ``intentrank`` subcommand must exist and take every
option given (global options before it); a ``bench/*.py`` script must exist and its argparse
parser (and subcommand) take every option given; a ``python -m intentrank...`` module must be
runnable (and its parser, if it has one, take the options). The options come from the typer
app's click commands and from the scripts' parsers, caught as their ``main`` builds them; a
script without ``main()`` (no parser to catch) passes when its docstring shows the same
arguments. ``...`` where the subcommand goes stands for the rest of the command, elsewhere
for an argument; ``[--opt value]`` is an optional part and is checked. A script of an archived
benchmark (``revision:`` in the benchmark spec; gone from bench/) is checked at that commit,
by that commit's own checker.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from bench_helpers import BENCH, load_bench

from intentrank.cli import app
from intentrank.eval.bench_runs import Workspace
from intentrank.eval.benchmarks import load_spec

ROOT = Path(__file__).resolve().parents[1]
NEGATIVE_NUMBER = re.compile(r"^-\.?\d")


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
        if hasattr(command, "commands"):  # the app, or a group of commands (`keys add`)
            if token not in command.commands:
                errors.append(f"no subcommand {token!r}")
                break
            command = command.commands[token]
            options = _click_options(command)
    return errors


# -- bench scripts and python -m modules (argparse) -------------------------------------------

class _Parser(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser built")
        self.parser = parser


_PARSERS: dict[str, argparse.ArgumentParser | frozenset | str | None] = {}  # by script/module


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


class Shown(frozenset):
    """The argument lists a script without ``main()`` shows in its docstring (its usage)."""


def shown_in_docstring(path: Path) -> Shown:
    """Every argument list that ``path``'s docstring shows after ``bench/<its name>``."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    shown = set()
    for line in doc.splitlines():
        try:
            lexer = shlex.shlex(line, posix=True)
            lexer.whitespace_split, lexer.commenters = True, "#"
            words = list(lexer)
        except ValueError:
            words = line.split("#", 1)[0].split()
        for i, word in enumerate(words):
            if word.strip("`") == f"bench/{path.name}":
                shown.add(tuple(w.strip("`") for w in words[i + 1:]))
    return Shown(shown)


def _script_parser(script: str) -> argparse.ArgumentParser | Shown | str:
    if script not in _PARSERS:
        path = ROOT / script
        if path.parent != BENCH or path.suffix != ".py":
            _PARSERS[script] = f"not a script of bench/: {script}"
        elif not path.is_file():
            _PARSERS[script] = f"no script {script}"
        else:
            module = load_bench(path.stem)
            _PARSERS[script] = (_catch_parser(module.main) if hasattr(module, "main")
                                else shown_in_docstring(path))
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


# -- scripts of archived benchmarks (run at their commit) -------------------------------------

_AT: dict[str, subprocess.Popen] = {}  # commit -> its own checker, reading commands on stdin
_CHECKER = ("import json, sys\nsys.path[:0] = ['tests']\nfrom command_check import check\n"
            "for line in sys.stdin:\n    print(json.dumps(check(json.loads(line))), flush=True)")


@functools.cache
def archived_scripts() -> dict[str, str]:
    """``bench/<script>.py`` -> the commit an archived benchmark of the spec runs it at."""
    return {s.argv[1]: s.revision for s in load_spec().steps()
            if s.revision and s.argv[0] == "python"}


def _check_at(revision: str, tokens: list[str]) -> list[str]:
    """The command checked against the scripts and CLI of ``revision``'s tree, by that
    commit's own checker (one process per commit)."""
    if revision not in _AT:
        if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                          capture_output=True, text=True).stdout.strip() == "true":
            pytest.skip(f"a shallow clone has no commit {revision} to check {tokens[1]} at")
        tree = Workspace.at(ROOT).tree(revision)
        _AT[revision] = subprocess.Popen(
            [sys.executable, "-c", _CHECKER], cwd=tree, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(tree / "src")})
    proc = _AT[revision]
    proc.stdin.write(json.dumps(tokens) + "\n")
    proc.stdin.flush()
    answer = proc.stdout.readline()
    return json.loads(answer) if answer else [f"the checker of commit {revision} stopped"]


# -- the checks -------------------------------------------------------------------------------

def check(tokens: list[str]) -> list[str]:
    """What is wrong with one command, given as tokens (empty when it parses)."""
    if tokens[0].endswith("intentrank"):
        return _check_click(tokens[1:])
    if tokens[1] == "-m":
        parser = _module_parser(tokens[2])
        if parser is None:
            return _check_click(tokens[3:])
    elif not (ROOT / tokens[1]).exists() and tokens[1] in archived_scripts():
        return _check_at(archived_scripts()[tokens[1]], tokens)
    else:
        parser = _script_parser(tokens[1])
    if isinstance(parser, str):
        return [parser]
    if isinstance(parser, Shown):
        args = tuple(tokens[2:])
        return [] if args in parser else [
            f"{tokens[1]} has no main() (no parser to check against) and its docstring does "
            f"not show `{' '.join(args)}` (it shows: "
            f"{'; '.join(' '.join(a) or '(no arguments)' for a in sorted(parser)) or 'none'})"]
    return _check_argparse(parser, tokens[3:] if tokens[1] == "-m" else tokens[2:])
