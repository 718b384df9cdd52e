"""``intentrank index``, ``search`` and ``answer``: build an index, query it, answer from
it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from intentrank.cli.common import (
    app,
    cli_errors,
    console,
    corpus,
    llm_health,
    log,
    out,
    settings_of,
    warn,
    warn_if_nothing_passes,
)
from intentrank.cli.ingest import (
    folder_options,
    is_document_folder,
    options_record,
    print_skipped,
    read_documents,
    record_options,
)
from intentrank.cli.options import (
    CorpusArg,
    FilterOption,
    RayAddressOption,
    RayPanel,
    SearchBm25Option,
    panel,
)
from intentrank.core.params import ParameterError, check_int
from intentrank.errors import ConfigError
from intentrank.filters import parse_filter
from intentrank.types import Query

Bm25Panel, DensePanel, AnnPanel = panel("BM25"), panel("Dense"), panel("Dense search (faiss)")
FolderPanel = panel("A folder of documents")
IndexDirArg = Annotated[Path, typer.Argument(help="Index directory.")]


@app.command()
@cli_errors
def index(
    ctx: typer.Context,
    source: CorpusArg,
    out_dir: Annotated[str, typer.Argument(help="Index directory to create, or a Postgres "
                                           "table to write: postgresql://...?table=NAME "
                                           "(docs/postgres.md).")],
    legs: Annotated[str, typer.Option(help="Comma-separated legs to build.")] =
        "bm25,dense,tfidf,graph",
    k1: Annotated[float, Bm25Panel(help="BM25 k1.")] = 1.5,
    b: Annotated[float, Bm25Panel(help="BM25 b.")] = 0.75,
    stemmer: Annotated[str, Bm25Panel(help="PyStemmer language for BM25, or 'none'.")] =
                                      "english",
    stopwords: Annotated[str, Bm25Panel(help="bm25s stopword list for BM25, or 'none'.")] =
                                        "en",
    model: Annotated[str, DensePanel(help="Embedder: 'minilm' (bundled), a hub name or a "
                                     "local directory.")] = "minilm",
    backend: Annotated[str, DensePanel(help="Embedder backend: sentence-transformers or "
                                       "onnx.")] = "sentence-transformers",
    precision: Annotated[str, DensePanel(help="Passage and query vectors: int8 (an int8 "
                                         "ONNX export of the model, about 3x fp32's "
                                         "passages/s and 2.5x less CPU per query, dense "
                                         "nDCG@10 within 0.01 on SciFact: benchmarks "
                                         "'speed') or fp32 (torch passages).")] = "int8",
    batch_size: Annotated[int, DensePanel(help="Embedding batch size.")] = 64,
    chunk_size: Annotated[int, typer.Option(help="Split a corpus file's documents into "
                                            "passages of this many words (0 = keep whole).")] = 0,
    chunk_overlap: Annotated[int | None, typer.Option(
        help="Shared by consecutive passages: words with --chunk-size (default 50), MiniLM "
             "tokens for a folder (default 32).")] = None,
    chunk_tokens: Annotated[int, FolderPanel(help="A folder's passages: at most this many "
                                             "MiniLM tokens, cut at headings, paragraphs, "
                                             "sentences (0 = what the embedder and the "
                                             "cross-encoder read whole: 221).")] = 0,
    include: Annotated[list[str] | None, FolderPanel(help="Glob of the files to read "
                                                     "(repeatable; default every .md, .txt, "
                                                     ".html, .htm, .pdf, .docx).")] = None,
    exclude: Annotated[list[str] | None, FolderPanel(help="Glob of files or folders to "
                                                     "leave out (repeatable; hidden ones "
                                                     "always are).")] = None,
    strict: Annotated[bool, FolderPanel("--strict", help="Fail on the first file that "
                                        "cannot be read instead of skipping it.")] = False,
    encoding: Annotated[str, typer.Option(help="Text encoding of the corpus file.")] = "utf-8",
    overwrite: Annotated[bool, typer.Option(help="Replace an index built with other settings "
                                            "or another corpus.")] = False,
    ann: Annotated[str, AnnPanel(help="Dense search: exact, hnsw or ivfpq (faiss).")] =
                                 "exact",
    ef_search: Annotated[int, AnnPanel(help="HNSW candidate list while searching (512 "
                                       "for recall@100 >= 0.95 at 1M).")] = 128,
    hnsw_m: Annotated[int, AnnPanel(help="HNSW neighbours per node.")] = 16,
    nlist: Annotated[int, AnnPanel(help="IVF-PQ inverted lists (0 = 4 sqrt(n)).")] = 0,
    nprobe: Annotated[int, AnnPanel(help="IVF-PQ lists visited per query.")] = 32,
    pq_m: Annotated[int, AnnPanel(help="IVF-PQ sub-quantizers (divides the vector "
                                  "dimension).")] = 48,
    shards: Annotated[int, typer.Option(help="Build BM25 and dense as this many shards "
                                        "(global BM25 statistics; merged results exact).")] = 1,
    ray: Annotated[bool, RayPanel("--ray", help="Encode the corpus on Ray (Ray Data, "
                                  "an actor pool of embedders).")] = False,
    ray_address: RayAddressOption = "",
    ray_workers: Annotated[int, RayPanel(help="Embedder actors on Ray.")] = 2,
    ray_batch_size: Annotated[int, RayPanel(help="Passages per Ray batch (the unit a "
                                            "lost actor's work is redone in).")] = 256,
    bm25_tokens: Annotated[str, Bm25Panel(help="BM25 words: bm25s (2+ characters) or lucene "
                                          "(1+, as Lucene's StandardTokenizer; with "
                                          "--stemmer porter --k1 0.9 --b 0.4 Anserini's "
                                          "BM25: benchmarks 'peers').")] = "bm25s",
    bm25_backend: Annotated[str, Bm25Panel(help="BM25 retrieval: numpy, or numba (about "
                                           "100x faster at 1M documents; the scale "
                                           "extra).")] = "numpy",
) -> None:
    """Build an on-disk hybrid index (BM25, dense, TF-IDF, entity graph) for a corpus: a
    BEIR directory, a .jsonl/.csv file, or a folder of documents (.md, .txt, .html, .pdf,
    .docx; read recursively, cut into passages by structure)."""
    from dataclasses import replace

    from intentrank.index import IndexSettings, build_index
    from intentrank.index.postgres import is_postgres_uri
    from intentrank.index.settings import AnnSettings

    if is_postgres_uri(out_dir):  # the table is the store: passages, metadata, vectors
        _index_postgres(source, out_dir, model, encoding, chunk_size)
        return
    out_dir = Path(out_dir)  # type: ignore[assignment]
    folder, read_as = None, None
    if is_document_folder(source):
        read_as = folder_options(include, exclude, chunk_tokens, chunk_overlap)
        folder = read_documents(source, read_as, strict or settings_of(ctx).strict,
                                chunk_size)
    elif chunk_tokens or include or exclude:
        raise ParameterError("--chunk-tokens, --include and --exclude are for a folder of "
                             f"documents; {source} is a corpus (use --chunk-size)")
    check_int("--shards", shards)
    check_int("--ray-workers", ray_workers)
    check_int("--ray-batch-size", ray_batch_size)
    base = IndexSettings(legs=tuple(x.strip() for x in legs.split(",") if x.strip()))
    settings = replace(
        base,
        bm25=replace(base.bm25, k1=k1, b=b, stemmer=None if stemmer == "none" else stemmer,
                     stopwords=None if stopwords == "none" else stopwords,
                     tokens=bm25_tokens, backend=bm25_backend),
        dense=replace(base.dense, model=model, backend=backend, precision=precision,
                      batch_size=batch_size,
                      ann=AnnSettings(ann, hnsw_m=hnsw_m, ef_search=ef_search,
                                      nlist=nlist, nprobe=nprobe, pq_m=pq_m)),
        chunk_size=chunk_size or None,
        chunk_overlap=base.chunk_overlap if chunk_overlap is None else chunk_overlap,
        shards=shards,
    )
    encoder = None
    if ray or ray_address:
        from intentrank.scale.encode import ray_encoder

        encoder = ray_encoder(settings.dense, workers=ray_workers, batch_size=ray_batch_size,
                              address=ray_address or None)
    start = time.perf_counter()
    docs = folder.documents if folder is not None else corpus(source, encoding)
    idx = build_index(docs, out_dir, settings, overwrite=overwrite,
                      progress=True, log=log, encoder=encoder, folder=options_record(read_as))
    secs = time.perf_counter() - start
    in_commit = idx.manifest.get("folder") is not None  # else a reused older index
    record_options(out_dir, None if in_commit else read_as)  # the commit holds them
    if folder is not None:
        print_skipped(folder)
    times = ", ".join(f"{k} {v:.1f}s" for k, v in idx.manifest["build_seconds"].items())
    console.print(f"[green]index ready[/] {out_dir}: {len(idx)} documents in {secs:.1f}s "
                  f"({times})")


def _index_postgres(source: Path, uri: str, model: str, encoding: str, chunk_size: int) -> None:
    """``intentrank index SOURCE postgresql://...``: every passage upserted into the table."""
    from intentrank.index.postgres_write import write_corpus

    if chunk_size:
        raise ParameterError("--chunk-size is not supported for a Postgres table; chunk the "
                             "corpus first")
    start = time.perf_counter()
    docs = read_documents(source, folder_options(None, None, 0, None), False, 0).documents \
        if is_document_folder(source) else corpus(source, encoding)
    with write_corpus(docs, uri, model=model, progress=True, say=log) as idx:
        console.print(f"[green]table ready[/] {idx.table.table}: {len(idx)} rows in "
                      f"{time.perf_counter() - start:.1f}s")


@app.command()
@cli_errors
def search(
    ctx: typer.Context,
    index_dir: Annotated[str, typer.Argument(help="Index directory, or a Postgres table: "
                                             "postgresql://...?table=NAME (pipelines of "
                                             "pgvector, postgres_fts).")],
    query: Annotated[list[str], typer.Argument(help="One or more query strings.")],
    pipeline: Annotated[str, typer.Option("--pipeline", "-p", help="A pipeline config file or "
                                          "a shipped name (bm25, dense, tfidf, sparse, graph, "
                                          "rrf, weighted).")] = "rrf",
    k: Annotated[int, typer.Option("-k", help="Results shown per query.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] =
        False,
    bm25_backend: SearchBm25Option = "",
    filter_text: FilterOption = "",
) -> None:
    """Answer queries from an index with a pipeline (among the documents --filter lets
    through, when given)."""
    from intentrank.core.config import resolve_pipeline
    from intentrank.index import Index
    from intentrank.index.postgres import is_postgres_uri
    from intentrank.pipelines import pipeline_from_config
    from intentrank.report.search import result_rows

    settings = settings_of(ctx)
    check_int("-k", k)
    flt = parse_filter(filter_text) if filter_text else None
    config = resolve_pipeline(pipeline)
    if is_postgres_uri(index_dir):
        from intentrank.index.postgres import PgIndex

        idx: Any = PgIndex.open(index_dir)
    else:
        idx = Index.open(index_dir)
        warn_if_nothing_passes(idx, flt)
    if bm25_backend:
        idx.set_bm25_backend(bm25_backend)
    pipe = pipeline_from_config(config, index=idx, **settings.llm_settings)
    result = pipe.run([Query(f"q{i}", text, filter=flt) for i, text in enumerate(query, 1)])
    # per result: rank, doc_id (also as id), score, title, source (file › section (page
    # N) for a passage read from a folder), stage scores and ranks, and the
    # aspect it covers when an aspects stage ran (multi-aspect pipelines)
    found = [(r, result_rows(r, idx, k), r.query.derived_of("aspect")) for r in result.rankings]
    if as_json:
        out.print_json(json.dumps([
            {"query": r.query.text, **({"aspects": aspects} if aspects else {}),
             **({"filter": str(flt)} if flt else {}),
             "results": [{"id": row["doc_id"], **row} for row in rows]}
            for r, rows, aspects in found]))
        llm_health(settings, result.trace)
        return
    for r, rows, aspects in found:
        title = f"{escape(r.query.text)}  [dim]({escape(pipe.describe())})[/]"
        if flt is not None:
            title += f"\n[dim]filter: {escape(str(flt))}[/]"
        if aspects:
            title += "\n[dim]aspects: " + escape("; ".join(aspects)) + "[/]"
        table = Table(title=title)
        sources = any(row["source"] for row in rows)  # passages read from a folder
        for col in ("rank", "id", "score", *(("source",) if sources else ()), "title / text",
                    *(("aspect",) if aspects else ())):
            table.add_column(col)
        for row in rows:
            snippet = (row["title"] or idx.doc(row["doc_id"]).text)[:90]
            table.add_row(str(row["rank"]), escape(row["doc_id"]), f"{row['score']:.4f}",
                          *((escape(row["source"]),) if sources else ()), escape(snippet),
                          *((escape(row["aspect"][:60]),) if aspects else ()))
        out.print(table)
    llm_health(settings, result.trace)


@app.command("answer")
@cli_errors
def answer_cmd(
    ctx: typer.Context,
    index_dir: IndexDirArg,
    question: Annotated[str, typer.Argument(help="The question to answer.")],
    pipeline: Annotated[str, typer.Option("--pipeline", "-p", help="A pipeline config file or "
                                          "a shipped name (answer, knowledge-answer, rrf, "
                                          "knowledge, ...); one that does not end in an "
                                          "answer stage gets one.")] = "answer",
    n_ans: Annotated[int, typer.Option("--n-ans", help="Documents the added answer stage "
                                       "answers from (a pipeline's own answer stage keeps "
                                       "its top_k).")] = 5,
    abstain: Annotated[str, typer.Option(help="How the answer stage abstains: 'similarity' "
                                         "(no passage sentence close enough to the question "
                                         "by the embedder: no LLM call), 'relevance' (the "
                                         "same by the cross-encoder) or 'llm' (the prompt "
                                         "offers it); default: the stage's.")] = "",
    cite: Annotated[str, typer.Option(help="How it cites: 'context' (each sentence, with the "
                                      "question, by the passages the embedder finds support "
                                      "it, plus the most relevant one), 'posthoc' (each "
                                      "sentence by the cross-encoder) or 'llm' (the LLM's "
                                      "[n], checked); default: the stage's.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] =
        False,
    filter_text: FilterOption = "",
) -> None:
    """Answer a question from an index: the answer with numbered citations and the cited
    passages (only documents that --filter lets through, when given)."""
    from intentrank.answer.attribution import cited_passages
    from intentrank.core.config import build_pipeline, load_config, resolve_pipeline
    from intentrank.index import Index
    from intentrank.pipelines import build_context, ends_with_answer, with_answer

    settings = settings_of(ctx)
    check_int("--n-ans", n_ans)
    if not question.strip():
        raise ConfigError("the question is empty")
    flt = parse_filter(filter_text) if filter_text else None
    options = {k: v for k, v in (("abstain", abstain), ("cite", cite)) if v}
    node = load_config(resolve_pipeline(pipeline))["pipeline"]
    added = not ends_with_answer(node)
    idx = Index.open(index_dir)
    warn_if_nothing_passes(idx, flt)
    pipe = build_pipeline(with_answer(node, n_ans, **options),
                          build_context(idx, **settings.llm_settings), str(pipeline))
    result = pipe.run([Query("q1", question, filter=flt)])
    answer = result.rankings[0].query.answer
    cited = cited_passages(answer, idx)
    if as_json:
        out.print_json(json.dumps({
            "question": question, "answer": answer.text, "fallback": answer.fallback,
            "sources": list(answer.sources), "citations": cited,
            "unsupported": [e.sentence for e in answer.evidence if e.n is None]}))
        llm_health(settings, result.trace)
        return
    if added:
        out.print(f"[dim](answer stage added to {escape(str(pipeline))}: top {n_ans})[/]")
    out.print(f"\n[bold]{escape(question)}[/]\n\n{escape(answer.text or '(no answer)')}\n")
    if answer.fallback:
        warn(f"answer fallback: {answer.fallback}")
    for c in cited:
        out.print(f"[bold][{c['n']}][/] {escape(c['source'] or c['id'])}  "
                  f"{escape(c['title'])}\n    "
                  f"[dim]{escape(c['support'])}[/]")
    unsupported = [e.sentence for e in answer.evidence if e.n is None]
    if unsupported:
        warn(f"{len(unsupported)} sentence(s) no passage supports: "
             + " / ".join(s[:80] for s in unsupported))
    llm_health(settings, result.trace)
