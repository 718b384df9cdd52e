"""The ``intentrank`` command line: index, search, eval and quickstart.

Every bad input (an option out of range, a file that cannot be read or written, a metric
that cannot be computed, data that does not parse) is reported as one ``error: ...`` line
on stderr with exit status 2, checked before any expensive work where possible. Commands
that ran LLM steps print one health line per LLM stage on stderr (see
:mod:`intentrank.llm.health`); ``--strict`` turns LLM failures and fallbacks (and, for
``eval``, qrels naming unknown ids) into errors.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup
from typer.exceptions import TyperException

from intentrank.errors import ConfigError, IntentrankError
from intentrank.paths import default_data_dir


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


# LLM settings every command hands to the pipelines it builds (set by the global options).
LLM_SETTINGS: dict = {"llm": "embedded", "llm_options": {}}
# Global run options (set by the global options): --strict.
RUN_OPTIONS: dict = {"strict": False}


# Options several commands share, one help text each.
IndexOption = Annotated[Path, typer.Option(
    "--index", help="Index directory (default indexes/<dataset>, built if missing).")]
MiningIndexOption = Annotated[Path, typer.Option(
    "--index", help="Index to mine hard negatives from (default indexes/<dataset>, built if "
    "missing).")]
TrainSplitOption = Annotated[str, typer.Option(
    help="Qrels split to train on ('test' is refused).")]
SkipTopOption = Annotated[int, typer.Option(
    help="Mine hard negatives below this rank (e.g. 10: ranks 11-30), keeping out unjudged "
    "relevant documents; for generated questions with one gold document.")]
TuneSplitOption = Annotated[str, typer.Option(
    help="Qrels split to tune on ('test' is refused).")]
SampleSeedOption = Annotated[int, typer.Option(help="Seed of the query sample.")]
RayAddressOption = Annotated[str, typer.Option(
    help="Address of a running Ray cluster (implies --ray).")]
SearchBm25Option = Annotated[str, typer.Option(
    help="Search BM25 with numpy or numba (default: the index's setting).")]
MinutesOption = Annotated[float, typer.Option(
    help="Stop after this many minutes, keeping what was generated (0 = no limit).")]
TrainingDatasetArg = Annotated[Path, typer.Argument(
    help="BEIR-layout dataset directory with qrels/<split>.tsv for the training split.")]
TuningDatasetArg = Annotated[Path, typer.Argument(
    help="BEIR-layout dataset with a training split.")]
IndexDirArg = Annotated[Path, typer.Argument(help="Index directory.")]


@app.callback()
def main(
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
    from intentrank.core.params import check_int, check_number
    from intentrank.llm.client import check_spec

    try:
        llm = check_spec(llm)
        check_number("--llm-timeout", llm_timeout, above=0)
        check_int("--llm-retries", llm_retries, minimum=0)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    LLM_SETTINGS.update(llm=llm, llm_options={"cache": llm_cache, "timeout": llm_timeout,
                                              "retries": llm_retries})
    RUN_OPTIONS.update(strict=strict)


def _fail(exc: Exception | str) -> None:
    console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
    raise typer.Exit(2)


def _warn(message: str) -> None:
    console.print(f"[bold yellow]warning:[/] {escape(message)}", soft_wrap=True,
                  highlight=False)


def _check_int(option: str, value: int, minimum: int = 1) -> None:
    from intentrank.core.params import check_int

    check_int(option, value, minimum=minimum)


def _check_skip_top(skip_top: int, depth: int) -> None:
    if not 0 <= skip_top < depth:
        raise ConfigError(f"--skip-top must be >= 0 and below the mining depth {depth}, "
                          f"got {skip_top}")


def _output_file(path: Path | None, option: str) -> None:
    """Check, before any work, that ``path`` can be written as a file (its missing parent
    directories are created)."""
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory; give a file path")
    _make_dir(path.parent, f"{option} {path}")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{option} {path} is not writable")


def _output_dir(path: Path | None, option: str) -> None:
    """Check, before any work, that ``path`` is or can be made a writable directory."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} is a file; give a directory")
    _make_dir(path, f"{option} {path}")


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


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise IntentrankError(f"cannot write {path}: {exc.strerror or exc}") from None


class _DatasetWarnings:
    """Print each of a dataset's warnings once, as they appear."""

    def __init__(self, ds: Any) -> None:
        self.ds, self.shown = ds, 0

    def flush(self) -> None:
        notes = getattr(self.ds, "warnings", [])
        for note in notes[self.shown:]:
            _warn(note)
        self.shown = len(notes)


def _load_dataset(path: Path, round_grades: bool = False) -> Any:
    from intentrank.data.dataset import load_dataset

    return load_dataset(path, strict=RUN_OPTIONS["strict"], round_grades=round_grades)


def _llm_health(traces: Any, separate: bool = False) -> None:
    """Print one health line per LLM stage and a warning per degraded stage; under
    ``--strict`` exit with status 2 if any LLM request failed or any stage fell back."""
    from intentrank.llm.health import check_strict, format_health, health_report, warnings_for

    healths = health_report(traces, separate=separate)
    for h in healths:
        console.print(escape(format_health(h)), soft_wrap=True, highlight=False, style="dim")
    for w in warnings_for(healths):
        _warn(w)
    if RUN_OPTIONS["strict"] and (message := check_strict(healths)):
        _fail(message)


def _corpus(source: Path, encoding: str):  # noqa: ANN202 (iterator of Document)
    """Documents of a BEIR directory or of a corpus file (JSONL/CSV, plain/.gz/.zip)."""
    from intentrank.data.corpus import iter_corpus
    from intentrank.data.dataset import CORPUS_NAMES, _first_existing

    if source.is_dir():
        source = _first_existing(source, CORPUS_NAMES, "corpus")
    return iter_corpus(source, encoding=encoding)


def _open_or_build(dataset_dir: Path, index_dir: Path | None, legs: str | None = None):  # noqa: ANN202
    """The index of ``dataset_dir`` (default ``indexes/<dataset>``): opened after checking
    it was built from this dataset's corpus (sha256), or built if there is none."""
    from intentrank.index import Index, IndexSettings, open_or_build

    index_dir = index_dir or Path("indexes") / dataset_dir.name
    settings = IndexSettings(legs=tuple(legs.split(","))) if legs else None
    if not Index.exists(index_dir):
        console.print(f"[cyan]building index[/] {index_dir} from {dataset_dir}")
    return open_or_build(lambda: _corpus(dataset_dir, "utf-8"), index_dir, settings,
                         progress=True, log=lambda m: console.print(f"  {escape(m)}"),
                         source=str(dataset_dir))


@app.command()
def index(
    source: Annotated[Path, typer.Argument(help="Corpus: a BEIR directory, or a .jsonl/.csv "
                                           "file (plain, .gz or .zip).")],
    out_dir: Annotated[Path, typer.Argument(help="Index directory to create.")],
    legs: Annotated[str, typer.Option(help="Comma-separated legs to build.")] =
        "bm25,dense,tfidf,graph",
    k1: Annotated[float, typer.Option(help="BM25 k1.")] = 1.5,
    b: Annotated[float, typer.Option(help="BM25 b.")] = 0.75,
    stemmer: Annotated[str, typer.Option(help="PyStemmer language for BM25, or 'none'.")] =
        "english",
    stopwords: Annotated[str, typer.Option(help="bm25s stopword list for BM25, or 'none'.")] =
        "en",
    model: Annotated[str, typer.Option(help="Embedder: 'minilm' (bundled), a hub name or a "
                                       "local directory.")] = "minilm",
    backend: Annotated[str, typer.Option(help="Embedder backend: sentence-transformers or "
                                         "onnx.")] = "sentence-transformers",
    batch_size: Annotated[int, typer.Option(help="Embedding batch size.")] = 64,
    chunk_size: Annotated[int, typer.Option(help="Split documents into passages of this many "
                                            "words (0 = keep whole).")] = 0,
    chunk_overlap: Annotated[int, typer.Option(help="Words shared by consecutive passages.")] =
        50,
    encoding: Annotated[str, typer.Option(help="Text encoding of the corpus file.")] = "utf-8",
    overwrite: Annotated[bool, typer.Option(help="Replace an index built with other settings "
                                            "or another corpus.")] = False,
    ann: Annotated[str, typer.Option(help="Dense search: exact, hnsw or ivfpq (faiss).")] =
        "exact",
    ef_search: Annotated[int, typer.Option(help="HNSW candidate list while searching (512 "
                                           "for recall@100 >= 0.95 at 1M).")] = 128,
    hnsw_m: Annotated[int, typer.Option(help="HNSW neighbours per node.")] = 16,
    nlist: Annotated[int, typer.Option(help="IVF-PQ inverted lists (0 = 4 sqrt(n)).")] = 0,
    nprobe: Annotated[int, typer.Option(help="IVF-PQ lists visited per query.")] = 32,
    pq_m: Annotated[int, typer.Option(help="IVF-PQ sub-quantizers (divides the vector "
                                        "dimension).")] = 48,
    shards: Annotated[int, typer.Option(help="Build BM25 and dense as this many shards "
                                        "(global BM25 statistics; merged results exact).")] = 1,
    ray: Annotated[bool, typer.Option("--ray", help="Encode the corpus on Ray (Ray Data, "
                                      "an actor pool of embedders).")] = False,
    ray_address: RayAddressOption = "",
    ray_workers: Annotated[int, typer.Option(help="Embedder actors on Ray.")] = 2,
    bm25_backend: Annotated[str, typer.Option(help="BM25 retrieval: numpy, or numba (about "
                                              "100x faster at 1M documents; the scale "
                                              "extra).")] = "numpy",
) -> None:
    """Build an on-disk hybrid index (BM25, dense, TF-IDF, entity graph) for a corpus."""
    from dataclasses import replace

    from intentrank.index import IndexSettings, build_index
    from intentrank.index.settings import AnnSettings

    try:
        _check_int("--shards", shards)
        _check_int("--ray-workers", ray_workers)
        base = IndexSettings(legs=tuple(x.strip() for x in legs.split(",") if x.strip()))
        settings = replace(
            base,
            bm25=replace(base.bm25, k1=k1, b=b, stemmer=None if stemmer == "none" else stemmer,
                         stopwords=None if stopwords == "none" else stopwords,
                         backend=bm25_backend),
            dense=replace(base.dense, model=model, backend=backend, batch_size=batch_size,
                          ann=AnnSettings(ann, hnsw_m=hnsw_m, ef_search=ef_search,
                                          nlist=nlist, nprobe=nprobe, pq_m=pq_m)),
            chunk_size=chunk_size or None, chunk_overlap=chunk_overlap, shards=shards,
        )
        encoder = None
        if ray or ray_address:
            from intentrank.scale.encode import ray_encoder

            encoder = ray_encoder(settings.dense, workers=ray_workers,
                                  address=ray_address or None)
        start = time.perf_counter()
        idx = build_index(_corpus(source, encoding), out_dir, settings, overwrite=overwrite,
                          progress=True, log=lambda m: console.print(f"  {escape(m)}"),
                          encoder=encoder)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    secs = time.perf_counter() - start
    times = ", ".join(f"{k} {v:.1f}s" for k, v in idx.manifest["build_seconds"].items())
    console.print(f"[green]index ready[/] {out_dir}: {len(idx)} documents in {secs:.1f}s "
                  f"({times})")


@app.command()
def search(
    index_dir: IndexDirArg,
    query: Annotated[list[str], typer.Argument(help="One or more query strings.")],
    pipeline: Annotated[str, typer.Option("--pipeline", "-p", help="A pipeline config file or "
                                          "a shipped name (bm25, dense, tfidf, sparse, graph, "
                                          "rrf, weighted).")] = "rrf",
    k: Annotated[int, typer.Option("-k", help="Results shown per query.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] =
        False,
    bm25_backend: SearchBm25Option = "",
) -> None:
    """Answer queries from an index with a pipeline."""
    from intentrank.core.config import resolve_pipeline
    from intentrank.index import Index
    from intentrank.pipelines import pipeline_from_config

    try:
        _check_int("-k", k)
        config = resolve_pipeline(pipeline)
        idx = Index.open(index_dir)
        if bm25_backend:
            idx.set_bm25_backend(bm25_backend)
        pipe = pipeline_from_config(config, index=idx, **LLM_SETTINGS)
        result = pipe.run(query)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    from intentrank.rerank.coverage import aspect_labels

    # the aspect each result covers, when an aspects stage ran (multi-aspect pipelines)
    labels = [aspect_labels(r) if r.query.derived_of("aspect") else None
              for r in result.rankings]
    if as_json:
        out.print_json(json.dumps([
            {"query": r.query.text,
             **({"aspects": r.query.derived_of("aspect")} if lab is not None else {}),
             "results": [
                {"id": d.doc_id, "score": d.score, "stage_scores": d.stage_scores,
                 "title": idx.doc(d.doc_id).title,
                 **({"aspect": lab[i]} if lab is not None else {})}
                for i, d in enumerate(r.docs[:k])]}
            for r, lab in zip(result.rankings, labels, strict=True)]))
        _llm_health(result.trace)
        return
    for r, lab in zip(result.rankings, labels, strict=True):
        title = f"{escape(r.query.text)}  [dim]({escape(pipe.describe())})[/]"
        if lab is not None:
            title += "\n[dim]aspects: " + escape("; ".join(r.query.derived_of("aspect"))) + "[/]"
        table = Table(title=title)
        for col in ("rank", "id", "score", "title / text", *(("aspect",) if lab else ())):
            table.add_column(col)
        for rank, d in enumerate(r.docs[:k], 1):
            doc = idx.doc(d.doc_id)
            snippet = (doc.title or doc.text)[:90]
            table.add_row(str(rank), escape(d.doc_id), f"{d.score:.4f}", escape(snippet),
                          *((escape(lab[rank - 1][:60]),) if lab else ()))
        out.print(table)
    _llm_health(result.trace)


@app.command("answer")
def answer_cmd(
    index_dir: IndexDirArg,
    question: Annotated[str, typer.Argument(help="The question to answer.")],
    pipeline: Annotated[str, typer.Option("--pipeline", "-p", help="A pipeline config file or "
                                          "a shipped name (answer, knowledge-answer, rrf, "
                                          "knowledge, ...); one that does not end in an "
                                          "answer stage gets one.")] = "answer",
    n_ans: Annotated[int, typer.Option("--n-ans", help="Documents the added answer stage "
                                       "answers from (a pipeline's own answer stage keeps "
                                       "its top_k).")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] =
        False,
) -> None:
    """Answer a question from an index: the answer with numbered citations and the cited
    passages."""
    from intentrank.core.config import build_pipeline, load_config, resolve_pipeline
    from intentrank.index import Index
    from intentrank.pipelines import build_context, ends_with_answer, with_answer

    try:
        _check_int("--n-ans", n_ans)
        if not question.strip():
            raise ConfigError("the question is empty")
        node = load_config(resolve_pipeline(pipeline))["pipeline"]
        added = not ends_with_answer(node)
        idx = Index.open(index_dir)
        pipe = build_pipeline(with_answer(node, n_ans), build_context(idx, **LLM_SETTINGS),
                              str(pipeline))
        result = pipe.run([question])
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    answer = result.rankings[0].query.answer
    cited = [(n, answer.sources[n - 1]) for n in answer.citations]
    if as_json:
        out.print_json(json.dumps({
            "question": question, "answer": answer.text, "fallback": answer.fallback,
            "sources": list(answer.sources),
            "citations": [{"n": n, "id": d, "text": idx.doc_text(d)} for n, d in cited]}))
        _llm_health(result.trace)
        return
    if added:
        out.print(f"[dim](answer stage added to {escape(str(pipeline))}: top {n_ans})[/]")
    out.print(f"\n[bold]{escape(question)}[/]\n\n{escape(answer.text or '(no answer)')}\n")
    if answer.fallback:
        _warn(f"answer fallback: {answer.fallback}")
    for n, doc_id in cited:
        doc = idx.doc(doc_id)
        text = " ".join(doc.text.split()[:60])
        out.print(f"[bold][{n}][/] {escape(doc_id)}  {escape(doc.title)}\n    "
                  f"[dim]{escape(text)}[/]")
    _llm_health(result.trace)


@app.command()
def serve(
    index: Annotated[list[str], typer.Option("--index", help="Index to serve: DIR or NAME=DIR; "
                                             "repeat (default: the quickstart's SciFact "
                                             "index, built if missing).")] = None,  # type: ignore[assignment]
    pipeline: Annotated[list[str], typer.Option("--pipeline", "-p", help="Shipped name or "
                                                "[NAME=]config.yaml; repeat (default: bm25 "
                                                "dense tfidf sparse graph rrf weighted cascade "
                                                "answer).")] = None,  # type: ignore[assignment]
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    keys_file: Annotated[Path, typer.Option(help="API keys file (sha256 digests); else "
                                            "$INTENTRANK_API_KEYS; else one is generated and "
                                            "printed.")] = None,  # type: ignore[assignment]
    no_keys: Annotated[bool, typer.Option("--no-keys", help="Serve without API keys.")] = False,
    workers: Annotated[int, typer.Option(help="Pipeline worker threads.")] = 2,
    queue_limit: Annotated[int, typer.Option(help="Requests that may wait beyond the workers "
                                             "(more get 503).")] = 32,
    timeout: Annotated[float, typer.Option(help="Seconds per request, queue wait included "
                                           "(504).")] = 60.0,
    cors_origin: Annotated[list[str], typer.Option(help="Allowed CORS origin; repeat "
                                                   "(default: CORS off).")] = None,  # type: ignore[assignment]
    report_dir: Annotated[list[Path], typer.Option(help="Directory of HTML reports to list "
                                                   "(default docs/ablation).")] = None,  # type: ignore[assignment]
    access_log: Annotated[Path, typer.Option(help="JSON-lines access log file (default "
                                             "stderr).")] = None,  # type: ignore[assignment]
    dataset: Annotated[Path, typer.Option(help="Dataset of the default index.")] =
        DEFAULT_DATA / "scifact",
    ray: Annotated[bool, typer.Option("--ray", help="Serve replicas on Ray Serve (a local "
                                      "cluster unless --ray-address).")] = False,
    ray_address: RayAddressOption = "",
    replicas: Annotated[int, typer.Option(help="Ray Serve replicas.")] = 2,
    ray_ce: Annotated[str, typer.Option(help="With --ray: score this cross-encoder (as the "
                                        "pipelines' cross_encoder steps name their model) "
                                        "in batches shared across requests.")] = "",
    ray_ce_backend: Annotated[str, typer.Option(help="Its backend, as the steps name it "
                                                "(torch or onnx; default: none given).")] = "",
    ray_ce_max_length: Annotated[int, typer.Option(help="Its max_length, as the steps name "
                                                   "it (0: none given).")] = 0,
    ray_batch_size: Annotated[int, typer.Option(help="Most requests in one cross-encoder "
                                                "batch.")] = 8,
    ray_batch_wait_ms: Annotated[float, typer.Option(help="How long a batch waits to "
                                                     "fill.")] = 10.0,
) -> None:
    """Serve indexes and pipelines over HTTP, with a web page."""
    from intentrank.extras import require
    from intentrank.service.command import build_settings, log_stderr
    from intentrank.service.command import serve as run_service

    try:
        _check_int("--replicas", replicas)
        _check_int("--ray-batch-size", ray_batch_size)
        if ray_batch_wait_ms < 0:
            raise ConfigError(f"--ray-batch-wait-ms must be >= 0, got {ray_batch_wait_ms}")
        batching = None
        if ray_ce:
            if not (ray or ray_address):
                raise ConfigError("--ray-ce batches across Ray Serve replicas: add --ray")
            from intentrank.scale.serve import ScorerSpec

            batching = {"cross_encoder": ScorerSpec(ray_ce, ray_ce_backend or None,
                                                    ray_ce_max_length or None),
                        "max_batch_size": ray_batch_size,
                        "batch_wait_timeout_s": ray_batch_wait_ms / 1000}
        for module in ("uvicorn", "fastapi"):  # before the default index is loaded or built
            require(module, "service", "intentrank serve")
        settings, generated = build_settings(
            index, pipeline, keys_file, no_keys, workers, queue_limit, timeout, cors_origin,
            report_dir, access_log, dataset, LLM_SETTINGS["llm"], LLM_SETTINGS["llm_options"],
            log=log_stderr)
        run_service(settings, generated, host, port, ray=ray, ray_address=ray_address or None,
                    replicas=replicas, ray_batching=batching)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)


@app.command("eval")
def evaluate_cmd(
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset directory (corpus, "
                                            "queries.jsonl, qrels/<split>.tsv).")],
    pipeline: Annotated[list[str], typer.Option("--pipeline", "-p", help="Pipeline config "
                                                "file or shipped name; repeat to compare "
                                                "several.")] = None,  # type: ignore[assignment]
    index_dir: IndexOption = None,  # type: ignore[assignment]
    split: Annotated[str, typer.Option(help="Qrels split to evaluate.")] = "test",
    metrics: Annotated[str, typer.Option(help="Comma-separated metrics.")] =
        "nDCG@10,MRR@10,MAP@100,Recall@100,P@10,HitRate@10",
    baseline: Annotated[str, typer.Option(help="Pipeline to test the others against "
                                          "(default: the first).")] = "",
    runs_dir: Annotated[Path, typer.Option(help="Write a TREC run file per pipeline here.")] =
        None,  # type: ignore[assignment]
    per_query: Annotated[Path, typer.Option(help="Write per-query scores (JSON) here.")] =
        None,  # type: ignore[assignment]
    report: Annotated[Path, typer.Option(help="Write the Markdown table here.")] = None,  # type: ignore[assignment]
    round_grades: Annotated[bool, typer.Option("--round-grades", help="Round fractional "
                                               "relevance grades in the qrels to integers "
                                               "(by default they are an error).")] = False,
    judge: Annotated[bool, typer.Option("--judge", help="Judge the answers of pipelines "
                                        "with an answer stage (relevance -1..2 against the "
                                        "dataset's reference answers, faithfulness -1..1 "
                                        "against the gold documents).")] = False,
    judge_llm: Annotated[str, typer.Option("--judge-llm", help="LLM spec of the judge "
                                           "(default: the --llm option's).")] = "",
    ray: Annotated[bool, typer.Option("--ray", help="Run each pipeline as Ray tasks (a local "
                                      "cluster unless --ray-address); metrics only, no "
                                      "significance tests.")] = False,
    ray_address: RayAddressOption = "",
    ray_tasks: Annotated[int, typer.Option(help="Ray tasks per pipeline.")] = 2,
    bm25_backend: SearchBm25Option = "",
) -> None:
    """Run pipelines over a dataset split and report IR metrics with significance tests."""
    from intentrank.core.config import load_config, resolve_pipeline
    from intentrank.data.trec import write_run
    from intentrank.eval.metrics import validate_metrics

    names = pipeline or ["bm25", "dense", "rrf"]
    try:  # everything that can be checked before loading data, building or running
        metric_names = validate_metrics(metrics)
        configs = {n: resolve_pipeline(n) for n in names}
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"pipeline(s) {twice} given more than once")
        if baseline and baseline not in names:
            raise ConfigError(f"--baseline {baseline!r} is not one of the pipelines {names}")
        run_files = {n: f"{Path(n).stem}.trec" for n in names}
        clash = sorted(n for n in names
                       if list(run_files.values()).count(run_files[n]) > 1)
        if runs_dir and clash:
            raise ConfigError(f"--runs-dir: pipelines {clash} would write the same run file "
                              f"name; copy one config under another name")
        _output_dir(runs_dir, "--runs-dir")
        _output_file(per_query, "--per-query")
        _output_file(report, "--report")
        nodes = {n: load_config(configs[n])["pipeline"] for n in names}
        ds = _load_dataset(dataset, round_grades)
        notes = _DatasetWarnings(ds)
        notes.flush()
        queries, qrels = ds.split(split)
        references = ds.reference_answers() if judge else {}
        if judge and not references:
            raise ConfigError(f"--judge: {dataset} has no reference answers (a queries.jsonl "
                              f"with metadata.answer, as `intentrank generate` writes)")
        notes.flush()
        idx = _open_or_build(dataset, index_dir)
        ds.check_qrels(idx.doc_and_parent_ids, strict=RUN_OPTIONS["strict"])
        notes.flush()
        if bm25_backend:
            idx.set_bm25_backend(bm25_backend)
        if ray or ray_address:
            if judge:
                raise ConfigError("--judge runs in one process; leave out --ray")
            if bm25_backend:
                raise ConfigError("--bm25-backend with --ray: each Ray task opens the index "
                                  "itself; build it with `intentrank index --bm25-backend` "
                                  "instead")
            _check_int("--ray-tasks", ray_tasks)
            _eval_on_ray(configs, idx, queries, qrels, metric_names, ray_tasks,
                         ray_address or None, runs_dir, run_files)
            return
        with console.status(f"running {len(names)} pipeline(s) on {len(queries)} queries"):
            res, table = _compare_pipelines(
                nodes, idx, ds, queries, qrels, metric_names,
                baseline or names[0] if len(names) > 1 else None)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    out.print(f"\n{escape(ds.name)} / {escape(split)}: {len(queries)} queries\n")
    print(table)
    skipped = res.pipelines[0].scores.skipped if res.pipelines else []
    if skipped:
        _warn(f"{len(skipped)} of {len(queries)} judged queries have no relevant document "
              f"(e.g. {skipped[:3]}); like trec_eval, they are not evaluated")
    try:
        if runs_dir:
            for r in res.pipelines:
                write_run(r.to_run(), runs_dir / run_files[r.name], tag=r.name)
        if per_query:
            _write(per_query, json.dumps({r.name: r.scores.per_query for r in res.pipelines},
                                         indent=1))
        if report:
            _write(report, table + "\n")
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    if judge:
        _judge_answers(res, idx, qrels, references, judge_llm)
    _llm_health({r.name: r.trace for r in res.pipelines}, separate=len(res.pipelines) > 1)


def _eval_on_ray(configs: dict[str, Path], idx: Any, queries: Any, qrels: Any,
                 metrics: list[str], tasks: int, address: str | None, runs_dir: Path | None,
                 run_files: dict[str, str]) -> None:
    """Each pipeline as Ray tasks over the queries; one row of mean metrics per pipeline."""
    from intentrank.data.trec import write_run
    from intentrank.scale.evaluate import ray_evaluate

    table = Table(title=f"{len(queries)} queries, {tasks} Ray task(s) per pipeline")
    for col in ("pipeline", *metrics):
        table.add_column(col)
    traces = {}
    for name, config in configs.items():
        result, scores = ray_evaluate(config, idx.path, queries, qrels, metrics, tasks=tasks,
                                      address=address, resources=dict(LLM_SETTINGS))
        table.add_row(escape(name), *(f"{scores.aggregate[m]:.4f}" for m in metrics))
        traces[name] = result.trace
        if runs_dir:
            write_run(result.to_run(), runs_dir / run_files[name], tag=name)
    out.print(table)
    _llm_health(traces, separate=len(traces) > 1)


def _judge_answers(res: Any, idx: Any, qrels: Any, references: dict[str, str],
                   judge_llm: str) -> None:
    """Judge each answering pipeline's answers and print one row per pipeline."""
    from intentrank.eval.answer_judge import judge_rankings, summarize
    from intentrank.llm.client import load_llm

    try:
        llm = load_llm(judge_llm or LLM_SETTINGS["llm"], **LLM_SETTINGS["llm_options"])
        gold = {q: [idx.doc_text(d) for d, g in j.items() if g > 0 and d in idx.row_of]
                for q, j in qrels.items()}
        table = Table(title="answers judged (relevance -1..2, faithfulness -1..1)")
        for col in ("pipeline", "answers", "judged", "relevance", "faithfulness", "fallbacks"):
            table.add_column(col)
        for r in res.pipelines:
            if not any(x.query.answer is not None for x in r.rankings):
                _warn(f"--judge: pipeline {r.name} sets no answers (add an answer stage)")
                continue
            s = summarize(list(judge_rankings(llm, r.rankings, references, gold).values()))
            table.add_row(escape(r.name), str(s.n), str(s.n_relevance),
                          "-" if s.relevance is None else f"{s.relevance:.2f}",
                          "-" if s.faithfulness is None else f"{s.faithfulness:.2f}",
                          escape(", ".join(f"{k} {v}" for k, v in s.fallbacks.items()) or "-"))
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    out.print(table)


def _compare_pipelines(nodes: dict[str, Any], idx: Any, ds: Any, queries: Any, qrels: Any,
                       metrics: list[str], baseline: str | None) -> tuple[Any, str]:
    """Run config nodes through the experiment harness on ``queries``; the result and its
    quality table (Markdown, no title)."""
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import ExperimentSpec, PipelineSpec, TableSpec
    from intentrank.report.markdown import quality

    spec = ExperimentSpec([PipelineSpec(n, node) for n, node in nodes.items()], metrics,
                          dataset=ds.name, baseline=baseline, source="eval").check()
    res = run_experiment(spec, index=idx, dataset=ds, queries=queries, qrels=qrels,
                         **_llm_resources())
    table = quality(res, TableSpec("quality"))
    table.title = ""
    return res, table.to_markdown()


def _llm_resources() -> dict[str, Any]:
    """The global LLM options as ``run_experiment`` arguments."""
    return {"llm": LLM_SETTINGS["llm"],
            "resources": {"llm_options": LLM_SETTINGS["llm_options"]}}


@app.command()
def quickstart(
    dataset: Annotated[Path, typer.Option(help="BEIR dataset to index and evaluate.")] =
        DEFAULT_DATA / "scifact",
    index_dir: Annotated[Path, typer.Option("--index", help="Where to build the index.")] =
        Path("indexes/scifact"),
) -> None:
    """The main job on the embedded default: index SciFact, answer a few queries, evaluate."""
    from intentrank.core.config import load_config, resolve_pipeline
    from intentrank.pipelines import pipeline_from_config

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        ds = _load_dataset(dataset)
        notes = _DatasetWarnings(ds)
        notes.flush()
        queries, qrels = ds.split("test")
        notes.flush()
        idx = _open_or_build(dataset, index_dir)
        ds.check_qrels(idx.doc_and_parent_ids, strict=RUN_OPTIONS["strict"])
        notes.flush()
        rrf = pipeline_from_config(resolve_pipeline("rrf"), index=idx)
        for q in queries[:3]:
            top = rrf.search(q.text, k=3)
            out.print(f"\n[bold]{escape(q.text)}[/]")
            for rank, d in enumerate(top.docs, 1):
                mark = "[green]relevant[/]" if qrels[q.id].get(d.doc_id, 0) > 0 else ""
                out.print(f"  {rank}. {escape(f'[{d.doc_id}]')} "
                          f"{escape(idx.doc(d.doc_id).title[:80])} {mark}")
        nodes = {n: load_config(resolve_pipeline(n))["pipeline"]
                 for n in ("bm25", "dense", "rrf", "weighted")}
        with console.status(f"evaluating 4 pipelines on {len(queries)} test queries"):
            res, table = _compare_pipelines(nodes, idx, ds, queries, qrels,
                                            ["nDCG@10", "MRR@10", "Recall@100"], "bm25")
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    out.print(f"\n{escape(ds.name)} test ({len(queries)} queries)\n")
    print(table)
    _llm_health({r.name: r.trace for r in res.pipelines}, separate=True)


@app.command("train-reranker")
def train_reranker_cmd(
    dataset: TrainingDatasetArg,
    out_dir: Annotated[Path, typer.Option("--out", help="Model directory to write (default: "
                                          "<cache>/models/cross-encoder-<dataset>, where the "
                                          "cross_encoder stage looks).")] = None,  # type: ignore[assignment]
    index_dir: MiningIndexOption = None,  # type: ignore[assignment]
    split: TrainSplitOption = "train",
    budget_minutes: Annotated[float, typer.Option(help="Wall-clock budget; training stops "
                                                  "after the step that crosses it and saves "
                                                  "what it has (0 = no limit).")] = 15.0,
    epochs: Annotated[int, typer.Option(help="Passes over the training queries (negatives "
                                        "are resampled each pass).")] = 1,
    negatives: Annotated[int, typer.Option(help="Hard negatives per query, from BM25 and "
                                           "dense top-30 alternately.")] = 7,
    skip_top: SkipTopOption = 0,
    max_length: Annotated[int, typer.Option(help="Tokens per query-passage pair (the "
                                            "cross_encoder stage reuses it).")] = 128,
    batch_size: Annotated[int, typer.Option(help="Pairs per optimiser step.")] = 16,
    loss: Annotated[str, typer.Option(help="listwise (softmax over a positive and its "
                                      "query's negatives) or bce (each pair labelled "
                                      "1/0).")] = "listwise",
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW).")] = 5e-5,
    max_queries: Annotated[int, typer.Option(help="Train on at most this many queries (0 = "
                                             "all).")] = 0,
    seed: Annotated[int, typer.Option(help="Random seed (sampling and initialisation).")] = 13,
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help="Also export an int8 ONNX "
                                       "model (model_int8.onnx) for the onnx backend.")] = True,
) -> None:
    """Fine-tune a MiniLM cross-encoder on a dataset's train qrels with BM25/dense hard
    negatives, on CPU within a time budget; saves the model and training.json."""
    from intentrank.models.cross_encoder import default_reranker_dir
    from intentrank.training.reranker import MINING_DEPTH, train_reranker

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target = out_dir or default_reranker_dir(dataset.name)
    try:
        from intentrank.core.params import check_number

        for option, value, minimum in (("--epochs", epochs, 1), ("--negatives", negatives, 1),
                                       ("--max-length", max_length, 8),
                                       ("--batch-size", batch_size, 1),
                                       ("--max-queries", max_queries, 0)):
            _check_int(option, value, minimum)
        check_number("--lr", lr, above=0)
        check_number("--budget-minutes", budget_minutes, minimum=0)
        _check_skip_top(skip_top, MINING_DEPTH)
        if target.exists() and not target.is_dir():
            raise ConfigError(f"--out {target} is a file; give a directory")
        result = train_reranker(  # refuses the test split before opening or building
            dataset, target, index_dir or Path("indexes") / dataset.name, split=split, loss=loss,
            negatives_per_query=negatives, skip_top=skip_top, epochs=epochs,
            batch_size=batch_size, max_length=max_length, lr=lr,
            time_budget_s=budget_minutes * 60 or None, seed=seed,
            max_queries=max_queries or None, onnx=onnx, progress=True,
            log=lambda m: console.print(f"  {escape(m)}"),
        )
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    info = result.info
    console.print(f"[green]reranker saved[/] {result.out_dir}: {info['n_queries']} {split} "
                  f"queries, {info['pairs_trained']} pairs, {info['steps_done']}/"
                  f"{info['steps_planned']} steps in {info['seconds']['training']:.0f}s "
                  f"(stopped by {info['stopped_by']})")
    console.print(f"  use it: [cyan]- cross_encoder: {{model: {result.out_dir}, top_k: 100}}[/]")


@app.command("train-embedder")
def train_embedder_cmd(
    dataset: TrainingDatasetArg,
    out_dir: Annotated[Path, typer.Argument(help="Model directory to write (use it with "
                                            "`intentrank index --model DIR`).")],
    index_dir: MiningIndexOption = None,  # type: ignore[assignment]
    split: TrainSplitOption = "train",
    extra: Annotated[list[str], typer.Option(help="More training questions over the same "
                                             "corpus: DIR:SPLIT (e.g. a generated set: "
                                             "runs/gen:generated); repeat.")] = None,  # type: ignore[assignment]
    budget_minutes: Annotated[float, typer.Option(help="Wall-clock budget; training stops "
                                                  "after the step that crosses it (0 = no "
                                                  "limit).")] = 15.0,
    epochs: Annotated[int, typer.Option(help="Passes over the training questions.")] = 1,
    batch_size: Annotated[int, typer.Option(help="Questions per step (in-batch negatives).")]
        = 32,
    negatives: Annotated[int, typer.Option(help="Hard negatives per question (BM25 and dense "
                                           "top --depth).")] = 1,
    depth: Annotated[int, typer.Option(help="Where hard negatives are mined.")] = 30,
    skip_top: SkipTopOption = 0,
    max_seq_length: Annotated[int, typer.Option(help="Tokens per text while training.")] = 128,
    lr: Annotated[float, typer.Option(help="Peak learning rate.")] = 2e-5,
    max_queries: Annotated[int, typer.Option(help="Train on at most this many questions (0 = "
                                             "all).")] = 0,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 13,
) -> None:
    """Fine-tune the MiniLM bi-encoder (the dense leg) on a dataset's train qrels and any
    generated questions, with BM25/dense hard negatives, on CPU within a time budget."""
    from intentrank.core.params import check_number
    from intentrank.training.embedder import train_embedder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        for option, value, minimum in (("--epochs", epochs, 1), ("--negatives", negatives, 0),
                                       ("--depth", depth, 1), ("--batch-size", batch_size, 2),
                                       ("--max-seq-length", max_seq_length, 8),
                                       ("--max-queries", max_queries, 0)):
            _check_int(option, value, minimum)
        check_number("--lr", lr, above=0)
        check_number("--budget-minutes", budget_minutes, minimum=0)
        _check_skip_top(skip_top, depth)
        sources = []
        for item in extra or []:
            where, sep, extra_split = item.rpartition(":")
            if not sep or not where or not extra_split:
                raise ConfigError(f"--extra {item!r}: give DIR:SPLIT (e.g. runs/gen:generated)")
            sources.append((Path(where), extra_split))
        if out_dir.exists() and not out_dir.is_dir():
            raise ConfigError(f"{out_dir} is a file; give a directory")
        result = train_embedder(  # refuses the test split before opening or building
            dataset, out_dir, index_dir or Path("indexes") / dataset.name, split=split,
            extra=sources, negatives_per_query=negatives, depth=depth, skip_top=skip_top,
            epochs=epochs,
            batch_size=batch_size, max_seq_length=max_seq_length, lr=lr,
            time_budget_s=budget_minutes * 60 or None, seed=seed,
            max_queries=max_queries or None, progress=True,
            log=lambda m: console.print(f"  {escape(m)}"))
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    info = result.info
    console.print(f"[green]embedder saved[/] {result.out_dir}: {info['n_queries']} questions, "
                  f"{info['steps_done']}/{info['steps_planned']} steps in "
                  f"{info['seconds']['training']:.0f}s (stopped by {info['stopped_by']})")
    console.print(f"  use it: [cyan]intentrank index CORPUS DIR --model {result.out_dir}[/]")


def _tuning_inputs(dataset: Path, index_dir: Path | None, split: str, metric: str,
                   sample: int, purpose: str):  # noqa: ANN202 (Dataset, Index, metric name)
    """What the tune-* commands share, checked in this order before any work: the split is
    not test, the metric and sample are valid, the split exists (dataset warnings shown),
    then the index is opened (or built)."""
    from intentrank.data.dataset import refuse_test_split
    from intentrank.eval.metrics import validate_metrics

    refuse_test_split(split, purpose)
    metric = validate_metrics([metric])[0]
    _check_int("--sample", sample, 0)
    ds = _load_dataset(dataset)
    notes = _DatasetWarnings(ds)
    notes.flush()
    ds.split(split)  # an unknown split fails here, before the index is built
    notes.flush()
    return ds, _open_or_build(dataset, index_dir), metric


def _saved_weights(path: Path, res: Any, metric: str, split: str) -> None:
    """The tune-* commands' last line: where the weights went, the weights, their score."""
    weights = " ".join(f"{name}={value}" for name, value in res.best.items())
    console.print(f"[green]saved[/] {escape(str(path))}: {weights} ({metric} {res.score:.4f} "
                  f"on {res.n_queries} {split} queries)")


@app.command("tune-fuq")
def tune_fuq_cmd(
    dataset: TuningDatasetArg,
    name: Annotated[str, typer.Option(help="Save the weights under this parameter-set name "
                                      "(use it as `fuq: {params: NAME}`); default "
                                      "fuq-<dataset>.")] = "",
    index_dir: IndexOption = None,  # type: ignore[assignment]
    split: TuneSplitOption = "train",
    metric: Annotated[str, typer.Option(help="Objective, e.g. nDCG@3, nDCG@10, Recall@3.")] =
        "nDCG@3",
    sample: Annotated[int, typer.Option(help="Tune on a fixed-seed sample of this many "
                                        "queries (0 = all; each costs one LLM call).")] = 0,
    seed: SampleSeedOption = 0,
) -> None:
    """Grid-search FUQ's alpha/beta/gamma on a training split and save them by name."""
    from intentrank.core.saved_params import save_params
    from intentrank.llm.client import load_llm
    from intentrank.tune.fuq import tune_fuq_on_split
    from intentrank.types import Trace

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    trace = Trace()
    try:
        ds, idx, metric = _tuning_inputs(dataset, index_dir, split, metric, sample,
                                         "tune FUQ weights")
        llm = load_llm(LLM_SETTINGS["llm"], **LLM_SETTINGS["llm_options"])
        with console.status(f"predicting follow-ups and tuning on {ds.name}/{split}"):
            res = tune_fuq_on_split(ds, idx, llm, split, metric, sample, seed, trace=trace)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    _llm_health(trace)  # under --strict, weights tuned on fallback follow-ups are not saved
    try:
        path = save_params(name or f"fuq-{ds.name}", res, dataset=ds.name, split=split,
                           sample=sample, seed=seed)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    _saved_weights(path, res, metric, split)


@app.command("tune-modality")
def tune_modality_cmd(
    dataset: TuningDatasetArg,
    name: Annotated[str, typer.Option(help="Save the weights under this parameter-set name "
                                      "(use it as `fuse: {method: weighted, params: NAME}`); "
                                      "default modality-<dataset>.")] = "",
    index_dir: IndexOption = None,  # type: ignore[assignment]
    split: TuneSplitOption = "train",
    metric: Annotated[str, typer.Option(help="Objective, e.g. nDCG@10.")] = "nDCG@10",
    step: Annotated[float, typer.Option(help="Grid step on the weight simplex.")] = 0.1,
    sample: Annotated[int, typer.Option(help="Tune on a fixed-seed sample of this many "
                                        "queries (0 = all).")] = 0,
    seed: SampleSeedOption = 0,
) -> None:
    """Grid-search the static dense/sparse/graph weights of the weighted fusion on a training
    split and save them by name."""
    from intentrank.core.params import check_number
    from intentrank.core.saved_params import save_params
    from intentrank.tune.modality import tune_modality_on_split

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        check_number("--step", step, above=0, maximum=0.5)
        ds, idx, metric = _tuning_inputs(dataset, index_dir, split, metric, sample,
                                         "tune modality weights")
        with console.status(f"tuning modality weights on {ds.name}/{split}"):
            res = tune_modality_on_split(ds, idx, split, metric, step, sample, seed)
        path = save_params(name or f"modality-{ds.name}", res, dataset=ds.name, split=split,
                           sample=sample, seed=seed, step=step)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    _saved_weights(path, res, metric, split)


@app.command()
def ablate(
    dataset: Annotated[Path, typer.Argument(help="BEIR-layout dataset directory.")],
    index_dir: IndexOption = None,  # type: ignore[assignment]
    split: Annotated[str, typer.Option(help="Qrels split to evaluate on.")] = "test",
    sample: Annotated[int, typer.Option(help="Fixed-seed sample of this many queries (0 = "
                                        "the whole split).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the sample and of the tests.")] = 0,
    out_path: Annotated[Path, typer.Option("--out", help="Report path without suffix; writes "
                                           ".md, .html and .json (default "
                                           "runs/ablation/<dataset>).")] = None,  # type: ignore[assignment]
    cross_encoder: Annotated[str, typer.Option(help="Cross-encoder model directory or hub "
                                               "name (default: the reranker train-reranker "
                                               "saved for SciFact).")] = "",
    use_ce: Annotated[bool, typer.Option("--ce/--no-ce", help="Run the cross-encoder "
                                         "configurations.")] = True,
    use_llm: Annotated[bool, typer.Option("--llm-stages/--no-llm-stages", help="Run the "
                                          "LLM configurations (listwise, dynamic "
                                          "weights).")] = True,
    dynamic: Annotated[bool, typer.Option("--dynamic/--no-dynamic", help="Also run the "
                                          "configurations with LLM-assigned weights.")] = True,
    baseline: Annotated[str, typer.Option(help="Configuration the others are tested "
                                          "against.")] = "Tri-modal",
    listwise_chars: Annotated[int, typer.Option(help="Characters of each passage the "
                                                "listwise LLM sees (default: the experiment "
                                                "file's).")] = 0,
    experiment: Annotated[str, typer.Option(help="The ablation's experiment file or shipped "
                                            "name (its pipelines; dataset, split and sample "
                                            "come from the options).")] = "cascade-ablation",
) -> None:
    """Ablate the cascaded tri-modal pipeline: Dense only, Bi-modal, Tri-modal, Tri-modal +
    CE, Full pipeline (static and dynamic weights) with metrics, swaps, error analysis,
    latency and significance; Markdown + HTML + JSON report. The configurations are the
    experiment file's (default: the shipped cascade-ablation, CE over the fused top-30 fused
    with the first stage by RRF); edit a copy of it for other cut-offs."""
    from intentrank.eval.spec import load_experiment
    from intentrank.report import report_paths

    target = out_path or Path("runs") / "ablation" / dataset.name
    try:
        for path in report_paths(target):
            _output_file(path, "--out")
        _check_int("--sample", sample, 0)
        if listwise_chars:
            _check_int("--listwise-chars", listwise_chars)
        spec = load_experiment(experiment).replace(dataset=str(dataset), split=split,
                                                   sample=sample, seed=seed, baseline=baseline)
        if listwise_chars and use_llm:
            spec = spec.with_params("listwise", max_passage_chars=listwise_chars)
        if cross_encoder and use_ce:
            spec = spec.with_params("cross_encoder", model=cross_encoder)
        without = ([] if use_ce else ["cross_encoder"]) + ([] if use_llm else ["llm"]) + (
            [] if dynamic else ["dynamic"])
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    _run_experiment_file(spec, target, dataset, index_dir, without)


def _run_experiment_file(spec: Any, target: Path, dataset: Path | None, index_dir: Path | None,
                         without: list[str]) -> None:
    """Run an experiment, print its Markdown report, write .md/.html/.json at ``target``
    and the LLM health lines (each LLM request counted once across pipelines)."""
    from intentrank.eval.harness import load_experiment_dataset, run_experiment
    from intentrank.report import report_paths, write_report
    from intentrank.report.markdown import render

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        for path in report_paths(target):
            _output_file(path, "--out")
        ds = _load_dataset(dataset) if dataset else load_experiment_dataset(spec, DEFAULT_DATA)
        notes = _DatasetWarnings(ds)
        notes.flush()
        ds.split(spec.split)  # an unknown split fails here, before the index is built
        notes.flush()
        idx = _open_or_build(ds.root, index_dir or (Path(spec.index) if spec.index else None))
        ds.check_qrels(idx.doc_and_parent_ids, strict=RUN_OPTIONS["strict"])
        notes.flush()
        result = run_experiment(spec, index=idx, dataset=ds, without=without,
                                log=lambda m: console.print(f"  {escape(m)}"),
                                **_llm_resources())
        paths = write_report(result, target)
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    print(render(result))
    console.print("[green]wrote[/] " + escape(", ".join(str(p) for p in paths)))
    _llm_health([r.trace for r in result.pipelines])


@app.command("experiment")
def experiment_cmd(
    file: Annotated[str, typer.Argument(help="Experiment file (YAML) or shipped name "
                                        "(cascade-ablation, fuq).")],
    sample: Annotated[int, typer.Option(help="Sample this many queries instead of the file's "
                                        "sample (0 = the whole split).")] = None,  # type: ignore[assignment]
    seed: Annotated[int, typer.Option(help="Seed of the sample (default: the file's).")] =
        None,  # type: ignore[assignment]
    out_path: Annotated[Path, typer.Option("--out", help="Report path without suffix; writes "
                                           ".md, .html and .json (default "
                                           "runs/experiments/<file name>).")] = None,  # type: ignore[assignment]
    dataset: Annotated[Path, typer.Option(help="Dataset directory (default: the file's "
                                          "dataset under $INTENTRANK_DATA).")] = None,  # type: ignore[assignment]
    index_dir: Annotated[Path, typer.Option("--index", help="Index directory (default: the "
                                            "file's, else indexes/<dataset>).")] = None,  # type: ignore[assignment]
    without: Annotated[list[str], typer.Option(help="Skip the pipelines that use this stage "
                                               "or fusion method ('llm': every LLM stage); "
                                               "repeatable.")] = None,  # type: ignore[assignment]
    set_params: Annotated[list[str], typer.Option("--set", help="STAGE.PARAM=VALUE: set a "
                                                  "parameter of every such stage (VALUE is "
                                                  "YAML); repeatable.")] = None,  # type: ignore[assignment]
) -> None:
    """Run an experiment file: every pipeline on the same queries, shared prefixes computed
    once; metrics, significance, swaps, degradations and cold latency in Markdown, HTML and
    JSON."""
    import yaml

    from intentrank.core.registry import FUSERS, known_names
    from intentrank.eval.spec import load_experiment

    try:
        spec = load_experiment(file)
        if sample is not None:
            _check_int("--sample", sample, 0)
            spec = spec.replace(sample=sample)
        if seed is not None:
            _check_int("--seed", seed, 0)
            spec = spec.replace(seed=seed)
        if dataset is not None:
            spec = spec.replace(dataset=str(dataset))
        for item in set_params or []:
            target, eq, value = item.partition("=")
            stage, dot, param = target.partition(".")
            if not (eq and dot and stage and param):
                raise ConfigError(f"--set {item!r}: expected STAGE.PARAM=VALUE")
            spec = spec.with_params(stage, **{param: yaml.safe_load(value)})
        names = {*known_names(), *FUSERS, "llm"}
        unknown = sorted(set(without or []) - names)
        if unknown:
            raise ConfigError(f"--without {unknown}: not a stage name, fusion method or "
                              f"'llm'; known: {', '.join(sorted(names))}")
    except (IntentrankError, ValueError, OSError, yaml.YAMLError) as exc:
        _fail(exc)
    target = out_path or Path("runs") / "experiments" / (
        spec.path.stem if spec.path else "experiment")
    _run_experiment_file(spec, target, dataset, index_dir, list(without or []))


@app.command("generate")
def generate_cmd(
    corpus: Annotated[Path, typer.Argument(help="Corpus: a BEIR directory, or a .jsonl/.csv "
                                           "file (plain, .gz or .zip).")],
    out_dir: Annotated[Path, typer.Argument(help="Directory for the question set (BEIR "
                                            "layout); an earlier run there is resumed.")],
    config: Annotated[Path, typer.Option("--config", help="Categorisation file (YAML), or "
                                         "a shipped one by name: 'default' (DataMorgana's "
                                         "taxonomy) or 'search-queries' (training data).")]
        = None,  # type: ignore[assignment]
    n: Annotated[int, typer.Option("--n", help="Questions to keep.")] = 100,
    multi_doc: Annotated[float, typer.Option(help="Share of attempts that are two-document "
                                             "questions.")] = 0.5,
    minutes: MinutesOption = 0.0,
    max_attempts: Annotated[int, typer.Option(help="Stop after this many attempts (0 = 5 x "
                                              "--n).")] = 0,
    split: Annotated[str, typer.Option(help="Write qrels/<split>.tsv ('train' for training "
                                       "data).")] = "test",
    seed: Annotated[int, typer.Option(help="Random seed of the sampling.")] = 0,
    index_dir: Annotated[Path, typer.Option("--index", help="Index of the corpus (default "
                                            "indexes/<corpus name>, built if missing).")]
        = None,  # type: ignore[assignment]
    llm_checks: Annotated[bool, typer.Option("--llm-checks/--no-llm-checks",
                                             help="Also ask the LLM whether each answer is "
                                             "supported and whether one document answers a "
                                             "two-document question alone (useful with a "
                                             "strong model; the 0.5B says yes to nearly all).")]
        = False,
) -> None:
    """Generate questions with known source documents (single- and two-document, categories
    sampled from a taxonomy), filtered for faithfulness; writes a BEIR dataset."""
    from intentrank.data.dataset import CORPUS_NAMES, _first_existing
    from intentrank.generate.categories import load_taxonomy
    from intentrank.generate.generator import GenerationSettings, generate_questions
    from intentrank.llm.client import load_llm
    from intentrank.types import Trace

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        _check_int("--n", n)
        _check_int("--max-attempts", max_attempts, 0)
        from intentrank.core.params import check_number

        check_number("--multi-doc", multi_doc, minimum=0, maximum=1)
        check_number("--minutes", minutes, minimum=0)
        settings = GenerationSettings(n=n, multi_doc=multi_doc, seed=seed, split=split,
                                      max_minutes=minutes or None,
                                      max_attempts=max_attempts or None,
                                      llm_checks=llm_checks)
        taxonomy = load_taxonomy(config)
        source = _first_existing(corpus, CORPUS_NAMES, "corpus") if corpus.is_dir() else corpus
        if not source.is_file():
            raise ConfigError(f"{corpus}: no such corpus file or directory")
        if out_dir.exists() and not out_dir.is_dir():
            raise ConfigError(f"{out_dir} is a file; give a directory")
        name = corpus.name if corpus.is_dir() else corpus.name.split(".")[0]
        idx = _open_or_build(corpus, index_dir or Path("indexes") / name)
        llm = load_llm(LLM_SETTINGS["llm"], **LLM_SETTINGS["llm_options"])
        trace = Trace()
        report = generate_questions(idx, source, out_dir, llm, taxonomy=taxonomy,
                                    settings=settings, trace=trace, progress=True,
                                    log=lambda m: console.print(f"  {escape(m)}"))
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    info = report.info
    _llm_health(trace)
    console.print(f"[green]question set ready[/] {report.out_dir}: {report.kept} questions "
                  f"kept of {report.attempts} attempts (stopped by "
                  f"{info['runs'][-1]['stopped_by']}); rejected: "
                  + (", ".join(f"{k} {v}" for k, v in info["rejected"].items()) or "none"))
    table = Table("categorisation", "category", "attempts", "kept", "yield", "too long/short")
    for group, rows in info["yield"].items():
        for cat, row in rows.items():
            share = f"{row['kept'] / row['attempts']:.0%}" if row["attempts"] else "-"
            table.add_row(group, cat, str(row["attempts"]), str(row["kept"]), share,
                          str(row.get("rejected", {}).get("length", 0)))
    console.print(table)


CAST_YEARS = ("cast2019", "cast2020", "cast2021")


def _conversations(source: str) -> list[Any]:
    """Conversations from a conversations.jsonl file, a dataset directory holding one, or a
    TREC CAsT year (``cast2019``, ``cast2020``, ``cast2021``, read from the shared data)."""
    from intentrank.data.conversations import load_cast, load_conversations

    if source in CAST_YEARS:
        return load_cast(int(source[4:]), DEFAULT_DATA / "trec-cast")
    path = Path(source)
    if path.is_dir():
        path = path / "conversations.jsonl"
    if not path.exists():
        raise ConfigError(f"{source}: no such conversations file or directory (give a "
                          f"conversations.jsonl, a directory with one, or one of "
                          f"{', '.join(CAST_YEARS)})")
    return load_conversations(path)


@app.command("reformulate")
def reformulate_cmd(
    conversations: Annotated[str, typer.Argument(help="A conversations.jsonl file, a "
                                                 "directory with one, or cast2019 / cast2020 "
                                                 "/ cast2021.")],
    method: Annotated[list[str], typer.Option("--method", "-m", help="Reformulation "
                                              "method (repeat for several): rewrite_full, "
                                              "rewrite_summary, rewrite_questions, hyde, "
                                              "hyde_masked, hyde_doc, hyde_doc_masked, "
                                              "concat_turns.")] = ["rewrite_full"],  # noqa: B006
    out_file: Annotated[Path, typer.Option("--out", help="JSONL output (default: stdout).")]
        = None,  # type: ignore[assignment]
    genre: Annotated[str, typer.Option(help="What the corpus's documents are, for "
                                       "hyde_doc / hyde_doc_masked.")] = "passage",
    max_history_words: Annotated[int, typer.Option(help="History budget in words (longer "
                                                   "conversations keep the first and the "
                                                   "latest turns).")] = 300,
    max_answer_words: Annotated[int, typer.Option(help="Each earlier answer clipped to this "
                                                  "many words.")] = 40,
    limit: Annotated[int, typer.Option(help="Only the first N turns (0 = all).")] = 0,
) -> None:
    """Rewrite conversational turns into standalone queries (one JSON line per turn and
    method: the turn, the reformulation, the gold rewrite when known, any fallback)."""
    from rich.progress import Progress

    from intentrank.llm.client import load_llm
    from intentrank.query.reformulate import METHODS, ConcatTurns, ConversationalReformulator
    from intentrank.types import Ranking, Trace

    try:
        _check_int("--limit", limit, 0)
        unknown = [m for m in method if m not in (*METHODS, "concat_turns")]
        if unknown:
            raise ConfigError(f"--method: unknown {', '.join(map(repr, unknown))}; choose "
                              f"from {', '.join([*METHODS, 'concat_turns'])}")
        _output_file(out_file, "--out")
        llm = load_llm(LLM_SETTINGS["llm"], **LLM_SETTINGS["llm_options"]) \
            if any(m in METHODS for m in method) else None
        stages = [ConcatTurns() if m == "concat_turns" else
                  ConversationalReformulator(llm, m, genre=genre,  # type: ignore[arg-type]
                                             max_history_words=max_history_words,
                                             max_answer_words=max_answer_words)
                  for m in method]
        convs = _conversations(conversations)
        turns = [(c, t, q) for c in convs for t, q in zip(c.turns, c.queries(), strict=True)]
        turns = turns[:limit] if limit else turns
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    lines, traces = [], []
    with Progress(console=console, transient=True) as bar:
        for stage in stages:
            task = bar.add_task(stage.name, total=len(turns))
            trace = Trace()
            for start in range(0, len(turns), 8):
                chunk = turns[start:start + 8]
                outs = stage([Ranking(q) for _, _, q in chunk], trace)
                fell = {e.query_id: e.details.get("reason") for e in trace.events
                        if e.kind == "fallback"}
                for (conv, turn, q), r in zip(chunk, outs, strict=True):
                    lines.append({"conversation": conv.id, "turn": turn.id,
                                  "question": turn.question, "method": stage.name,
                                  "reformulation": r.query.text,
                                  "changed": r.query.text != q.text,
                                  "fallback": fell.get(q.id),
                                  **({"masked": r.query.derived_of("masked")[-1]}
                                     if r.query.derived_of("masked") else {}),
                                  **({"gold": turn.rewrite} if turn.rewrite else {})})
                bar.advance(task, len(chunk))
            traces.append(trace)
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    if out_file is None:
        sys.stdout.write(text)
    else:
        _write(out_file, text)
        console.print(f"[green]wrote[/] {out_file}: {len(lines)} reformulations "
                      f"({len(turns)} turns x {len(stages)} method(s))")
    _llm_health(traces, separate=True)


@app.command("cast-passages")
def cast_passages_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Directory for the dataset (corpus.jsonl, "
                                            "conversations.jsonl, qrels/test.tsv).")],
    cast_root: Annotated[Path, typer.Option(help="The trec-cast data directory.")]
        = None,  # type: ignore[assignment]
) -> None:
    """Write TREC CAsT 2021's canonical response passages as a labelled conversational
    dataset: each turn's own passage is its relevant document."""
    from intentrank.data.conversations import write_cast2021_passages

    try:
        _output_dir(out_dir, "OUT_DIR")
        root = write_cast2021_passages(out_dir, cast_root or DEFAULT_DATA / "trec-cast")
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    console.print(f"[green]wrote[/] {root} (evaluate with `intentrank eval {root} -p ...`)")


@app.command("generate-conversations")
def generate_conversations_cmd(
    dataset: Annotated[Path, typer.Argument(help="A judged BEIR collection (corpus, queries, "
                                            "qrels).")],
    out_dir: Annotated[Path, typer.Argument(help="Directory for the conversational set "
                                            "(conversations.jsonl, qrels/, corpus link); an "
                                            "earlier run there is resumed.")],
    turns: Annotated[int, typer.Option(help="Turns per conversation, the judged query "
                                       "last (3, 6, 11, ...).")] = 3,
    n: Annotated[int, typer.Option("--n", help="Conversations to keep.")] = 50,
    split: Annotated[str, typer.Option(help="The split whose judged queries end the "
                                       "conversations.")] = "test",
    seed: Annotated[int, typer.Option(help="Random seed of the query order.")] = 0,
    minutes: MinutesOption = 0.0,
    max_attempts: Annotated[int, typer.Option(help="Stop after this many attempts (0 = no "
                                              "limit).")] = 0,
    follow_up: Annotated[str, typer.Option(
        "--follow-up", help="Who writes the contextual last turn: llm (the LLM's follow-up), "
        "rule (the query with its topic replaced by a pronoun, no other term lost) or "
        "llm_or_rule (the LLM's, unless it would be rejected as self_contained, drifted or "
        "unrecoverable: then the rule's, counted as rule_follow_ups).")] = "llm_or_rule",
) -> None:
    """Generate labelled conversations: LLM-written earlier turns, then the judged query as a
    contextual follow-up (its original text is the gold rewrite, its qrels label the turn)."""
    from intentrank.core.params import check_number
    from intentrank.generate.conversations import generate_conversations
    from intentrank.llm.client import load_llm
    from intentrank.types import Trace

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    trace = Trace()
    try:
        _check_int("--n", n)
        _check_int("--turns", turns, 2)
        _check_int("--max-attempts", max_attempts, 0)
        check_number("--minutes", minutes, minimum=0)
        llm = load_llm(LLM_SETTINGS["llm"], **LLM_SETTINGS["llm_options"])
        report = generate_conversations(dataset, out_dir, split=split, n=n, turns=turns,
                                        seed=seed, llm=llm, minutes=minutes or None,
                                        max_attempts=max_attempts or None, trace=trace,
                                        follow_up=follow_up, progress=True,
                                        log=lambda m: console.print(f"  {escape(m)}"))
    except (IntentrankError, ValueError, OSError) as exc:
        _fail(exc)
    _llm_health(trace)
    rejected = report.info.get("rejected", {})
    console.print(f"[green]conversations ready[/] {report.out_dir}: {report.kept} kept of "
                  f"{report.attempts} attempts; rejected: "
                  + (", ".join(f"{k} {v}" for k, v in rejected.items() if v) or "none")
                  + f"; follow-ups by rule: {report.info.get('rule_follow_ups', 0)}")


if __name__ == "__main__":
    app()
