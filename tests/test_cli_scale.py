"""The scale-out options of the CLI: `index --ann/--shards` build what they say (real
Cranfield), bad values exit 2 naming the setting."""

from __future__ import annotations

from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.index import Index

runner = CliRunner()


def test_index_with_hnsw_and_shards_searches_like_exact(data_dir, tmp_path):
    corpus = str(data_dir / "cranfield")
    built = runner.invoke(app, ["index", corpus, str(tmp_path / "hnsw"), "--legs", "bm25,dense",
                                "--ann", "hnsw", "--ef-search", "256", "--shards", "2"])
    assert built.exit_code == 0, built.output
    idx = Index.open(tmp_path / "hnsw")
    assert idx.settings.dense.ann.method == "hnsw" and idx.settings.dense.ann.ef_search == 256
    assert idx.settings.shards == 2
    res = runner.invoke(app, ["search", str(tmp_path / "hnsw"), "heat transfer in hypersonic "
                              "boundary layers", "-p", "bm25", "-k", "3", "--json"])
    assert res.exit_code == 0 and '"id"' in res.output
    bad = runner.invoke(app, ["index", corpus, str(tmp_path / "bad"), "--ann", "nope"])
    assert bad.exit_code == 2 and "dense.ann.method 'nope'" in bad.output
    bad = runner.invoke(app, ["index", corpus, str(tmp_path / "bad"), "--shards", "0"])
    assert bad.exit_code == 2 and "--shards must be >= 1" in bad.output
    assert not (tmp_path / "bad").exists()


def test_bm25_backend_options(data_dir, tmp_path):
    """`index --bm25-backend numba` records it; `search --bm25-backend numpy` switches it on
    the built index with the same results; refused values and combinations exit 2."""
    import json

    corpus = str(data_dir / "cranfield")
    built = runner.invoke(app, ["index", corpus, str(tmp_path / "nb"), "--legs", "bm25",
                                "--bm25-backend", "numba"])
    assert built.exit_code == 0, built.output
    assert Index.open(tmp_path / "nb").settings.bm25.backend == "numba"
    query = "heat transfer in hypersonic boundary layers"
    found = {}
    for backend in ("numba", "numpy"):
        res = runner.invoke(app, ["search", str(tmp_path / "nb"), query, "-p", "bm25", "-k",
                                  "10", "--json", "--bm25-backend", backend])
        assert res.exit_code == 0, res.output
        found[backend] = [(h["id"], round(h["score"], 4))
                          for h in json.loads(res.output)[0]["results"]]
    assert found["numba"] == found["numpy"] and len(found["numpy"]) == 10
    bad = runner.invoke(app, ["search", str(tmp_path / "nb"), query, "-p", "bm25",
                              "--bm25-backend", "jax"])
    assert bad.exit_code == 2 and "'jax'" in bad.output
    ray = runner.invoke(app, ["eval", corpus, "--index", str(tmp_path / "nb"), "-p", "bm25",
                              "--bm25-backend", "numba", "--ray"])
    assert ray.exit_code == 2 and "each Ray task opens the index" in ray.output
    serve = runner.invoke(app, ["serve", "--ray-ce", "some-model"])
    assert serve.exit_code == 2 and "add --ray" in serve.output
    for option, value in (("--ray-batch-size", "0"), ("--ray-batch-wait-ms", "-5")):
        bad = runner.invoke(app, ["serve", "--ray", "--ray-ce", "m", option, value])
        assert bad.exit_code == 2 and option in bad.output, bad.output
