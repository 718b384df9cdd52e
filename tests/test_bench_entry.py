"""Benchmarks as data, one entry point (issue 38): the shipped benchmark spec loads, every
step's command parses against today's CLI and scripts, every input is made by a benchmark
the step's benchmark requires (or is data, or a file of the repository), the sections match
docs/benchmarks.md; and on hand-made specs: the checks name the benchmark and field, the
dependency order, cycles refused, staleness by mtime, ``--dry-run`` and real runs of cheap
``python -c`` steps (skipped when up to date, rerun with ``--force``, stopped at a failure).
No benchmark runs."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
import yaml
from command_check import check
from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.eval.bench_runs import Workspace, find_root, plan, run_plan, status
from intentrank.eval.benchmarks import (
    SPEC_FILE,
    BenchmarkSpecError,
    load_spec,
    parse_spec,
    section_output,
)

ROOT = Path(__file__).resolve().parents[1]
SPEC = load_spec()
runner = CliRunner()

# docs/benchmarks.md sections no benchmark rebuilds, and why (those that today's code cannot
# rebuild are in docs/archive/, issue 38).
NOT_COVERED: dict[str, str] = {}
# sections the spec fills that docs/benchmarks.md may not have yet (rendered on main)
NEW_SECTIONS: set[str] = set()
REPOSITORY_FILES = ("src/", "bench/", "docs/", "scripts/")


# -- the shipped spec ---------------------------------------------------------------------------

def test_the_shipped_spec_loads_and_covers_the_experiments_and_the_defaults():
    names = set(SPEC.benchmarks)
    experiments = {p.stem for p in (SPEC_FILE.parent / "experiments").glob("*.yaml")}
    covered = {w for s in SPEC.steps() for w in s.argv if s.argv[:2] == ["intentrank",
                                                                          "experiment"]}
    assert experiments - {"cascade-llm"} <= covered, "a shipped experiment is run by no step"
    assert {"shipped-pipelines", "cascade-variants", "cascade-ablation", "fuq",
            "reformulation", "coverage", "defaults"} <= names
    defaults = SPEC.benchmarks["defaults"]
    assert defaults.section.name == "defaults"
    assert defaults.steps[-1].command == "python bench/bench_defaults.py render"
    assert {"shipped-pipelines", "cascade-variants", "answers"} <= set(defaults.requires)
    # its render step reads what the required benchmarks write
    made = {o for b in SPEC.order(["defaults"])[:-1] for s in b.steps for o in s.outputs}
    assert {"runs/defaults/shipped-pipelines.json", "runs/defaults/cascade-variants.json"} \
        <= made
    order = [b.name for b in SPEC.order(["defaults"])]
    assert order[-1] == "defaults" and order.index("index-scifact") < order.index(
        "shipped-pipelines")


def _words(step) -> list[str]:
    return [Workspace(ROOT).expand(w) for w in step.argv]


@pytest.mark.parametrize("step", SPEC.steps(), ids=lambda s: s.id)
def test_every_step_parses_against_todays_cli_and_scripts(step):
    assert check(_words(step)) == [], f"{step.id}: {step.command}"


def _closure(name: str) -> list[str]:
    return [b.name for b in SPEC.order([name])]


def _made_by(path: str, benchmarks: list[str]) -> bool:
    pattern = re.compile("^" + re.escape(path).replace(r"\*", "[^/]*") + "(/.*)?$")
    return any(pattern.match(o) or path == o or path.startswith(o + "/")
               for b in benchmarks for s in SPEC.benchmarks[b].steps for o in s.outputs)


def test_every_input_is_data_a_repository_file_or_made_by_a_required_benchmark():
    """The issue: inputs made by no script. Each input is under {data}, a file of the
    repository, or written by a step of the benchmark itself or of one it requires."""
    orphans = []
    for b in SPEC.benchmarks.values():
        for step in b.steps:
            for path in step.inputs:
                if path.startswith("{data}/") or path.startswith(REPOSITORY_FILES) \
                        and not path.startswith("docs/ablation/"):
                    continue
                if not _made_by(path, _closure(b.name)):
                    orphans.append(f"{step.id}: {path}")
    assert not orphans, "inputs made by no required benchmark:\n" + "\n".join(orphans)


def test_the_sections_are_those_of_docs_benchmarks_md():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    in_docs = set(re.findall(r"<!-- ([\w.-]+):start -->", text))
    filled = {b.section.name for b in SPEC.benchmarks.values() if b.section}
    assert filled - in_docs <= NEW_SECTIONS, filled - in_docs
    assert in_docs - filled == set(NOT_COVERED) - filled, in_docs - filled


# -- hand-made specs ----------------------------------------------------------------------------

def _bench(**entry):
    return {"description": "d", **entry}


def _step(command="python -c pass", inputs=(), outputs=("out.txt",)):
    return {"command": command, "inputs": list(inputs), "outputs": list(outputs)}


@pytest.mark.parametrize("benchmarks, message", [
    ({"a": {"steps": [_step()]}}, r"benchmark 'a': 'description' is missing"),
    ({"a": _bench(steps=[_step()], colour="red")}, r"benchmark 'a': unknown key\(s\) 'colour'"),
    ({"a": _bench(steps=[_step("bash -c ls")])},
     r"'a': steps\[0\].command: a command starts with `intentrank` or `python`"),
    ({"a": _bench(steps=[_step(outputs=())])}, r"'a': steps\[0\].outputs: a step lists"),
    ({"a": _bench(steps=[_step(inputs=["{home}/x"])])},
     r"'a': steps\[0\].inputs: unknown placeholder \{home\}"),
    ({"a": _bench(steps=[_step(outputs=["runs/*.json"])])}, r"not a pattern"),
    ({"a": _bench(steps=[_step()], requires=["b"])}, r"'a': requires: 'b' is not a benchmark"),
    ({"a": _bench(steps=[_step()], section={"name": "x", "render": "step"})},
     r"'a': section.render: 'step', but no step lists docs/benchmarks.md#x"),
    ({"a": _bench(steps=[_step()], section={"name": "x", "render": "stored"})},
     r"'a': section.render: 'stored', but no step lists bench/results/x.json"),
    ({"a": _bench()}, r"'a': nothing to run"),
    ({"a": _bench(steps=[_step()]), "b": _bench(steps=[_step()])},
     r"out.txt is an output of both a#1 and b#1"),
    ({"All": _bench(steps=[_step()])}, r"benchmark name 'All'"),
    ({"a": _bench(steps=[_step()], revision="HEAD~1")},
     r"'a': revision: expected a git commit \(7 to 40 hex digits, in quotes\), got "
     r"'HEAD~1'"),
    ({"a": _bench(steps=[_step()], revision=1234567)}, r"revision: .*in quotes\), got 1234567"),
])
def test_spec_mistakes_name_the_benchmark_and_field(benchmarks, message):
    with pytest.raises(BenchmarkSpecError, match=message):
        parse_spec({"benchmarks": benchmarks}, "hand.yaml")


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("benchmarks:\n  a: {description: d, steps: []}\n"
                    "  a: {description: e, steps: []}\n")
    with pytest.raises(BenchmarkSpecError, match=r"b.yaml: line 3: key 'a' given twice"):
        load_spec(path)


def test_dependency_order_and_cycles():
    spec = parse_spec({"benchmarks": {
        "a": _bench(steps=[_step(outputs=["a"])], requires=["b", "c"]),
        "b": _bench(steps=[_step(outputs=["b"])], requires=["c"]),
        "c": _bench(steps=[_step(outputs=["c"])]),
        "d": _bench(steps=[_step(outputs=["d"])]),
    }})
    assert [b.name for b in spec.order(["a"])] == ["c", "b", "a"]
    assert [b.name for b in spec.order(["d", "b"])] == ["d", "c", "b"]
    with pytest.raises(BenchmarkSpecError, match=r"unknown benchmark\(s\) 'zz'"):
        spec.order(["zz"])
    cyclic = {"a": _bench(steps=[_step(outputs=["a"])], requires=["b"]),
              "b": _bench(steps=[_step(outputs=["b"])], requires=["c"]),
              "c": _bench(steps=[_step(outputs=["c"])], requires=["a"])}
    with pytest.raises(BenchmarkSpecError, match=r"requires cycle: a -> b -> c -> a"):
        parse_spec({"benchmarks": cyclic})


def _touch(path: Path, when: float, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (when, when))


def _reasons(spec, names, ws, **kw) -> dict[str, str]:
    ws.forget()
    return {p.step.id: (p.blocked or p.reason) if p.run else "skip: " + p.reason
            for p in plan(spec, names, ws, **kw)}


def test_staleness_by_mtime(tmp_path):
    spec = parse_spec({"benchmarks": {
        "make": _bench(steps=[_step(inputs=["in.txt"], outputs=["mid/part.txt"])]),
        "use": _bench(requires=["make"], steps=[
            _step(inputs=["mid", "{data}/d.txt"], outputs=["out.txt"]),
            _step("python -c 1", inputs=["out.txt"], outputs=["docs/benchmarks.md#use"])]),
        "glob": _bench(steps=[_step(inputs=["runs/*.json"], outputs=["g.txt"])]),
    }})
    ws = Workspace(tmp_path, data="data")
    t = time.time() - 1000
    assert _reasons(spec, ["use"], ws)["make#1"] == \
        "input in.txt is missing and no earlier step makes it"
    _touch(tmp_path / "in.txt", t)
    _touch(tmp_path / "data" / "d.txt", t)
    assert _reasons(spec, ["use"], ws) == {
        "make#1": "output mid/part.txt is missing",
        "use#1": "output out.txt is missing",
        "use#2": "output docs/benchmarks.md#use is missing"}
    _touch(tmp_path / "mid" / "part.txt", t + 10)
    _touch(tmp_path / "mid" / ".lock", t + 500)  # hidden: not counted
    _touch(tmp_path / "out.txt", t + 20)
    _touch(tmp_path / "docs" / "benchmarks.md", t + 30,
           "# B\n<!-- use:start -->\nx\n<!-- use:end -->\n")
    assert set(_reasons(spec, ["use"], ws).values()) == {"skip: up to date"}
    _touch(tmp_path / "in.txt", t + 15)  # newer than make's output: make and all after it
    assert _reasons(spec, ["use"], ws) == {
        "make#1": "input in.txt is newer than its outputs",
        "use#1": "input mid is rewritten by make#1 first",
        "use#2": "input out.txt is rewritten by use#1 first"}
    assert _reasons(spec, ["use"], ws, force=True)["use#1"] == "forced (--force)"
    _touch(tmp_path / "mid" / "part.txt", t + 25)  # a folder's time is its newest file's
    assert _reasons(spec, ["use"], ws)["use#1"] == "input mid is newer than its outputs"
    _touch(tmp_path / "out.txt", t + 26)
    assert set(_reasons(spec, ["use"], ws).values()) == {"skip: up to date"}
    # a glob: missing without a match, then its newest match
    assert _reasons(spec, ["glob"], ws)["glob#1"].startswith("input runs/*.json is missing")
    _touch(tmp_path / "runs" / "a.json", t)
    _touch(tmp_path / "g.txt", t + 1)
    assert _reasons(spec, ["glob"], ws) == {"glob#1": "skip: up to date"}
    _touch(tmp_path / "runs" / "b.json", t + 2)
    assert _reasons(spec, ["glob"], ws) == {"glob#1": "input runs/*.json is newer than its "
                                                      "outputs"}
    assert status(spec, "glob", ws) == "stale: 1 of 1 step(s) to run"


def test_a_step_that_ran_is_up_to_date_until_its_command_changes(tmp_path):
    """An output left untouched by a step that found it made (an index reused) counts from
    when the step last finished; another command makes the step stale."""
    entry = {"benchmarks": {"a": _bench(steps=[_step(inputs=["in"], outputs=["out"])])}}
    t = time.time() - 1000
    _touch(tmp_path / "out", t)
    _touch(tmp_path / "in", t + 10)
    ws = Workspace(tmp_path)
    spec = parse_spec(entry)
    assert _reasons(spec, ["a"], ws) == {"a#1": "input in is newer than its outputs"}
    ws.record(spec.benchmarks["a"].steps[0])
    assert _reasons(spec, ["a"], ws) == {"a#1": "skip: up to date"}
    entry["benchmarks"]["a"]["steps"][0]["command"] = "python -c 'print(2)'"
    assert _reasons(parse_spec(entry), ["a"], ws)["a#1"].startswith(
        "its command changed since it last ran here (was: python -c pass)")


def test_a_missing_input_names_the_benchmark_that_makes_it(tmp_path):
    spec = parse_spec({"benchmarks": {
        "maker": _bench(steps=[_step(outputs=["made.txt"])]),
        "user": _bench(steps=[_step(inputs=["made.txt"], outputs=["o.txt"])])}})
    ws = Workspace(tmp_path)
    (p,) = plan(spec, ["user"], ws)
    assert p.blocked == ("input made.txt is missing and no earlier step makes it (it is an "
                         "output of maker#1: run 'maker' first, or add it to user's requires)")
    with pytest.raises(Exception, match=r"cannot run user#1: input made.txt is missing"):
        run_plan([p], ws)


def test_the_root_is_the_checkout(tmp_path):
    assert find_root(ROOT / "src" / "intentrank") == ROOT
    with pytest.raises(Exception, match=r"no intentrank checkout at or above"):
        find_root(tmp_path)


# -- the command --------------------------------------------------------------------------------

WRITE = ("import pathlib, sys; pathlib.Path(sys.argv[2]).write_text("
         "pathlib.Path(sys.argv[1]).read_text().upper())")


def _tiny(tmp_path: Path, extra: dict | None = None) -> Path:
    """A spec of cheap steps: upper-case a.txt into b.txt, then b.txt into c.txt."""
    benchmarks = {
        "first": {"description": "upper-cases a.txt", "steps": [
            {"command": f"python -c '{WRITE}' a.txt b.txt", "inputs": ["a.txt"],
             "outputs": ["b.txt"]}]},
        "second": {"description": "copies b.txt", "requires": ["first"], "steps": [
            {"command": f"python -c '{WRITE}' b.txt c.txt", "inputs": ["b.txt"],
             "outputs": ["c.txt"]}]},
        **(extra or {})}
    (tmp_path / "a.txt").write_text("hello")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"benchmarks": benchmarks}))
    return spec


def _bench_cli(spec: Path, root: Path, *args: str):
    return runner.invoke(app, ["bench", "--spec", str(spec), "--root", str(root), *args])


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path):
    spec = _tiny(tmp_path)
    res = _bench_cli(spec, tmp_path, "second", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "second: 2 benchmark(s) with their prerequisites, 2 step(s), 2 to run" in res.stdout
    assert "  run     first#1: output b.txt is missing\n" in res.stdout
    assert f"python -c '{WRITE}' a.txt b.txt" in res.stdout
    assert "  run     second#1: output c.txt is missing\n" in res.stdout
    assert not (tmp_path / "b.txt").exists()
    listed = _bench_cli(spec, tmp_path, "--list")
    assert listed.exit_code == 0, listed.output
    assert re.search(r"first +stale: 1 of 1 step\(s\) to run\n +upper-cases a.txt", listed.stdout)
    assert re.search(r"second +stale: 2 of 2 step\(s\) to run", listed.stdout)


def test_a_run_skips_what_is_up_to_date_and_force_reruns(tmp_path):
    spec = _tiny(tmp_path)
    res = _bench_cli(spec, tmp_path, "second")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "c.txt").read_text() == "HELLO"
    assert "==> [1/2] first#1 (output b.txt is missing)" in res.stderr
    assert "done: 2 step(s) ran, 0 up to date" in res.stdout
    again = _bench_cli(spec, tmp_path, "second")
    assert "done: 0 step(s) ran, 2 up to date" in again.stdout, again.output
    assert "==>" not in again.stderr
    assert "up to date" in _bench_cli(spec, tmp_path, "--list", "second").stdout
    forced = _bench_cli(spec, tmp_path, "second", "--force")
    assert forced.exit_code == 0, forced.output
    assert "==> [1/1] second#1 (forced (--force))" in forced.stderr  # first is up to date
    assert "done: 1 step(s) ran, 1 up to date" in forced.stdout
    every = _bench_cli(spec, tmp_path, "all", "--force")
    assert "done: 2 step(s) ran, 0 up to date" in every.stdout, every.output
    (tmp_path / "a.txt").write_text("changed")
    os.utime(tmp_path / "a.txt", (time.time() + 5, time.time() + 5))
    rerun = _bench_cli(spec, tmp_path, "second")
    assert "first#1 (input a.txt is newer than its outputs)" in rerun.stderr, rerun.output
    assert (tmp_path / "c.txt").read_text() == "CHANGED"


def test_a_failing_step_stops_the_run_and_is_named(tmp_path):
    spec = _tiny(tmp_path, {
        "broken": {"description": "fails", "requires": ["first"], "steps": [
            {"command": "python -c 'raise SystemExit(3)'", "outputs": ["x.txt"]},
            {"command": "python -c pass", "outputs": ["y.txt"]}]},
        "silent": {"description": "writes nothing", "steps": [
            {"command": "python -c pass", "outputs": ["z.txt"]}]}})
    res = _bench_cli(spec, tmp_path, "broken")
    assert res.exit_code == 2, res.output
    assert ("error: step broken#1 failed (exit status 3): python -c 'raise SystemExit(3)'; "
            "the 1 step(s) after it did not run") in res.output
    assert (tmp_path / "b.txt").exists()  # the prerequisite ran first
    silent = _bench_cli(spec, tmp_path, "silent")
    assert silent.exit_code == 2
    assert "error: step silent#1 exited 0 but did not write z.txt" in silent.output


@pytest.mark.parametrize("args, message", [
    ([], "give benchmark names, `all`, or --list"),
    (["all", "first"], "`all` runs every benchmark; give it alone"),
    (["nope"], "unknown benchmark(s) 'nope'"),
    (["--list", "--force"], "--list runs nothing"),
])
def test_bad_invocations_are_one_error_line(tmp_path, args, message):
    res = _bench_cli(_tiny(tmp_path), tmp_path, *args)
    assert res.exit_code == 2 and f"error: {message}" in res.output, res.output


def test_the_shipped_spec_plans_from_the_checkout(tmp_path):
    """`intentrank bench all --dry-run` on the real checkout lists every step once."""
    res = runner.invoke(app, ["bench", "all", "--dry-run", "--root", str(ROOT)])
    assert res.exit_code == 0, res.output
    ids = re.findall(r"^  (?:run|skip|blocked) +(\S+): ", res.stdout, re.M)
    assert ids == [s.id for b in SPEC.order(list(SPEC.benchmarks)) for s in b.steps]
    assert section_output("defaults") == "docs/benchmarks.md#defaults"
    assert sys.executable  # steps run with this interpreter


def test_steps_start_without_a_shell_with_placeholders_expanded(tmp_path):
    spec = parse_spec({"benchmarks": {"a": _bench(steps=[
        _step("intentrank index '{data}/my corpus' {cache}/x", outputs=["x"]),
        _step("python bench/b.py --out '{cache}/a b.json'", outputs=["y"])])}})
    first, second = spec.benchmarks["a"].steps
    ws = Workspace.at(tmp_path, {"INTENTRANK_DATA": "/d"}, intentrank=("ir",))
    assert ws.argv(first) == ["ir", "index", "/d/my corpus", ".cache/intentrank/x"]
    assert ws.argv(second) == [sys.executable, "bench/b.py", "--out",
                               ".cache/intentrank/a b.json"]
    assert ws.env()["INTENTRANK_CACHE"] == str(tmp_path.resolve() / ".cache/intentrank")
    assert Workspace.at(tmp_path, {}).data == "../shared/data"


def test_a_sections_time_is_its_header_date(tmp_path):
    """A section shares its file with every other: its own date line says when it was
    written (bench/report.py's header), else the file's mtime."""
    docs = tmp_path / "docs" / "benchmarks.md"
    _touch(docs, time.time(), "<!-- a:start -->\n- date: 2020-01-02 03:04 UTC\n<!-- a:end -->\n"
                              "<!-- b:start -->\nno date\n<!-- b:end -->\n")
    ws = Workspace(tmp_path)
    assert ws.time("docs/benchmarks.md#a") == 1577934240.0
    assert ws.time("docs/benchmarks.md#b") == docs.stat().st_mtime
    assert ws.time("docs/benchmarks.md#c") is None


def _git(root: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


OLD_SCRIPT = """import os, pathlib, sys
pathlib.Path("bench/results").mkdir(parents=True, exist_ok=True)
pathlib.Path("bench/results/old.json").write_text(
    os.environ["PYTHONPATH"].split(os.pathsep)[0] + " " + os.environ["INTENTRANK_DATA"])
pathlib.Path("runs").mkdir(exist_ok=True)
pathlib.Path("runs/old.txt").write_text(pathlib.Path(sys.argv[1]).read_text())
"""


def test_an_archived_benchmark_runs_its_script_at_its_commit(tmp_path):
    """A script removed from bench/ runs from the tree of the commit the spec names, with
    that commit's package first; what it writes in the repository comes back to the root,
    what it writes under runs/ lands there directly."""
    root = tmp_path / "repo"
    (root / "bench").mkdir(parents=True)
    (root / "bench" / "old.py").write_text(OLD_SCRIPT)
    (root / "src").mkdir()
    (root / "src" / "marker.py").write_text("")
    _git(root, "init", "-q")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "old")
    commit = _git(root, "rev-parse", "--short", "HEAD")
    _git(root, "rm", "-q", "bench/old.py")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "archive it")
    (root / "runs").mkdir()
    (root / "a.txt").write_text("kept")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"benchmarks": {"old": {
        "description": "an archived script", "revision": commit,
        "steps": [{"command": f"python bench/old.py {root / 'a.txt'}",
                   "outputs": ["bench/results/old.json", "runs/old.txt"]}]}}}))
    assert not (root / "bench" / "old.py").exists()
    dry = _bench_cli(spec, root, "old", "--dry-run")
    assert f"(at {commit})" in dry.stdout, dry.output
    assert f"[archived: runs at {commit}]" in _bench_cli(spec, root, "--list").stdout
    res = _bench_cli(spec, root, "old")
    assert res.exit_code == 0, res.output
    data = Workspace.at(root).data
    data = str((root / data).resolve())
    tree = root / ".cache" / "bench" / "trees" / commit
    assert (root / "bench" / "results" / "old.json").read_text() == f"{tree / 'src'} {data}"
    assert (root / "runs" / "old.txt").read_text() == "kept"
    assert (tree / "bench" / "old.py").is_file() and (tree / "runs").is_symlink()
    again = _bench_cli(spec, root, "old")
    assert "done: 0 step(s) ran, 1 up to date" in again.stdout, again.output
    spec.write_text(spec.read_text().replace(commit, "abcdef0"))
    missing = _bench_cli(spec, root, "old", "--force")
    assert missing.exit_code == 2
    assert "cannot extract commit abcdef0" in missing.output
