"""A cluster directory (scale/shardset.py, `intentrank cluster build`), without Ray: the
corpus split by a stable hash of each id into ordinary indexes, every document once, the
corpus order kept; its shards' BM25 with summed statistics equal one index of the corpus
(index/shard_api.py, in process); bad manifests and settings refused naming the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def built(data_dir, tmp_path_factory):
    from intentrank.cli import app

    root = tmp_path_factory.mktemp("cl")
    res = CliRunner().invoke(app, ["cluster", "build", str(data_dir / "cranfield"),
                                   str(root / "cl"), "--shards", "3", "--legs", "bm25"])
    assert res.exit_code == 0, res.output
    return root / "cl"


def test_every_document_once_in_the_shard_its_id_hashes_to(built, cranfield):
    from intentrank.index import Index
    from intentrank.scale.shardset import ClusterManifest, shard_of

    m = ClusterManifest.load(built)
    corpus_ids = [d.id for d in cranfield.corpus()]
    assert m.order() == corpus_ids and (m.shards, m.replicas) == (3, 2)
    seen = []
    for s in range(3):
        with Index(m.shard_dir(s)) as idx:
            assert all(shard_of(i, 3) == s for i in idx.ids)
            assert len(idx) > 300  # the hash spreads 1,400 ids about evenly
            seen += idx.ids
    assert sorted(seen) == sorted(corpus_ids)
    assert shard_of("1", 3) == shard_of("1", 3) and {shard_of(str(i), 3)
                                                    for i in range(30)} == {0, 1, 2}


def test_shards_with_summed_statistics_equal_one_index(built, cranfield, data_dir, tmp_path):
    from intentrank.index import Index, IndexSettings, build_index, shard_api
    from intentrank.scale.shardset import ClusterManifest

    m = ClusterManifest.load(built)
    single = build_index(cranfield.corpus(), tmp_path / "one", IndexSettings(legs=("bm25",)))
    row_of = {d: i for i, d in enumerate(m.order())}
    shards = [Index(m.shard_dir(s)) for s in range(3)]
    l2g = [np.array([row_of[i] for i in sh.ids]) for sh in shards]
    queries = [json.loads(x)["text"] for x in
               (data_dir / "cranfield" / "queries.jsonl").read_text().splitlines()[:50]]
    for q in queries:
        toks = shard_api.tokenize(shards[0], [q])
        stats = [shard_api.bm25_term_stats(sh, toks[0]) for sh in shards]
        n, avg, df = shard_api.combine_stats(stats)
        per = [shard_api.bm25_search_global(sh, toks, 100, n, avg, df)[0] for sh in shards]
        rows = np.concatenate([l2g[s][h.rows] for s, h in enumerate(per)])
        scores = np.concatenate([h.scores for h in per])
        order = np.lexsort((rows, -scores))[:100]
        ref = single.search_bm25([q], 100)[0]
        assert rows[order].tolist() == ref.rows.tolist()
        assert scores[order].tolist() == ref.scores.tolist()  # bit for bit
    for sh in shards:
        sh.close()
    single.close()


def test_bad_clusters_are_refused_naming_the_problem(built, tmp_path, cranfield):
    from intentrank.errors import ConfigError, DataError
    from intentrank.index import IndexSettings
    from intentrank.scale.shardset import ClusterManifest, build_cluster

    with pytest.raises(ConfigError, match="no cluster.json"):
        ClusterManifest.load(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cluster.json").write_text(json.dumps({"format": 1, "shards": 0, "replicas": 2,
                                                  "settings": {}}))
    with pytest.raises(ConfigError, match="'shards' must be a positive integer"):
        ClusterManifest.load(bad)
    (bad / "cluster.json").write_text(json.dumps({"format": 1, "shards": 2}))
    with pytest.raises(ConfigError, match="field 'replicas' is missing"):
        ClusterManifest.load(bad)
    with pytest.raises(ConfigError, match="whole-corpus legs"):
        build_cluster([], tmp_path / "x", 2, IndexSettings(legs=("bm25", "tfidf")))
    docs = list(cranfield.corpus())[:3]
    with pytest.raises(DataError, match="empty"):
        build_cluster(docs, tmp_path / "y", 50, IndexSettings(legs=("bm25",)))
    with pytest.raises(ConfigError, match="already holds a cluster"):
        build_cluster(docs, built, 2, IndexSettings(legs=("bm25",)))


def test_serve_refuses_a_cluster_under_ray_serve(built):
    from intentrank.cli import app

    res = CliRunner().invoke(app, ["serve", "--ray", "--no-keys", "--index", f"c={built}",
                                   "--pipeline", "bm25"])
    assert res.exit_code == 2, res.output
    assert "shards are Ray actors already" in res.output
