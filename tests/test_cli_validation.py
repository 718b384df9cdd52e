"""Every bad number, name and path is refused before any work with one ``error: ...`` line
and exit status 2 (never a traceback, a native abort or a silently wrong result); Python
constructors raise ValueError/ConfigError subclasses naming the parameter."""

from __future__ import annotations

import math
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.core.params import ParameterError
from intentrank.errors import ConfigError

runner = CliRunner()


@pytest.fixture(scope="module")
def bm25_index(cranfield, tmp_path_factory):
    from intentrank.index import IndexSettings, build_index

    return build_index(cranfield.corpus(), tmp_path_factory.mktemp("val") / "cranfield",
                       IndexSettings(legs=("bm25",)))


def _clean_error(res, *needles: str) -> None:
    """Exit 2, one ``error:`` line containing every needle, no traceback."""
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, res.output
    for needle in needles:
        assert needle in lines[0], res.output


# -- search ----------------------------------------------------------------------------------
@pytest.mark.parametrize("k, message", [
    ("0", "-k must be >= 1, got 0"),
    ("-5", "-k must be >= 1, got -5"),
    ("ten", "Invalid value for '-k'"),
])
def test_search_k(bm25_index, k, message):
    res = runner.invoke(app, ["search", str(bm25_index.path), "shock", "-p", "bm25", "-k", k])
    _clean_error(res, message)


def test_search_k_one_shows_one(bm25_index):
    import json

    res = runner.invoke(app, ["search", str(bm25_index.path), "shock", "-p", "bm25", "-k", "1",
                              "--json"])
    assert res.exit_code == 0 and len(json.loads(res.stdout)[0]["results"]) == 1


def test_search_query_with_markup_is_printed_verbatim(bm25_index):
    res = runner.invoke(app, ["search", str(bm25_index.path), "[/bold] shock [red]", "-p",
                              "bm25", "-k", "1"])
    assert res.exit_code == 0, res.output
    assert "[/bold] shock [red]" in res.stdout


@pytest.mark.parametrize("yaml_text, message", [
    ("pipeline:\n  fuse: {method: rrf, rrf_k: 0, inputs: [bm25, bm25]}",
     "pipeline.fuse: rrf_k must be > 0, got 0"),
    ("pipeline:\n  fuse: {method: rrf, rrf_k: -60, inputs: [bm25, bm25]}", "rrf_k must be > 0"),
    ("pipeline:\n  fuse: {method: rrf, rrf_k: .inf, inputs: [bm25, bm25]}",
     "rrf_k must be a finite number"),
    ("pipeline:\n  fuse: {method: weighted, weights: [-1, 1], inputs: [bm25, tfidf]}",
     "weights must be non-negative"),
    ("pipeline:\n  fuse: {method: weighted, weights: [.nan, 1], inputs: [bm25, tfidf]}",
     "weights must be finite"),
    ("pipeline:\n  fuse: {method: weighted, weights: [0, 0], inputs: [bm25, tfidf]}",
     "weights are all zero"),
    ("pipeline:\n  fuse: {method: weighted, weights: 3, inputs: [bm25, tfidf]}",
     "weights must be a list of numbers"),
    ("pipeline:\n  fuse: {method: rrf, inputs: []}", "at least two branches"),
    ("pipeline: [{bm25: {depth: 0}}]", "pipeline[0].bm25: depth must be >= 1, got 0"),
    ("pipeline: [{bm25: {depth: 2.5}}]", "depth must be an integer, got 2.5"),
    ("pipeline: [{bm25: {depth: true}}]", "depth must be an integer, got True"),
    ("pipeline: [{sparse: {depth: 10, leg_depth: 0}}]", "leg_depth must be >= 1, got 0"),
    ("pipeline: [{bm25: {k: 10}}]", "pipeline[0].bm25: unknown parameter 'k'; did you mean "
     "'depth'? (renamed after 0.1.0: 'depth' is how many documents a retriever returns)"),
    ("pipeline: [{sparse: {k: 10}}]", "unknown parameter 'k'; did you mean 'depth'?"),
    ("pipeline: [bm25, {cross_encoder: {k: 10}}]",
     "pipeline[1].cross_encoder: unknown parameter 'k'; did you mean 'top_k'?"),
    ("pipeline: [bm25, {listwise: {depth: 5}}]",
     "pipeline[1].listwise: unknown parameter 'depth'; did you mean 'top_k'?"),
    ("pipeline:\n  fuse: {method: rrf, k: 60, inputs: [bm25, bm25]}",
     "pipeline.fuse: unknown parameter 'k'; did you mean 'rrf_k'? (renamed after 0.1.0: "
     "'rrf_k' is the RRF constant"),
    ("pipeline: [{rrf_with_input: {stage: bm25, k: 60}}]", "did you mean 'rrf_k'?"),
    ("pipeline: [{multi_query: {retriever: {bm25: {k: 5}}}}]", "did you mean 'depth'?"),
    ("pipeline: [bm25, {cutoff: 0}]", "pipeline[1]: cutoff must be >= 1, got 0"),
    ("pipeline: [bm25, {cutoff: true}]", "cutoff takes an integer"),
    ("pipeline: [bm25, {listwise: {top_k: 1}}]", "top_k must be >= 2, got 1"),
    ("pipeline: [bm25, {listwise: {top_k: 5, window: -3}}]", "window must be >= 2, got -3"),
    ("pipeline: [bm25, {followups: {m: 0}}]", "m (follow-ups per query) must be >= 1"),
    ("pipeline: [bm25, {followups: {max_tokens: -1}}]", "max_tokens must be >= 1"),
    ("pipeline: [bm25, {compression: {top_k: 0}}]", "top_k must be >= 1, got 0"),
    ("pipeline: [bm25, {llm_judge: {top_k: -2}}]", "top_k must be >= 1, got -2"),
    ("pipeline: [{multi_query: {retriever: bm25, n: 0}}]", "n (variants per query) must be"),
    ("pipeline: [{multi_query: {retriever: bm25, rrf_k: 0}}]", "rrf_k must be > 0"),
    ("pipeline: [bm25, {fuq: {alpha: .nan}}]", "fuq alpha must be a finite number"),
    ("pipeline: [{bm25: {kk: 3}}]", "pipeline[0].bm25:"),
    ("pipeline: [{bm25: 0}]", "parameters must be a mapping"),
    ("pipeline: [{bm25: {3: 4}}]", "parameter names must be strings"),
    ("pipeline: [{bm26: {}}]", "unknown stage 'bm26'"),
    ("pipline: [bm25]", "needs a top-level 'pipeline' key"),
    ("pipeline: [bm25]\nindx: somewhere", "unknown top-level key(s) ['indx']"),
    ("pipeline: [bm25]\nindex: 5", "'index' must be a path, got 5"),
    ("pipeline: [bm25\n", "cannot read pipeline config"),
])
def test_bad_pipeline_configs(bm25_index, tmp_path, yaml_text, message):
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml_text + "\n")
    res = runner.invoke(app, ["--llm", "openai:m@http://127.0.0.1:9/v1", "search",
                              str(bm25_index.path), "shock", "-p", str(cfg)])
    _clean_error(res, message)


def test_unknown_pipeline_name_and_binary_config(bm25_index, tmp_path):
    res = runner.invoke(app, ["search", str(bm25_index.path), "q", "-p", "bm26"])
    _clean_error(res, "no pipeline config 'bm26'", "bm25, cascade")
    cfg = tmp_path / "bin.yaml"
    cfg.write_bytes(b"\xff\xfe\x00")
    res = runner.invoke(app, ["search", str(bm25_index.path), "q", "-p", str(cfg)])
    _clean_error(res, "cannot read pipeline config")


# -- global LLM options ----------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--llm-timeout", "0"], "--llm-timeout must be > 0, got 0"),
    (["--llm-timeout", "-3"], "--llm-timeout must be > 0, got -3"),
    (["--llm-timeout", "nan"], "--llm-timeout must be a finite number"),
    (["--llm-retries", "-1"], "--llm-retries must be >= 0, got -1"),
    (["--llm", "openai:"], "bad LLM spec 'openai:'"),
    (["--llm", "openai:m@ftp://x"], "bad LLM spec"),
    (["--llm", "llamacpp:"], "bad LLM spec 'llamacpp:'"),
    (["--bogus"], "No such option: --bogus"),
])
def test_global_llm_options(bm25_index, args, message):
    res = runner.invoke(app, [*args, "search", str(bm25_index.path), "q", "-p", "bm25"])
    _clean_error(res, message)


def test_llm_settings_in_python():
    from intentrank.llm.client import LLMClient, load_llm
    from intentrank.llm.openai_http import OpenAICompatibleLLM

    class Echo:
        name, timeout = "echo", 5.0

    for kwargs, message in [({"timeout": 0}, "LLM timeout"), ({"timeout": -1}, "LLM timeout"),
                            ({"timeout": math.inf}, "finite"), ({"retries": -1}, "LLM retries"),
                            ({"backoff": -0.5}, "LLM backoff"),
                            ({"max_concurrency": 0}, "max_concurrency")]:
        with pytest.raises(ValueError, match=message):
            LLMClient(Echo(), cache=None, **kwargs)
    with pytest.raises(ConfigError, match="LLM timeout"):
        OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m", timeout=0)
    backend = OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m", timeout=3)
    with pytest.raises(ValueError, match="LLM timeout"):
        backend.timeout = -2
    with pytest.raises(ValueError, match="bad LLM spec"):
        load_llm("openai:")


# -- Python constructors ---------------------------------------------------------------------
def test_python_constructors_name_the_parameter(bm25_index):
    from intentrank.core.stage import Chain, Cutoff
    from intentrank.fuse.interleave import InterleaveFusion
    from intentrank.fuse.rrf import RRFFusion, rrf
    from intentrank.fuse.weighted import WeightedFusion
    from intentrank.rerank.fuq import FUQWeights
    from intentrank.rerank.listwise import ListwiseReranker
    from intentrank.retrieve.retrievers import BM25Retriever, sparse_retriever

    bm25 = BM25Retriever(bm25_index, 10)
    cases = [
        (lambda: RRFFusion([bm25, bm25], rrf_k=0), "rrf_k must be > 0, got 0"),
        (lambda: RRFFusion([bm25, bm25], rrf_k=-1), "rrf_k must be > 0"),
        (lambda: rrf([["a"]], rrf_k=-1), "rrf_k must be > 0"),
        (lambda: RRFFusion([]), "needs at least one branch"),
        (lambda: WeightedFusion([]), "needs at least one branch"),
        (lambda: InterleaveFusion(bm25), "takes a list of stages"),
        (lambda: WeightedFusion([bm25, bm25], weights=[1, math.nan]), "finite"),
        (lambda: WeightedFusion([bm25, bm25], weights=[1, math.inf]), "finite"),
        (lambda: WeightedFusion([bm25, bm25], weights=[1, -1]), "non-negative"),
        (lambda: WeightedFusion([bm25, bm25], weights=[0, 0]), "all zero"),
        (lambda: WeightedFusion([bm25, bm25], weights=[1]), "1 weights for 2"),
        (lambda: BM25Retriever(bm25_index, 0), "depth must be >= 1, got 0"),
        (lambda: BM25Retriever(bm25_index, -5), "depth must be >= 1, got -5"),
        (lambda: sparse_retriever(bm25_index, 10, leg_depth=0), "leg_depth must be >= 1"),
        (lambda: Cutoff(0), "cut-off must be >= 1, got 0"),
        (lambda: bm25 % 0, "cut-off must be >= 1, got 0"),
        (lambda: bm25 % 2.5, "cut-off must be an integer"),
        (lambda: bm25 >> 5, "a pipeline step must be a Stage"),
        (lambda: Chain([bm25, "bm25"]), "a pipeline step must be a Stage"),
        (lambda: ListwiseReranker(bm25_index, None, top_k=1), "top_k must be >= 2"),
        (lambda: ListwiseReranker(bm25_index, None, step=0), "step must be >= 1"),
        (lambda: FUQWeights(alpha=math.nan), "fuq alpha must be a finite number"),
        (lambda: bm25.search("shock", k=0), "k must be >= 1"),
    ]
    for build, message in cases:
        with pytest.raises(ParameterError, match=message.replace("(", r"\(")):
            build()
    # ParameterError is both a ValueError and a ConfigError
    assert issubclass(ParameterError, ValueError) and issubclass(ParameterError, ConfigError)


def test_metrics_are_checked_up_front():
    from intentrank.measures.metrics import evaluate, validate_metrics

    assert validate_metrics(" nDCG@10, MRR@10 ,,nDCG@10") == ["nDCG@10", "MRR@10"]
    for bad, message in [("nDCG@0", "the cut-off must be >= 1, got 0"),
                         ("P@0", "cut-off must be >= 1"), ("Bogus@3", "unknown metric"),
                         ("nDCG@x", "cannot parse metric"), ("", "no metrics given"),
                         ("SDCG@10", "cannot be computed here"),
                         ("nDCG@1000000000000000000000", "cannot be computed here")]:
        with pytest.raises(ConfigError, match=message):
            validate_metrics(bad)
    with pytest.raises(ValueError, match="cut-off must be >= 1"):  # never a native abort
        evaluate({"q": {"a": 1.0}}, {"q": {"a": 1}}, ["nDCG@0"])


# -- eval ------------------------------------------------------------------------------------
def _eval(small_cranfield, bm25_index, *args: str):
    return runner.invoke(app, ["eval", str(small_cranfield), "--index", str(bm25_index.path),
                               *args])


@pytest.mark.parametrize("metrics, message", [
    ("nDCG@0", "metric 'nDCG@0': the cut-off must be >= 1, got 0"),
    ("nDCG@10,Bogus", "unknown metric 'Bogus'"),
    ("MRR@0,P@0", "metric 'MRR@0'"),
    (",", "no metrics given"),
])
def test_eval_metrics_refused_before_any_run(small_cranfield, bm25_index, metrics, message):
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "--metrics", metrics)
    _clean_error(res, message)
    assert "| system |" not in res.stdout


def test_eval_output_paths(small_cranfield, bm25_index, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (["--report", str(tmp_path)], f"--report {tmp_path} is a directory"),
        (["--per-query", str(tmp_path)], f"--per-query {tmp_path} is a directory"),
        (["--runs-dir", str(afile)], f"--runs-dir {afile} is a file"),
        (["--report", str(afile / "r.md")], "exists and is not a directory"),
    ]
    for args, message in cases:
        res = _eval(small_cranfield, bm25_index, "-p", "bm25", "--metrics", "nDCG@10", *args)
        _clean_error(res, message)
        assert "| system |" not in res.stdout  # refused before running
    # missing parent directories are created
    report, per_query, runs = (tmp_path / "new" / "a" / "r.md", tmp_path / "new" / "b" / "q.json",
                               tmp_path / "new" / "runs")
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "--metrics", "nDCG@10", "--report",
                str(report), "--per-query", str(per_query), "--runs-dir", str(runs))
    assert res.exit_code == 0, res.output
    assert report.read_text().startswith("| system |") and per_query.exists()
    assert (runs / "bm25.trec").exists()


def test_eval_pipeline_names(small_cranfield, bm25_index, tmp_path):
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "-p", "bm26")
    _clean_error(res, "no pipeline config 'bm26'")
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "-p", "bm25")
    _clean_error(res, "pipeline(s) ['bm25'] given more than once")
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "-p", "tfidf", "--baseline", "rrf")
    _clean_error(res, "--baseline 'rrf' is not one of the pipelines")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "bm25.yaml").write_text("pipeline: {bm25: {depth: 5}}\n")
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "-p", str(tmp_path / "x/bm25.yaml"),
                "--runs-dir", str(tmp_path / "runs"))
    _clean_error(res, "would write the same run file name")
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "--split", "dev")
    _clean_error(res, "no qrels for split 'dev'")


def test_ablate_and_tune_options_refused_before_work(small_cranfield, tmp_path):
    never = str(tmp_path / "never-built")
    for args, message in [(["--sample", "-1"], "--sample must be >= 0, got -1"),
                          (["--listwise-chars", "-1"], "--listwise-chars must be >= 1, got -1"),
                          (["--split", "dev"], "no qrels for split 'dev'"),
                          (["--experiment", "nonesuch"], "no experiment file 'nonesuch'"),
                          (["--baseline", "Nope"], "baseline: 'Nope' is not one of")]:
        res = runner.invoke(app, ["ablate", str(small_cranfield), "--index", never, "--out",
                                  str(tmp_path / "abl" / "r"), "--no-ce", *args])
        _clean_error(res, message)
    (tmp_path / "r.md").mkdir()
    res = runner.invoke(app, ["ablate", str(small_cranfield), "--index", never, "--out",
                              str(tmp_path / "r")])
    _clean_error(res, "--out", "r.md is a directory")
    for args, message in [(["--metric", "nDCG@0"], "the cut-off must be >= 1"),
                          (["--metric", "Bogus"], "unknown metric"),
                          (["--sample", "-2"], "--sample must be >= 0"),
                          (["--split", "dev"], "no qrels for split 'dev'")]:
        res = runner.invoke(app, ["tune-fuq", str(small_cranfield), "--index", never, *args])
        _clean_error(res, message)
    res = runner.invoke(app, ["train-reranker", str(small_cranfield), "--epochs", "0"])
    _clean_error(res, "--epochs must be >= 1, got 0")
    res = runner.invoke(app, ["train-reranker", str(small_cranfield), "--lr", "-1"])
    _clean_error(res, "--lr must be > 0")
    assert not (tmp_path / "never-built").exists()


# -- properties: random option values never crash the CLI -----------------------------------
def _ok_or_error(res) -> None:
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    assert res.exit_code in (0, 2), res.output
    if res.exit_code == 2:
        assert "error: " in res.output, res.output


_option_text = st.one_of(
    st.integers(-10**12, 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(string.printable, max_size=12),
)
_yaml_value = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                        st.floats(allow_nan=True, allow_infinity=True),
                        st.text(max_size=6), st.lists(st.integers(-3, 3), max_size=3))
PROPERTY = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPERTY
@given(k=_option_text)
def test_property_search_k(bm25_index, k):
    res = runner.invoke(app, ["search", str(bm25_index.path), "shock wave", "-p", "bm25",
                              "-k", k, "--json"])
    _ok_or_error(res)


@PROPERTY
@given(metrics=st.one_of(
    st.text(string.ascii_letters + string.digits + "@,_ ", max_size=20),
    st.lists(st.sampled_from(["nDCG", "MRR", "P", "R", "MAP", "Recall", "HitRate", "AP",
                              "Bogus", "ERR", "Judged"]).flatmap(
        lambda m: st.integers(-2, 10**9).map(lambda c: f"{m}@{c}") | st.just(m)),
        min_size=1, max_size=3).map(",".join)))
def test_property_eval_metrics(small_cranfield, bm25_index, metrics):
    res = _eval(small_cranfield, bm25_index, "-p", "bm25", "--metrics", metrics)
    _ok_or_error(res)


@PROPERTY
@given(rrf_k=_yaml_value, weights=_yaml_value, depth=_yaml_value)
def test_property_fusion_params(bm25_index, tmp_path_factory, rrf_k, weights, depth):
    cfg = tmp_path_factory.mktemp("prop") / "p.yaml"
    cfg.write_text(yaml.safe_dump({"pipeline": [
        {"fuse": {"method": "rrf", "rrf_k": rrf_k, "inputs": [{"bm25": {"depth": 20}}, "bm25"]}},
        {"fuse": {"method": "weighted", "weights": weights,
                  "inputs": [{"sparse": {"depth": 5, "leg_depth": depth}}, "bm25"]}}]}))
    res = runner.invoke(app, ["search", str(bm25_index.path), "shock", "-p", str(cfg)])
    _ok_or_error(res)


@PROPERTY
@given(timeout=_option_text, retries=_option_text)
def test_property_llm_options(bm25_index, timeout, retries):
    res = runner.invoke(app, ["--llm-timeout", timeout, "--llm-retries", retries, "search",
                              str(bm25_index.path), "shock", "-p", "bm25", "-k", "2"])
    _ok_or_error(res)


def test_eval_dataset_warnings_strict_and_round_grades(data_dir, bm25_index, tmp_path):
    root = tmp_path / "grades"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").symlink_to(data_dir / "cranfield" / "corpus.jsonl")
    (root / "queries.jsonl").symlink_to(data_dir / "cranfield" / "queries.jsonl")
    qrels = root / "qrels" / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\t184\t1.5\n1\tnot-a-doc\t1\n2\t12\t1\n")

    def run(*args: str):
        return runner.invoke(app, [*args, "eval", str(root), "--index", str(bm25_index.path),
                                   "-p", "bm25", "--metrics", "nDCG@10"])

    _clean_error(run(), "not an integer grade", "--round-grades")
    res = runner.invoke(app, ["eval", str(root), "--index", str(bm25_index.path), "-p", "bm25",
                              "--metrics", "nDCG@10", "--round-grades"])
    assert res.exit_code == 0, res.output
    assert "warning: " in res.output and "rounded" in res.output
    assert "not-a-doc" in res.output  # the unknown judged document is a visible warning
    res = runner.invoke(app, ["--strict", "eval", str(root), "--index", str(bm25_index.path),
                              "-p", "bm25", "--metrics", "nDCG@10", "--round-grades"])
    _clean_error(res, "not-a-doc")
    assert "| system |" not in res.stdout


def test_os_errors_are_error_lines(data_dir, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    res = runner.invoke(app, ["index", str(data_dir / "cranfield"), str(afile / "idx"),
                              "--legs", "bm25"])
    _clean_error(res, "Not a directory")


@pytest.mark.parametrize("option, value, message", [
    ("--watch-index", "-1", "--watch-index must be >= 0"),
    ("--watch-index", "nan", "--watch-index must be a finite number"),
    ("--drain", "0", "--drain must be > 0"),
    ("--drain", "inf", "--drain must be a finite number"),
])
def test_serve_watch_and_drain_refused_before_work(tmp_path, option, value, message):
    """Checked before any index is opened or built (the directory does not exist)."""
    res = runner.invoke(app, ["serve", "--index", str(tmp_path / "none"), option, value])
    _clean_error(res, message)


@pytest.mark.parametrize("options, message", [
    (["--precision", "int4"], "unknown dense.precision 'int4'; use one of ['int8', 'fp32']"),
    (["--precision", "fp32", "--backend", "onnx"], "runs the packaged int8 model only"),
])
def test_index_precision_errors_before_any_work(data_dir, tmp_path, options, message):
    res = runner.invoke(app, ["index", str(data_dir / "cranfield"), str(tmp_path / "idx"),
                              *options])
    _clean_error(res, message)
    assert not (tmp_path / "idx").exists()


def test_sync_of_a_postgres_table_is_refused_before_reading(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\ntext\n")
    res = runner.invoke(app, ["sync", "postgresql://u@127.0.0.1:9/db?table=t", str(folder)])
    _clean_error(res, "`intentrank sync` needs an index directory",
                 "a Postgres table takes `intentrank add` and `delete`")
