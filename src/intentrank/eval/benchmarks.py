"""Benchmarks as data: the spec file that names every benchmark, its steps, what
each step reads and writes, what it needs first and the docs/benchmarks.md section it fills.

The shipped spec is ``src/intentrank/benchmarks.yaml`` (its header documents the format).
:func:`load_spec` reads and checks it: every mistake is a :class:`BenchmarkSpecError` naming
the file, the benchmark and the field. :meth:`Spec.order` puts benchmarks after what they
require, refusing cycles. Planning which steps are stale and running them is
:mod:`intentrank.eval.bench_runs`; ``intentrank bench`` (``cli/bench.py``) is the command.
"""

from __future__ import annotations

import glob
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from intentrank.errors import ConfigError
from intentrank.report.sections import DOCS_FILE, RESULTS_DIR, TEMPLATES_DIR

SPEC_FILE = Path(__file__).resolve().parents[1] / "benchmarks.yaml"
PROGRAMS = ("intentrank", "python")
PLACEHOLDERS = ("data", "cache")
RENDER_KEYWORDS = ("stored", "step", "hand")  # section.render: from its stored results /
# a step writes it / written by hand
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
SECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_BENCHMARK_KEYS = ("description", "requires", "steps", "section", "notes", "revision")
REVISION = re.compile(r"^[0-9a-f]{7,40}$")  # a git commit, full or abbreviated
_STEP_KEYS = ("command", "inputs", "outputs")
_SECTION_KEYS = ("name", "render", "inputs")


class BenchmarkSpecError(ConfigError):
    """A benchmark spec that cannot be used; names the file, benchmark and field."""


@dataclass(frozen=True)
class Step:
    """One command of a benchmark, as written (placeholders unexpanded)."""

    benchmark: str
    id: str  # "<benchmark>#<n>" (1-based) or "<benchmark>#render"
    command: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    stored_section: str = ""  # a render step of stored results: the section it renders
    revision: str = ""  # an archived benchmark's step: the commit whose tree it runs in

    @property
    def argv(self) -> list[str]:
        """The command's words (shell quoting, no shell)."""
        return shlex.split(self.command)


@dataclass(frozen=True)
class Section:
    """The docs/benchmarks.md section a benchmark fills and how: ``render`` is a command, or
    ``stored`` (rendered from ``bench/results/<name>.json`` and ``bench/sections/<name>.md``,
    which a step writes, by ``intentrank bench BENCHMARK --render``), ``step`` (one of the
    steps writes it) or ``hand`` (edited by hand from the outputs)."""

    name: str
    render: str

    @property
    def output(self) -> str:
        return section_output(self.name)

    @property
    def stored(self) -> tuple[str, str]:
        """Its stored result and template (for ``render: stored``)."""
        return f"{RESULTS_DIR}/{self.name}.json", f"{TEMPLATES_DIR}/{self.name}.md"


@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    steps: tuple[Step, ...]  # a render command is the last step, ``<name>#render``
    requires: tuple[str, ...] = ()
    section: Section | None = None
    notes: str = ""
    revision: str = ""  # archived: its steps run in the tree of this commit


@dataclass(frozen=True)
class Spec:
    benchmarks: dict[str, Benchmark]  # in file order
    source: str

    def order(self, names: list[str] | tuple[str, ...]) -> list[Benchmark]:
        """``names`` and everything they require, each once, every benchmark after the ones
        it requires (requirements in the order written, then the benchmark)."""
        unknown = [n for n in names if n not in self.benchmarks]
        if unknown:
            raise BenchmarkSpecError(
                f"unknown benchmark(s) {', '.join(map(repr, unknown))} (known: "
                f"{', '.join(self.benchmarks)}; `intentrank bench --list` describes them)")
        done: dict[str, Benchmark] = {}
        path: list[str] = []

        def visit(name: str) -> None:
            if name in done:
                return
            if name in path:
                cycle = path[path.index(name):] + [name]
                raise BenchmarkSpecError(f"{self.source}: requires cycle: "
                                         + " -> ".join(cycle))
            path.append(name)
            for required in self.benchmarks[name].requires:
                visit(required)
            path.pop()
            done[name] = self.benchmarks[name]

        for name in names:
            visit(name)
        return list(done.values())

    def steps(self) -> list[Step]:
        return [s for b in self.benchmarks.values() for s in b.steps]

    def producers(self) -> dict[str, Step]:
        """Output (as written) -> the first step that writes it."""
        made: dict[str, Step] = {}
        for step in self.steps():
            for out in step.outputs:
                made.setdefault(out, step)
        return made


def section_output(name: str) -> str:
    """How a step lists a section as an output: ``docs/benchmarks.md#NAME``."""
    return f"{DOCS_FILE}#{name}"


def split_section(path: str) -> tuple[str, str | None]:
    """``FILE#NAME`` -> (FILE, NAME); a plain path -> (path, None)."""
    file, _, name = path.partition("#")
    return file, name or None


# -- loading and checking ----------------------------------------------------------------------

class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (a benchmark defined
    twice would otherwise silently replace the first)."""


def _no_duplicates(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
                   ) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise BenchmarkSpecError(f"line {key_node.start_mark.line + 1}: key {key!r} given "
                                     f"twice")
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_spec(path: str | Path | None = None) -> Spec:
    """Read and check a benchmark spec (default: the shipped ``benchmarks.yaml``)."""
    path = Path(path) if path is not None else SPEC_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchmarkSpecError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except BenchmarkSpecError as exc:
        raise BenchmarkSpecError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise BenchmarkSpecError(f"{path}: not valid YAML ({exc})") from None
    return parse_spec(data, str(path))


def parse_spec(data: Any, source: str = "<spec>") -> Spec:
    """Check a spec given as parsed YAML and return it."""
    if not isinstance(data, dict) or set(data) != {"benchmarks"}:
        raise BenchmarkSpecError(f"{source}: expected one top-level key 'benchmarks' (a "
                                 f"mapping of benchmark names to entries)")
    entries = data["benchmarks"]
    if not isinstance(entries, dict) or not entries:
        raise BenchmarkSpecError(f"{source}: 'benchmarks' must be a non-empty mapping")
    spec = Spec({name: _benchmark(name, entry, source) for name, entry in entries.items()},
                source)
    _check_links(spec)
    return spec


def _where(source: str, name: str, field: str = "") -> str:
    return f"{source}: benchmark {name!r}" + (f": {field}" if field else "")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BenchmarkSpecError(f"{where}: expected a non-empty string, got {value!r}")
    return " ".join(value.split())


def _paths(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip()
                                              for p in value):
        raise BenchmarkSpecError(f"{where}: expected a list of paths, got {value!r}")
    for p in value:
        _check_placeholders(p, where)
    return tuple(p.strip() for p in value)


def _check_placeholders(text: str, where: str) -> None:
    bad = [m for m in _PLACEHOLDER.findall(text) if m not in PLACEHOLDERS]
    if bad:
        raise BenchmarkSpecError(f"{where}: unknown placeholder {{{bad[0]}}} in {text!r} "
                                 f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")


def _command(value: Any, where: str) -> str:
    command = _text(value, where)
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise BenchmarkSpecError(f"{where}: cannot split {command!r} into words ({exc})") \
            from None
    if not words or words[0] not in PROGRAMS:
        raise BenchmarkSpecError(f"{where}: a command starts with `intentrank` or `python` "
                                 f"(run without a shell), got {command!r}")
    _check_placeholders(command, where)
    return command


def _known(entry: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(entry) - set(keys))
    if unknown:
        raise BenchmarkSpecError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                                 f"(known: {', '.join(keys)})")


def _benchmark(name: Any, entry: Any, source: str) -> Benchmark:
    if not isinstance(name, str) or not NAME.match(name) or name == "all":
        raise BenchmarkSpecError(f"{source}: benchmark name {name!r}: use lower-case letters, "
                                 f"digits, '.', '_' and '-' ('all' is taken)")
    if not isinstance(entry, dict):
        raise BenchmarkSpecError(f"{_where(source, name)}: expected a mapping, got {entry!r}")
    _known(entry, _BENCHMARK_KEYS, _where(source, name))
    if "description" not in entry:
        raise BenchmarkSpecError(f"{_where(source, name)}: 'description' is missing")
    description = _text(entry["description"], _where(source, name, "description"))
    requires = entry.get("requires") or []
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise BenchmarkSpecError(f"{_where(source, name, 'requires')}: expected a list of "
                                 f"benchmark names, got {requires!r}")
    raw_steps = entry.get("steps") or []
    if not isinstance(raw_steps, list):
        raise BenchmarkSpecError(f"{_where(source, name, 'steps')}: expected a list of steps")
    steps = [_step(name, i, s, source) for i, s in enumerate(raw_steps)]
    section = None
    if entry.get("section") is not None:
        section, render_step = _section(name, entry["section"], steps, source)
        if render_step is not None:
            steps.append(render_step)
    if not steps:
        raise BenchmarkSpecError(f"{_where(source, name)}: nothing to run (give 'steps' or a "
                                 f"section with a render command)")
    notes = _text(entry["notes"], _where(source, name, "notes")) if entry.get("notes") else ""
    revision = _revision(entry.get("revision"), _where(source, name, "revision"))
    if revision:  # every step but the render of stored results, which is today's code's
        steps = [s if s.stored_section else replace(s, revision=revision) for s in steps]
    return Benchmark(name, description, tuple(steps), tuple(requires), section, notes,
                     revision)


def _revision(value: Any, where: str) -> str:
    """An archived benchmark's commit (a script no longer in the tree runs in its own)."""
    if value is None:
        return ""
    if not isinstance(value, str) or not REVISION.match(value):
        raise BenchmarkSpecError(f"{where}: expected a git commit (7 to 40 hex digits, in "
                                 f"quotes), got {value!r}")
    return value


def _step(name: str, i: int, entry: Any, source: str) -> Step:
    where = _where(source, name, f"steps[{i}]")
    if not isinstance(entry, dict):
        raise BenchmarkSpecError(f"{where}: expected a mapping with command, inputs and "
                                 f"outputs, got {entry!r}")
    _known(entry, _STEP_KEYS, where)
    if "command" not in entry:
        raise BenchmarkSpecError(f"{where}: 'command' is missing")
    command = _command(entry["command"], f"{where}.command")
    outputs = _paths(entry.get("outputs"), f"{where}.outputs")
    if not outputs:
        raise BenchmarkSpecError(f"{where}.outputs: a step lists what it writes (at least "
                                 f"one file, folder or {DOCS_FILE}#SECTION)")
    globbed = [o for o in outputs if glob.has_magic(o)]
    if globbed:
        raise BenchmarkSpecError(f"{where}.outputs: {globbed[0]!r}: an output is a path, "
                                 f"not a pattern")
    return Step(name, f"{name}#{i + 1}", command, _paths(entry.get("inputs"),
                                                         f"{where}.inputs"), outputs)


def _section(name: str, entry: Any, steps: list[Step], source: str
             ) -> tuple[Section, Step | None]:
    where = _where(source, name, "section")
    if not isinstance(entry, dict):
        raise BenchmarkSpecError(f"{where}: expected {{name, render}}, got {entry!r}")
    _known(entry, _SECTION_KEYS, where)
    missing = [k for k in ("name", "render") if k not in entry]
    if missing:
        raise BenchmarkSpecError(f"{where}: {missing[0]!r} is missing")
    section_name = entry["name"]
    if not isinstance(section_name, str) or not SECTION_NAME.match(section_name):
        raise BenchmarkSpecError(f"{where}.name: {section_name!r} is not a section name (the "
                                 f"NAME of <!-- NAME:start -->)")
    render = _text(entry["render"], f"{where}.render")
    section = Section(section_name, render)
    if render == "stored":
        if "inputs" in entry:
            raise BenchmarkSpecError(f"{where}.inputs: a stored section's inputs are its "
                                     f"stored result and template")
        result, template = section.stored
        if not any(result in s.outputs for s in steps):
            raise BenchmarkSpecError(f"{where}.render: 'stored', but no step lists {result} "
                                     f"among its outputs")
        return section, Step(name, f"{name}#render", f"intentrank bench {name} --render",
                             (result, template), (section.output,), stored_section=section_name)
    if render in RENDER_KEYWORDS:
        if "inputs" in entry:
            raise BenchmarkSpecError(f"{where}.inputs: only a render command has inputs")
        if render == "step" and not any(section.output in s.outputs for s in steps):
            raise BenchmarkSpecError(f"{where}.render: 'step', but no step lists "
                                     f"{section.output} among its outputs")
        return section, None
    command = _command(render, f"{where}.render")
    if "inputs" in entry:
        inputs = _paths(entry["inputs"], f"{where}.inputs")
    else:  # what the benchmark's steps wrote
        inputs = tuple(dict.fromkeys(o for s in steps for o in s.outputs
                                     if split_section(o)[1] is None))
    return section, Step(name, f"{name}#render", command, inputs, (section.output,))


def _check_links(spec: Spec) -> None:
    """Requirements name benchmarks and form no cycle; no two benchmarks write one output."""
    for b in spec.benchmarks.values():
        for required in b.requires:
            if required not in spec.benchmarks:
                raise BenchmarkSpecError(f"{_where(spec.source, b.name, 'requires')}: "
                                         f"{required!r} is not a benchmark")
            if required == b.name:
                raise BenchmarkSpecError(f"{_where(spec.source, b.name, 'requires')}: a "
                                         f"benchmark cannot require itself")
    spec.order(list(spec.benchmarks))  # refuses a cycle
    writer = spec.producers()
    for step in spec.steps():
        for out in step.outputs:
            if (first := writer[out]).benchmark != step.benchmark:
                raise BenchmarkSpecError(
                    f"{spec.source}: {out} is an output of both {first.id} and {step.id}; "
                    f"one benchmark makes each output (another one requires it)")
