"""The service rows of bench_peers.py: intentrank's service (``/v1/rerank``, ``/v1/embeddings``)
beside Infinity serving the same models, on 127.0.0.1, at 1 and 8 clients, bounded.

Infinity (``infinity-emb`` 0.0.78) needs numpy < 2, so it lives in its own virtual environment
(bench_peers.py ``--setup`` makes it: :func:`setup_infinity`); without it the Infinity rows are
left out with that reason and intentrank's own rows are still measured. Both servers run
the same weights: the bundled all-MiniLM-L6-v2 (Infinity: the fp32 sentence-transformers
folder, torch; intentrank: its index's int8 query encoder) and the bundled reranker
(Infinity: its fp32 copy, ``fp32_reranker``, torch; intentrank: the int8 file at int8 and at
fp32 precision). Requests are the same bodies for every system, systems take turns round by
round, and every response's ranking is scored (nDCG@10), so speed is read beside quality.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from lib.results import ROOT
from lib.server import bench_keys, free_port, load, serve, start, stop
from lib.timing import percentiles

INFINITY_VENV = Path(os.environ.get("PEERS_INFINITY_VENV", ROOT / ".cache" / "infinity-venv"))
INFINITY_VERSION = "0.0.78"
LEVELS = (1, 8)
ROUNDS = 2
# requests per system, round and level: (rerank, embeddings); whichever of these or
# SECONDS ends first
REQUESTS = {1: (8, 80), 8: (16, 160)}
SECONDS = 60.0
KEY = "bench-key"
RERANKERS = {"int8": {"cross_encoder": {"top_k": 100, "backend": "onnx", "max_length": 128}},
             "fp32": {"cross_encoder": {"top_k": 100, "backend": "onnx", "max_length": 128,
                                        "precision": "fp32"}}}


def rounds() -> str:
    """How the service rows are bounded, in words."""
    return (f"{ROUNDS} rounds; per system and round, rerank {REQUESTS[1][0]} requests at 1 "
            f"client and {REQUESTS[8][0]} at 8, embeddings {REQUESTS[1][1]} and "
            f"{REQUESTS[8][1]}")


def setup_infinity(venv: Path = INFINITY_VENV) -> dict[str, str]:
    """Infinity in its own virtual environment (Python 3.11, CPU torch 2.13.0 first so pip
    takes the CPU build, then ``infinity-emb[server,torch]``): its numpy < 2 and older
    transformers stay out of the project's environment. Returns the versions."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, f"infinity-emb[server,torch]=={INFINITY_VERSION}"], check=True)
    out = subprocess.run([str(python), "-c", "from importlib.metadata import version as v; "
                          "print(v('infinity-emb'), v('torch'), v('numpy'))"],
                         check=True, capture_output=True, text=True).stdout.split()
    return dict(zip(("infinity-emb", "infinity torch", "infinity numpy"), out, strict=True))


def infinity_missing(venv: Path = INFINITY_VENV) -> str | None:
    """Why the Infinity rows cannot run here, or None."""
    if not (venv / "bin" / "infinity_emb").exists():
        return (f"no Infinity environment at {venv} (python bench/bench_peers.py --setup "
                f"makes it)")
    return None


def serve_intentrank(port: int, index: Path) -> None:
    """The intentrank server process (``python bench/peers_service.py PORT INDEX``): the
    dense index (its query encoder answers /v1/embeddings) and the two rerankers; keys on,
    as deployed."""
    from intentrank.service import ServiceSettings

    serve(ServiceSettings(indexes={"minilm": index}, pipelines={}, rerankers=dict(RERANKERS),
                          keys=bench_keys(KEY), workers=2, queue_limit=32, timeout_s=300,
                          access_log=False), port)


def start_intentrank(index: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    return start([sys.executable, __file__, str(port), str(index)], port, log)


def start_infinity(reranker: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """Infinity v2 on 127.0.0.1 with both models (torch, CPU, offline, no telemetry)."""
    from intentrank.models.inputs import minilm_path

    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    env.pop("PYTHONPATH", None)
    return start([str(INFINITY_VENV / "bin" / "infinity_emb"), "v2", "--model-id",
                  str(minilm_path()), "--model-id", str(reranker), "--served-model-name",
                  "minilm", "--served-model-name", "reranker", "--engine", "torch", "--device",
                  "cpu", "--host", "127.0.0.1", "--port", str(port)], port, log, env=env)


def service_part(name: str, sample: list, cands: list[list[str]], texts: dict[str, str],
                 qrels: dict, dense_index: Path, reranker_fp32: Path, work: Path,
                 out: dict, ndcg: Any) -> None:
    """Rows of ``out["service"]``: each endpoint x system x clients level, requests/s,
    p50/p95 ms and the responses' nDCG@10 (rerank) or cosine to intentrank's (embeddings)."""
    import numpy as np

    rerank_bodies = [{"query": q.text, "documents": [texts[d] for d in c], "top_n": len(c)}
                     for q, c in zip(sample, cands, strict=True)]
    embed_bodies = [{"input": [q.text]} for q in sample]
    servers: dict[str, tuple[subprocess.Popen, str]] = {}
    why = infinity_missing()
    out.setdefault("service_skipped", {})["infinity"] = why
    out["service_rounds"] = rounds()
    try:
        servers["intentrank"] = start_intentrank(dense_index, work / "intentrank-serve.log")
        if why is None:
            servers["infinity"] = start_infinity(reranker_fp32, work / "infinity-serve.log")
        auth = {"intentrank": {"Authorization": f"Bearer {KEY}"}, "infinity": {}}
        systems = {  # row name -> (server, path, model)
            "rerank": {"intentrank int8": ("intentrank", "/v1/rerank", "int8"),
                       "intentrank fp32": ("intentrank", "/v1/rerank", "fp32"),
                       "Infinity fp32 (torch)": ("infinity", "/rerank", "reranker")},
            "embeddings": {"intentrank int8": ("intentrank", "/v1/embeddings", "minilm"),
                           "Infinity fp32 (torch)": ("infinity", "/embeddings", "minilm")}}
        for endpoint, rows in systems.items():
            live = {s: v for s, v in rows.items() if v[0] in servers}
            bodies = rerank_bodies if endpoint == "rerank" else embed_bodies
            for server, path, model in live.values():  # warm: first calls load lazily
                asyncio.run(load(servers[server][1], path, [{**b, "model": model}
                                                            for b in bodies[:2]],
                                 1, 2, SECONDS, auth[server]))
            for clients in LEVELS:
                count = REQUESTS[clients][endpoint == "embeddings"]
                acc = {s: {"latencies": [], "wall_s": 0.0, "codes": {}, "answers": {}}
                       for s in live}
                for r in range(ROUNDS):
                    for s, (server, path, model) in live.items():
                        got = asyncio.run(load(
                            servers[server][1], path, [{**b, "model": model} for b in bodies],
                            clients, count, SECONDS, auth[server], r * count))
                        a = acc[s]
                        a["latencies"] += got["latencies"]
                        a["wall_s"] += got["wall_s"]
                        for c, n in got["codes"].items():
                            a["codes"][c] = a["codes"].get(c, 0) + n
                        for i, ans in got["answers"].items():
                            a["answers"].setdefault(i, ans)
                for s, a in acc.items():
                    row = {"collection": name, "endpoint": endpoint, "system": s,
                           "clients": clients, "requests": len(a["latencies"]),
                           "errors": sum(n for c, n in a["codes"].items() if c != 200),
                           "rps": len(a["latencies"]) / a["wall_s"],
                           **percentiles(a["latencies"], scale=1000)}
                    if endpoint == "rerank":
                        row["pairs_per_request"] = sum(map(len, cands)) / len(cands)
                        got_q = sorted(a["answers"])
                        run = {sample[i].id: {cands[i][x["index"]]: float(x["relevance_score"])
                                              for x in a["answers"][i]["results"]}
                               for i in got_q}
                        row["ndcg"] = ndcg(run, qrels, [sample[i] for i in got_q])
                        row["queries_scored"] = len(got_q)
                    else:
                        row["vectors"] = {i: ans["data"][0]["embedding"]
                                          for i, ans in a["answers"].items()}
                    out["service"].append(row)
            if endpoint == "embeddings":  # the same model: cosine of each vector to ours
                mine = [r for r in out["service"] if r["endpoint"] == "embeddings"
                        and r["collection"] == name]
                ours = next(r for r in mine if r["system"].startswith("intentrank"))
                for r in mine:
                    common = sorted(set(r["vectors"]) & set(ours["vectors"]))
                    cos = [float(np.dot(r["vectors"][i], ours["vectors"][i]) /
                                 np.linalg.norm(r["vectors"][i]) /
                                 np.linalg.norm(ours["vectors"][i])) for i in common]
                    r["cosine_to_intentrank"] = float(np.mean(cos)) if cos else None
                for r in mine:
                    r.pop("vectors", None)
    finally:
        for proc, _ in servers.values():
            stop(proc)


if __name__ == "__main__":
    serve_intentrank(int(sys.argv[1]), Path(sys.argv[2]))
