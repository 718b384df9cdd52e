"""Which steps of the benchmarks a run needs are stale, and running them.

A :class:`Workspace` is where steps run: the repository root (steps are run from it, with
``python`` as this interpreter and ``intentrank`` as the command line the caller gives, by
default the console script beside this interpreter; no shell),
the ``{data}`` and ``{cache}`` placeholders and the record of the steps that ran there
(``.cache/bench/state.json``: each step's command and when it last finished).

:func:`plan` lists the steps of some benchmarks and of everything they require, in
dependency order, and decides for each whether it runs and why. A step runs when

- ``force`` covers it (the named benchmarks' steps; their prerequisites only when stale);
- one of its outputs is missing (a ``FILE#NAME`` output: FILE lacks that section's markers);
- an earlier step of the plan runs and writes one of its inputs;
- its command changed since it last ran here;
- an input is newer than its outputs: a file's time is its mtime, a folder's the newest
  mtime of the files in it (hidden ones left out: index locks), a glob's its newest match,
  a section's the first ``YYYY-MM-DD HH:MM UTC`` in it (the date line of the header the
  bench scripts write), else its file's mtime; the outputs' time is the oldest of theirs,
  or the time the step last finished with the same command, whichever is later (a step
  may leave an output untouched when it finds it already made, e.g. an index reused).

A step that must run but reads an input that is missing and that no earlier step makes is
*blocked*: :func:`run_plan` refuses the whole plan before running anything. It runs the
other stale steps in order, their output streamed, and stops at the first that fails
(:class:`StepFailed` names it) or that exits 0 without writing every output it lists.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from intentrank.data.readers import atomic_write
from intentrank.errors import ConfigError, IntentrankError
from intentrank.eval.benchmarks import Spec, Step, split_section
from intentrank.paths import DEFAULT_DATA_DIR, default_data_dir
from intentrank.report.sections import docs_sections, markers, write_docs_section

DEFAULT_CACHE = ".cache/intentrank"  # the cache the bench scripts use (bench/lib/results.py)
STATE_FILE = ".cache/bench/state.json"
TREES_DIR = ".cache/bench/trees"  # an archived benchmark's commit, extracted (git archive)
LINKED = ("indexes", "runs")  # what a commit's tree shares with the root (not in git)


class StepFailed(IntentrankError):
    """A step exited with an error, or did not write what it lists; the steps after it did
    not run."""


def find_root(start: str | Path = ".") -> Path:
    """The repository root at or above ``start``: a folder with ``bench/`` and
    ``pyproject.toml``."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / "bench").is_dir() and (folder / "pyproject.toml").is_file():
            return folder
    raise ConfigError(f"no intentrank checkout at or above {start} (a folder holding bench/ "
                      f"and pyproject.toml): benchmarks run from the repository; give --root")


@dataclass
class Workspace:
    """Where steps run and what the placeholders stand for."""

    root: Path
    data: str = str(DEFAULT_DATA_DIR)
    cache: str = DEFAULT_CACHE
    intentrank: tuple[str, ...] = ()  # how to start the command line (default: the script)
    _times: dict[str, float | None] = field(default_factory=dict, repr=False)

    @classmethod
    def at(cls, root: str | Path, environ: Mapping[str, str] = os.environ,
           intentrank: tuple[str, ...] = ()) -> Workspace:
        """The workspace of ``root``: ``{data}`` is $INTENTRANK_DATA, else ../shared/data;
        ``{cache}`` is $INTENTRANK_CACHE, else .cache/intentrank."""
        return cls(Path(root).resolve(), str(default_data_dir(environ)),
                   environ.get("INTENTRANK_CACHE") or DEFAULT_CACHE, intentrank)

    def expand(self, text: str) -> str:
        return text.replace("{data}", self.data).replace("{cache}", self.cache)

    def path(self, written: str) -> Path:
        """The file or folder a path of the spec names (a section: its file)."""
        file, _ = split_section(self.expand(written))
        return self.root / file  # an absolute path stays itself

    def argv(self, step: Step) -> list[str]:
        """The process to start: placeholders expanded word by word, no shell."""
        words = [self.expand(w) for w in step.argv]
        if words[0] != "intentrank":
            return [sys.executable, *words[1:]]
        if self.intentrank:
            return [*self.intentrank, *words[1:]]
        script = Path(sys.executable).with_name("intentrank")
        found = str(script) if script.is_file() else shutil.which("intentrank")
        if found is None:
            raise ConfigError(f"{step.id}: cannot find the intentrank command beside "
                              f"{sys.executable} or on PATH")
        return [found, *words[1:]]

    def shown(self, step: Step) -> str:
        """The command as the plan shows it (placeholders expanded; an archived benchmark's
        with the commit it runs at)."""
        return self.expand(step.command) + (f"  (at {step.revision})" if step.revision else "")

    def env(self, tree: Path | None = None) -> dict[str, str]:
        """The steps' environment: the bench cache; in a commit's ``tree``, the root's data
        folder and the tree's package first."""
        env = {**os.environ, "INTENTRANK_CACHE": str(self.root / self.cache)}
        if tree is not None:  # the data and the package where the root has them
            env["INTENTRANK_DATA"] = str((self.root / self.data).resolve())
            env["PYTHONPATH"] = os.pathsep.join(
                [str(tree / "src"), *filter(None, [env.get("PYTHONPATH")])])
        return env

    def tree(self, revision: str) -> Path:
        """The repository as it was at ``revision`` (extracted once by ``git archive`` into
        .cache/bench/trees/), sharing the root's indexes/ and runs/: where the steps of an
        archived benchmark run, its scripts and package as they were when it was measured."""
        tree = self.root / TREES_DIR / revision
        if not (tree / ".extracted").exists():
            shutil.rmtree(tree, ignore_errors=True)
            tree.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(self.root), "archive", revision],
                                     capture_output=True, check=False)
            if archive.returncode != 0:
                raise ConfigError(
                    f"cannot extract commit {revision} of {self.root} (git archive: "
                    f"{archive.stderr.decode(errors='replace').strip()}); an archived "
                    f"benchmark needs the repository's history (not a shallow clone)")
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(tree, filter="data")
            (tree / ".extracted").touch()
        for name in LINKED:
            if (self.root / name).exists() and not (tree / name).exists():
                (tree / name).symlink_to(self.root / name)
        return tree

    def bring_back(self, step: Step, tree: Path) -> None:
        """Copy what an archived step wrote in its commit's tree to the root: its files and
        folders (not those under the shared indexes/ and runs/) and its sections."""
        for written in step.outputs:
            file, section = split_section(self.expand(written))
            if Path(file).is_absolute() or Path(file).parts[0] in LINKED:
                continue
            made, there = tree / file, self.root / file
            if section is not None:
                found = docs_sections(made.read_text(encoding="utf-8")) if made.exists() \
                    else {}
                if section in found:
                    write_docs_section(there, section, found[section])
            elif made.is_dir():
                shutil.copytree(made, there, dirs_exist_ok=True)
            elif made.exists():
                there.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(made, there)

    # -- times ------------------------------------------------------------------------------

    def time(self, written: str) -> float | None:
        """When a path of the spec last changed (None: missing); remembered until
        :meth:`forget`."""
        if written not in self._times:
            self._times[written] = self._time(written)
        return self._times[written]

    def forget(self) -> None:
        self._times.clear()

    def _time(self, written: str) -> float | None:
        file, section = split_section(self.expand(written))
        if glob.has_magic(file):
            found = [_mtime(Path(p)) for p in glob.glob(str(self.root / file))]
            return max((t for t in found if t is not None), default=None)
        path = self.root / file
        return _mtime(path) if section is None else _section_time(path, section)

    # -- what ran here ----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.root / STATE_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def record(self, step: Step) -> None:
        """Note that ``step`` finished now with its current command."""
        state = self.state()
        state[step.id] = {"command": self.shown(step), "finished": time.time()}
        path = self.root / STATE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(state, indent=1, sort_keys=True) + "\n")


_DATE = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")


def _section_time(path: Path, section: str) -> float | None:
    """When a section was written: the first ``YYYY-MM-DD HH:MM UTC`` in it (the date line
    bench/lib/results.py's header writes), else its file's mtime; None when it is not there."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    start, end = markers(section)
    if start not in text or end not in text:
        return None
    body = text[text.index(start):text.index(end)]
    found = _DATE.search(body)
    if found is None:
        return path.stat().st_mtime
    return datetime.strptime(found.group(), "%Y-%m-%d %H:%M UTC").replace(tzinfo=UTC).timestamp()


def _mtime(path: Path) -> float | None:
    """A file's mtime; a folder's newest file's (hidden files and folders left out), or its
    own when it holds none; None when missing."""
    try:
        own = path.stat().st_mtime
    except OSError:
        return None
    if not path.is_dir():
        return own
    times = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith("."):
                with contextlib.suppress(OSError):
                    times.append(os.stat(os.path.join(folder, name)).st_mtime)
    return max(times, default=own)


# -- the plan ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlannedStep:
    step: Step
    run: bool
    reason: str  # why it runs, or "up to date"
    blocked: str = ""  # why it cannot run (an input missing that no earlier step makes)


def _norm(ws: Workspace, written: str) -> str:
    file, section = split_section(ws.expand(written))
    file = os.path.normpath(file)
    return f"{file}#{section}" if section else file


def _overlaps(written: str, made: str) -> bool:
    """Does the input ``written`` read what ``made`` (an output) writes? The same path, one
    inside the other, or a glob matching it."""
    if glob.has_magic(written):
        return fnmatch.fnmatch(made, written) or fnmatch.fnmatch(made, written + "/*")
    if "#" in written or "#" in made:
        return written == made
    return written == made or made.startswith(written + "/") or written.startswith(made + "/")


def plan(spec: Spec, names: list[str] | tuple[str, ...], ws: Workspace,
         force: bool = False) -> list[PlannedStep]:
    """Every step of ``names`` and of what they require, in dependency order, each marked
    to run or not and why (``force``: the named benchmarks' steps run anyway)."""
    state = ws.state()
    producers = spec.producers()
    made: dict[str, str] = {}  # normalised output -> id of the earlier step that rewrites it
    planned = []
    for benchmark in spec.order(names):
        forced = force and benchmark.name in names
        for step in benchmark.steps:
            decided = _decide(step, ws, state.get(step.id), made, forced, producers)
            planned.append(decided)
            if decided.run:
                for out in step.outputs:
                    made[_norm(ws, out)] = step.id
    return planned


def _decide(step: Step, ws: Workspace, last: dict[str, Any] | None, made: dict[str, str],
            forced: bool, producers: dict[str, Step]) -> PlannedStep:
    rebuilt = next(((i, made[m]) for i in step.inputs for m in made
                    if _overlaps(_norm(ws, i), m)), None)
    if step.stored_section and not forced and rebuilt is None:
        return PlannedStep(step, *_stored_state(step, ws))
    missing_in = [i for i in step.inputs if ws.time(i) is None
                  and not any(_overlaps(_norm(ws, i), m) for m in made)]
    missing_out = [o for o in step.outputs if ws.time(o) is None]
    same_command = last is not None and last.get("command") == ws.shown(step)
    reason = ""
    if forced:
        reason = "forced (--force)"
    elif missing_out:
        reason = f"output {missing_out[0]} is missing"
    elif rebuilt is not None:
        reason = f"input {rebuilt[0]} is rewritten by {rebuilt[1]} first"
    elif last is not None and not same_command:
        reason = f"its command changed since it last ran here (was: {last.get('command')})"
    else:
        outputs = [t for t in (ws.time(o) for o in step.outputs) if t is not None]
        finished = float(last.get("finished", 0)) if same_command and last else 0.0
        since = max(min(outputs), finished)
        newer = [i for i in step.inputs if (ws.time(i) or 0) > since]
        if newer:
            reason = f"input {newer[0]} is newer than its outputs"
    if not reason:
        note = f" (input {missing_in[0]} is missing: not checked)" if missing_in else ""
        return PlannedStep(step, False, "up to date" + note)
    blocked = ""
    if missing_in:
        blocked = f"input {missing_in[0]} is missing and no earlier step makes it"
        maker = producers.get(missing_in[0])
        if maker is not None and maker.benchmark != step.benchmark:
            blocked += (f" (it is an output of {maker.id}: run {maker.benchmark!r} first, or "
                        f"add it to {step.benchmark}'s requires)")
    return PlannedStep(step, True, reason, blocked)


def _stored_state(step: Step, ws: Workspace) -> tuple[bool, str]:
    """A stored section's render step runs when the section differs from what its stored
    result and template render (not by file times: a checkout sets those)."""
    from intentrank.report import sections

    try:
        body = sections.rendered(ws.root, step.stored_section)
    except (OSError, ValueError) as exc:
        return True, f"its stored result cannot be rendered ({exc})"
    file, _ = split_section(ws.expand(step.outputs[0]))
    try:
        current = sections.docs_sections((ws.root / file).read_text(encoding="utf-8"))
    except OSError:
        current = {}
    if current.get(step.stored_section) == body:
        return False, "up to date"
    return True, f"{step.outputs[0]} differs from its stored result"


def status(spec: Spec, name: str, ws: Workspace) -> str:
    """One benchmark's state in a few words, its prerequisites included."""
    steps = plan(spec, [name], ws)
    stale = [p for p in steps if p.run]
    if not stale:
        return "up to date"
    blocked = " (blocked: an input is missing)" if any(p.blocked for p in stale) else ""
    return f"stale: {len(stale)} of {len(steps)} step(s) to run{blocked}"


# -- running ----------------------------------------------------------------------------------

def run_plan(planned: list[PlannedStep], ws: Workspace,
             say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)
             ) -> int:
    """Run the steps marked to run, in order, from the repository root (their output goes
    straight to this process's stdout and stderr); returns how many ran. Refuses a plan with
    a blocked step before running anything; stops at the first step that fails."""
    blocked = [p for p in planned if p.run and p.blocked]
    if blocked:
        raise ConfigError(f"cannot run {blocked[0].step.id}: {blocked[0].blocked}; nothing "
                          f"was run")
    todo = [p for p in planned if p.run]
    for n, p in enumerate(todo, 1):
        say(f"==> [{n}/{len(todo)}] {p.step.id} ({p.reason}): {ws.shown(p.step)}")
        start = time.perf_counter()
        tree = ws.tree(p.step.revision) if p.step.revision else None
        try:
            code = subprocess.run(ws.argv(p.step), cwd=tree or ws.root, env=ws.env(tree),
                                  check=False).returncode
        except OSError as exc:
            raise StepFailed(f"step {p.step.id} could not start ({exc.strerror or exc}): "
                             f"{ws.shown(p.step)}") from None
        if tree is not None and code == 0:
            ws.bring_back(p.step, tree)
        left = f"; the {len(todo) - n} step(s) after it did not run" if n < len(todo) else ""
        if code != 0:
            raise StepFailed(f"step {p.step.id} failed (exit status {code}): "
                             f"{ws.shown(p.step)}{left}")
        ws.forget()
        unwritten = [o for o in p.step.outputs if ws.time(o) is None]
        if unwritten:
            raise StepFailed(f"step {p.step.id} exited 0 but did not write {unwritten[0]}, "
                             f"which the spec lists as its output{left}")
        ws.record(p.step)
        say(f"    {p.step.id} done in {time.perf_counter() - start:.1f} s")
    return len(todo)
