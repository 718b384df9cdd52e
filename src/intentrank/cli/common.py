"""What every command shares: the ``app``, the global options (kept on the typer context
object as :class:`Settings`), the one error decorator, option checks and output helpers.

Every bad input (an option out of range, a file that cannot be read or written, a metric
that cannot be computed, data that does not parse) is reported as one ``error: ...`` line
on stderr with exit status 2, checked before any expensive work where possible. Commands
that ran LLM steps print one health line per LLM stage on stderr (see
:mod:`intentrank.llm.health`); ``--strict`` turns LLM failures and fallbacks (and, for
``eval``, qrels naming unknown ids) into errors.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup
from typer.exceptions import TyperException

from intentrank.core.params import check_int, check_number
from intentrank.errors import ConfigError, IntentrankError
from intentrank.filters import Filter
from intentrank.paths import default_data_dir
from intentrank.types import Document


class _Group(TyperGroup):
    """Usage errors (unknown options, values that do not parse) as one ``error: ...`` line
    with exit status 2, like every other bad input."""

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except TyperException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # plain `intentrank`: the help
                from typer import rich_utils

                rich_utils.rich_format_error(exc)  # type: ignore[arg-type]
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            console.print(f"[bold red]error:[/] {escape(exc.format_message())}{hint}",
                          soft_wrap=True, highlight=False)
            sys.exit(exc.exit_code if exc.exit_code else 2)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    help="intentrank: intent-aware retrieval and reranking for RAG.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_Group,
)
console = Console(stderr=True)
out = Console()

# $INTENTRANK_DATA, else ../shared/data beside the working directory (paths.default_data_dir).
DEFAULT_DATA = default_data_dir()


@dataclass
class Settings:
    """The global options, set once by the ``intentrank`` callback on the typer context
    object (``ctx.obj``) and read by every command."""

    llm: str = "embedded"  # the LLM spec LLM stages get
    llm_options: dict[str, Any] = field(default_factory=dict)  # cache, timeout, retries
    strict: bool = False  # --strict

    @property
    def llm_settings(self) -> dict[str, Any]:
        """``llm`` and ``llm_options`` as keyword arguments of the pipeline builders."""
        return {"llm": self.llm, "llm_options": self.llm_options}

    @property
    def experiment_llm(self) -> dict[str, Any]:
        """The LLM options as ``run_experiment`` arguments."""
        return {"llm": self.llm, "resources": {"llm_options": self.llm_options}}

    def load_llm(self, spec: str = "", role: str | None = None) -> Any:
        """The LLM client of ``spec`` (default: the --llm option's; the embedded default
        picks ``role``'s measured model, ``llm/roles.py``) with the LLM options."""
        from intentrank.llm.client import load_llm
        from intentrank.llm.roles import role_spec

        return load_llm(spec or role_spec(self.llm, role), **self.llm_options)


def settings_of(ctx: typer.Context) -> Settings:
    """The global options of this invocation."""
    return ctx.ensure_object(Settings)


F = TypeVar("F", bound=Callable[..., Any])


def cli_errors(func: F) -> F:
    """Report the project's errors (and unreadable files, bad values) that ``func`` raises
    as one ``error: ...`` line on stderr, exit status 2; put it under ``@app.command()``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (IntentrankError, ValueError, OSError) as exc:
            fail(exc)

    return wrapper  # type: ignore[return-value]


@app.callback()
@cli_errors
def main(
    ctx: typer.Context,
    llm: Annotated[str, typer.Option(help="LLM for LLM stages: 'embedded' (Qwen2.5-Coder-0.5B "
                                     "via llama.cpp), 'llamacpp:qwen2.5-coder-1.5b', a .gguf "
                                     "path, or 'openai:<model>@<base_url>' (key from "
                                     "$OPENAI_API_KEY).", envvar="INTENTRANK_LLM")] = "embedded",
    llm_cache: Annotated[bool, typer.Option("--llm-cache/--no-llm-cache", help="Replay LLM "
                                            "replies from the on-disk cache.")] = True,
    llm_timeout: Annotated[float, typer.Option(help="Seconds per LLM call (HTTP backends).")]
        = 60.0,
    llm_retries: Annotated[int, typer.Option(help="Retries of a failed LLM call.")] = 2,
    strict: Annotated[bool, typer.Option("--strict", help="Fail (exit status 2) when an LLM "
                                         "request failed or an LLM stage fell back, and (eval) "
                                         "when qrels name unknown query or document ids.")]
        = False,
) -> None:
    """intentrank: intent-aware retrieval and reranking for RAG."""
    from intentrank.llm.client import check_spec

    llm = check_spec(llm)
    check_number("--llm-timeout", llm_timeout, above=0)
    check_int("--llm-retries", llm_retries, minimum=0)
    ctx.obj = Settings(llm, {"cache": llm_cache, "timeout": llm_timeout,
                             "retries": llm_retries}, strict)


# -- output --------------------------------------------------------------------------------

def fail(exc: Exception | str) -> None:
    """Print ``error: <exc>`` on stderr and exit with status 2."""
    console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
    raise typer.Exit(2)


def warn(message: str) -> None:
    console.print(f"[bold yellow]warning:[/] {escape(message)}", soft_wrap=True,
                  highlight=False)


def warn_if_nothing_passes(idx: Any, flt: Filter | None) -> None:
    """A warning when ``flt`` lets no document of the index through, naming the fields that
    no document has (a misspelt field otherwise just gives empty results)."""
    if flt is None or idx.allowed_rows(flt).any():
        return
    absent = sorted(f for f in flt.fields() if not idx.metadata_columns.column(f).present.any())
    warn("--filter matches no document of this index"
         + (f"; no document has the field(s) {', '.join(map(repr, absent))}" if absent else ""))


def log(message: str) -> None:
    """A progress line of a long job, indented, on stderr."""
    console.print(f"  {escape(message)}")


def llm_health(settings: Settings, traces: Any, separate: bool = False) -> None:
    """Print one health line per LLM stage and a warning per degraded stage; under
    ``--strict`` exit with status 2 if any LLM request failed or any stage fell back."""
    from intentrank.llm.health import check_strict, format_health, health_report, warnings_for

    healths = health_report(traces, separate=separate)
    for h in healths:
        console.print(escape(format_health(h)), soft_wrap=True, highlight=False, style="dim")
    for w in warnings_for(healths):
        warn(w)
    if settings.strict and (message := check_strict(healths)):
        fail(message)


def write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise IntentrankError(f"cannot write {path}: {exc.strerror or exc}") from None


# -- option checks ---------------------------------------------------------------------------

def check_skip_top(skip_top: int, depth: int) -> None:
    if not 0 <= skip_top < depth:
        raise ConfigError(f"--skip-top must be >= 0 and below the mining depth {depth}, "
                          f"got {skip_top}")


def check_output_file(path: Path | None, option: str) -> None:
    """Check, before any work, that ``path`` can be written as a file (its missing parent
    directories are created)."""
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory; give a file path")
    _make_dir(path.parent, f"{option} {path}")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{option} {path} is not writable")


def check_output_dir(path: Path | None, option: str) -> None:
    """Check, before any work, that ``path`` is or can be made a writable directory."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} is a file; give a directory")
    _make_dir(path, f"{option} {path}")


def check_new_dir(path: Path, option: str = "") -> None:
    """A directory to write must not be a file."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{f'{option} ' if option else ''}{path} is a file; give a directory")


def _make_dir(directory: Path, what: str) -> None:
    directory = directory if str(directory) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{what}: {directory} exists and is not a directory") from None
    except OSError as exc:
        raise ConfigError(f"{what}: cannot create directory {directory} "
                          f"({exc.strerror or exc})") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: directory {directory} is not writable")


# -- datasets and indexes --------------------------------------------------------------------

class DatasetWarnings:
    """Print each of a dataset's warnings once, as they appear."""

    def __init__(self, ds: Any) -> None:
        self.ds, self.shown = ds, 0

    def flush(self) -> None:
        notes = getattr(self.ds, "warnings", [])
        for note in notes[self.shown:]:
            warn(note)
        self.shown = len(notes)


def split_and_index(settings: Settings, ds: Any, split: str, dataset_dir: Path,
                    index_dir: Path | None, *, check_qrels: bool = True,
                    before_index: Callable[[], None] | None = None) -> tuple[Any, Any]:
    """``ds``'s ``split`` (queries, qrels; an unknown split fails first), then ``before_index``,
    the index (:func:`open_or_build`), the qrels checked against it; warnings as they come."""
    notes = DatasetWarnings(ds)
    notes.flush()
    queries_qrels = ds.split(split)
    if before_index is not None:
        before_index()
    notes.flush()
    idx = open_or_build(dataset_dir, index_dir)
    if check_qrels:
        ds.check_qrels(idx.doc_and_parent_ids, strict=settings.strict)
        notes.flush()
    return queries_qrels, idx


def load_dataset(settings: Settings, path: Path, round_grades: bool = False) -> Any:
    from intentrank.data.dataset import load_dataset as load

    return load(path, strict=settings.strict, round_grades=round_grades)


def corpus(source: Path, encoding: str) -> Iterator[Document]:
    """Documents of a BEIR directory or of a corpus file (JSONL/CSV, plain/.gz/.zip)."""
    from intentrank.data.corpus import iter_corpus
    from intentrank.data.dataset import corpus_file

    return iter_corpus(corpus_file(source), encoding=encoding)


def open_or_build(dataset_dir: Path, index_dir: Path | None, legs: str | None = None) -> Any:
    """The index of ``dataset_dir`` (default ``indexes/<dataset>``): opened after checking
    it was built from this dataset's corpus (sha256), or built if there is none."""
    from intentrank.index import Index, IndexSettings
    from intentrank.index import open_or_build as open_or_build_index

    index_dir = index_dir or Path("indexes") / dataset_dir.name
    settings = IndexSettings(legs=tuple(legs.split(","))) if legs else None
    if not Index.exists(index_dir):
        console.print(f"[cyan]building index[/] {index_dir} from {dataset_dir}")
    return open_or_build_index(lambda: corpus(dataset_dir, "utf-8"), index_dir, settings,
                               progress=True, log=log, source=str(dataset_dir))
