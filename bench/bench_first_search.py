"""The first search per lexical leg on a new commit of a 50,000-passage index, in a process
that already serves the previous commit (as `serve --watch-index` switches after an add or
a delete), against what a reader computed per commit before the legs combined segments
(issue 56): TF-IDF fitted on every live row stacked into one matrix, the graph's edges by
the pairwise loop.

    python bench/bench_first_search.py      # writes bench/first_search_results.json

The corpus: bench_segments.py's (SciFact abstracts cycled, each tagged with its id); legs
BM25, TF-IDF and graph (no dense leg: no model runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_segments import corpus
from lib.results import DATA, ROOT, header, log

RESULTS = ROOT / "bench" / "first_search_results.json"
N = 50_000
LEGS = ("bm25", "tfidf", "graph")


def _texts() -> list[str]:
    lines = (DATA / "scifact" / "queries.jsonl").read_text().splitlines()[:3]
    return [json.loads(line)["text"] for line in lines]


def _first(index: Any, text: str) -> dict[str, float]:
    out = {}
    for leg in LEGS:
        t = time.perf_counter()
        getattr(index, f"search_{leg}")([text], 10)
        out[leg] = time.perf_counter() - t
    return out


def _pairwise_edges(ents: list[set[str]], window: int, min_shared: int) -> np.ndarray:
    """The graph's edges as a reader computed them before: every pair within the window."""
    out = []
    for i, mine in enumerate(ents):
        if len(mine) < min_shared:
            continue
        for j in range(i + 1, min(i + 1 + window, len(ents))):
            shared = len(mine & ents[j])
            if shared >= min_shared:
                out.append((i, j, shared))
    return np.array(out, dtype=np.int64).reshape(-1, 3)


def _before(index: Any) -> dict[str, float]:
    """What a reader of this commit computed on its first TF-IDF and graph search before."""
    from intentrank.index.entities import pagerank_sparse
    from intentrank.index.subset import inverted
    from intentrank.index.terms import TermRows, tfidf_from_rows

    out = {}
    t = time.perf_counter()
    rows = TermRows.stack([TermRows.load(index.gen_dir / e.dir, "tfidf")
                           for e in index.segments])
    if index.live is not None:
        rows = rows.take(index.live.phys).used_terms()
    tfidf_from_rows(rows, index.settings.tfidf)
    out["tfidf"] = time.perf_counter() - t
    t = time.perf_counter()
    ents = index.entities()
    s = index.settings.graph
    sets = [set(e) for e in ents]
    pagerank_sparse(len(sets), _pairwise_edges(sets, s.window, s.min_shared), s.damping)
    inverted(ents)
    out["graph"] = time.perf_counter() - t
    return out


def main() -> None:
    from intentrank.index import Index, IndexSettings, build_index
    from intentrank.index.update import delete, upsert

    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    text = _texts()[0]
    out: dict[str, Any] = {"n": N, "load_start": os.getloadavg()[0]}
    work = Path(tempfile.mkdtemp(prefix="first-search-", dir=ROOT / ".cache"))
    try:
        path = work / "idx"
        log(f"build {N:,} passages (bm25, tfidf, graph), add 100")
        build_index(corpus(0, N), path, IndexSettings(legs=LEGS), embedding_cache=False
                    ).close()
        upsert(path, corpus(N, N + 100), embedding_cache=False, merge_policy=False)
        serving = Index(path)
        out["first_reader"] = _first(serving, text)  # nothing of this process loaded yet
        log(f"  first reader (2 segments): {out['first_reader']}")
        for step, change in (("add", lambda: upsert(path, corpus(N + 100, N + 200),
                                                    embedding_cache=False,
                                                    merge_policy=False)),
                             ("delete", lambda: delete(path, [f"p{i}" for i in
                                                              range(0, 1000, 100)]))):
            change()
            new = Index(path)
            after = _first(new, text)
            out[step] = {"segments": len(new.segments), "deleted": new.rows_deleted,
                         "after": after, "before": _before(new)}
            log(f"  after {step}: {out[step]}")
            serving.close()
            serving = new
        serving.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["load_end"] = os.getloadavg()[0]
    RESULTS.write_text(json.dumps(out | {"header": header()}, indent=1))


if __name__ == "__main__":
    main()
