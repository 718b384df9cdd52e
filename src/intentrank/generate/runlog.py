"""What every generator shares: the output directory's identity check, atomic writes, the
corpus link, the append-only attempts log (resume after a kill) and the budget.

A generated set's directory holds ``generation.json`` (written first with the settings a
resume must match, rewritten with counts at the end of each run) and ``attempts.jsonl`` (one
JSON line per attempt, fsynced as it ends, numbered 0, 1, 2, ...).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from intentrank.data.readers import atomic_write
from intentrank.errors import ConfigError, DataError
from intentrank.extras import package_versions
from intentrank.types import Trace

ATTEMPTS = "attempts.jsonl"
GENERATION_JSON = "generation.json"
# settings that may change when a run is resumed (the budget); all others must match
BUDGET_FIELDS = {"n", "max_minutes", "max_attempts"}

T = TypeVar("T")
Log = Callable[[str], None]


class RunSettings:
    """Mixin for a generator's frozen settings dataclass (fields ``split``, ``doc_chars``,
    ``n``, ``max_minutes``, ``max_attempts``)."""

    n: int
    max_minutes: float | None
    max_attempts: int | None
    split: str
    doc_chars: int

    def identity(self) -> dict[str, Any]:
        """The settings a resumed run must share with the first one."""
        return {f.name: getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
                if f.name not in BUDGET_FIELDS}

    def check_run(self) -> None:
        """The budget is positive, the split written is a plain name and documents keep at
        least 100 characters."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ConfigError(f"--n must be a whole number >= 1, got {self.n!r}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ConfigError(f"--minutes must be > 0, got {self.max_minutes!r}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError(f"--max-attempts must be >= 1, got {self.max_attempts!r}")
        if not self.split or not self.split.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"--split must be a plain name (letters, digits, - or _), "
                              f"got {self.split!r}")
        if self.doc_chars < 100:
            raise ConfigError(f"doc_chars must be >= 100, got {self.doc_chars}")


@dataclass
class RunReport:
    """What a run produced: the output directory, the counts and the recorded JSON."""

    out_dir: Path
    kept: int
    attempts: int
    info: dict[str, Any] = field(default_factory=dict)


def clip(text: str, chars: int) -> str:
    """``text`` cut at a word boundary to at most ``chars`` characters (marked ``...``)."""
    return text if len(text) <= chars else text[:chars].rsplit(" ", 1)[0] + " ..."


def read_attempts(path: Path, make: Callable[..., T]) -> list[T]:
    """The attempts recorded so far (each line's fields passed to ``make``); a torn last line
    (a kill mid-write) is cut off. Records must be numbered 0, 1, 2, ... (field ``attempt``)."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    good = raw[: raw.rfind(b"\n") + 1]
    if len(good) != len(raw):
        with path.open("r+b") as fh:
            fh.truncate(len(good))
    out = []
    numbers = []
    for n, line in enumerate(good.decode("utf-8").splitlines(), 1):
        try:
            record = json.loads(line)
            out.append(make(**record))
            numbers.append(record["attempt"])
        except (ValueError, TypeError, KeyError) as exc:
            raise DataError(f"unreadable attempt record ({exc}); delete the directory or "
                            f"the line to start over", path, n) from None
    if numbers != list(range(len(out))):
        raise DataError("attempt numbers are not 0, 1, 2, ... (was the file edited?)", path)
    return out


def link_corpus(source: Path, out: Path) -> str:
    """Make ``out/<corpus file name>`` point at the source corpus (a copy if links fail)."""
    target = out / source.name
    if target.exists() or target.is_symlink():
        target.unlink()
    try:
        target.symlink_to(source.resolve())
        return "symlink"
    except OSError:
        import shutil

        shutil.copyfile(source, target)
        return "copy"


def open_run(out: Path, identity: Mapping[str, Any], what: str, make: Callable[..., T],
             log: Log | None, kept: str) -> list[T]:
    """The attempts recorded in ``out`` (see :func:`read_attempts`), after refusing an ``out``
    that is neither empty nor an earlier run (``what``, e.g. "generated question set") with
    the same identity; ``out`` is created and the identity written first, so that a run
    killed at once is still resumable. ``log`` hears of a resumed run (``kept``: what its
    kept attempts are, e.g. "questions")."""
    path = out / GENERATION_JSON
    if path.exists():
        recorded = json.loads(path.read_text(encoding="utf-8")).get("identity", {})
        diff = sorted(k for k in set(recorded) | set(identity)
                      if recorded.get(k) != identity.get(k))
        if diff:
            show = "; ".join(f"{k}: {recorded.get(k)!r} then, {identity.get(k)!r} now"
                             for k in diff)
            raise ConfigError(f"{out} was generated with other settings ({show}); resume with "
                              f"the same ones, or write to a new directory")
    elif out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists, is not empty and is not a {what} "
                          f"(no {GENERATION_JSON}); choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        atomic_write(path, json.dumps({"identity": identity}, indent=2) + "\n")
    attempts = read_attempts(out / ATTEMPTS, make)
    if attempts and log is not None:
        log(f"resuming {out}: {len(attempts)} attempts recorded, "
            f"{sum(a.status == 'kept' for a in attempts)} {kept} kept")
    return attempts


class Budget:
    """Whichever comes first: ``n`` kept, ``max_attempts`` attempts, ``max_minutes``."""

    def __init__(self, n: int, max_attempts: int, max_minutes: float | None) -> None:
        self.n, self.max_attempts, self.max_minutes = n, max_attempts, max_minutes
        self.started = time.perf_counter()

    def stop(self, kept: int, attempts: int) -> str | None:
        """The budget that is spent ("n", "max_attempts", "max_minutes"), or None."""
        if kept >= self.n:
            return "n"
        if attempts >= self.max_attempts:
            return "max_attempts"
        if self.max_minutes is not None and self.seconds > 60 * self.max_minutes:
            return "max_minutes"
        return None

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


def runs_so_far(out: Path, trace: Trace, stage: str, stopped_by: str, seconds: float
                ) -> list[dict[str, Any]]:
    """The runs ``out/generation.json`` records, plus this one with ``stage``'s counters."""
    runs = json.loads((out / GENERATION_JSON).read_text()).get("runs", [])
    counters = trace.stages[stage].counters if stage in trace.stages else {}
    return runs + [{"seconds": round(seconds, 1), "stopped_by": stopped_by,
                    "finished": datetime.now(UTC).isoformat(timespec="seconds"),
                    "llm": dict(counters)}]


def write_info(out: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Add the package versions to ``info`` and write it as ``out/generation.json``."""
    info["versions"] = package_versions(("intentrank", "xllamacpp", "openai"))
    atomic_write(out / GENERATION_JSON, json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return info


def run_attempts(out: Path, attempts: list[Any], budget: Budget, attempt: Callable[[int], Any],
                 on_kept: Callable[[], None], desc: str, unit: str, progress: bool) -> str:
    """Make attempts (``attempt(i)``) until the budget is spent, appending each to the
    attempts log and to ``attempts``, calling ``on_kept()`` after each kept one; returns
    the budget that stopped the run. Each record is fsynced as it ends. A bar counts the kept
    ones."""
    from tqdm.auto import tqdm

    kept = sum(a.status == "kept" for a in attempts)
    bar = tqdm(total=budget.n, initial=min(kept, budget.n), desc=desc, unit=unit,
               disable=not progress)
    try:
        with (out / ATTEMPTS).open("a", encoding="utf-8") as log_fh:
            while not (stopped_by := budget.stop(kept, len(attempts))):
                a = attempt(len(attempts))
                attempts.append(a)
                log_fh.write(json.dumps(asdict(a), ensure_ascii=False) + "\n")
                log_fh.flush()
                os.fsync(log_fh.fileno())
                bar.set_postfix(attempts=len(attempts), refresh=False)
                if a.status == "kept":
                    kept += 1
                    bar.update(1)
                    on_kept()
            return stopped_by
    finally:
        bar.close()
