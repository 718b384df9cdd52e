"""Faults across hosts: a Ray head and two workers, each in its own network namespace with
its own address (10.77.S.0/24, tests/namespace_hosts.py), joined as one cluster.
Real Ray, real MiniLM and cross-encoder, real Cranfield, real SIGKILLs of every process of a
worker host in the middle of the work:

* ``intentrank index --ray-address`` across the hosts gives the single-process embeddings,
  also when a host running an encoder actor is lost mid-encoding (no passage lost or
  written twice: ``ray_encode`` checks one vector per passage);
* ``intentrank eval --ray-address`` gives the single-process run file (same documents and
  scores, so equal metrics), also when a host running an evaluation task is lost;
* Ray Serve with two replicas on the two worker hosts under a steady request rate: one
  host lost; with the client's retry policy (3 tries, 0.5 s apart) no request fails, and
  every answer equals the plain (one-process) service's.

Opt-in: ``pytest -m cluster`` (root and iproute2; otherwise every test skips saying why).
Timings (time lost, time to recover) go to $INTENTRANK_FAULTS_OUT (JSON) when set
(``scripts/faults.sh`` writes the tables from it); pass/fail never depends on them.
``INTENTRANK_FAULTS_DOCS`` (default 1400) encodes that many Cranfield documents.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from namespace_hosts import Hosts, unavailable
from tolerances import F32_REL

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
DOCS = int(os.environ.get("INTENTRANK_FAULTS_DOCS", "1400"))
RESULTS: dict[str, dict] = {}
CE_PIPELINE = ("pipeline:\n  - bm25: {depth: 20}\n"
               "  - cross_encoder: {top_k: 20, backend: onnx, max_length: 128}\n")
TIMEOUT = 900  # one job, generously: 2 contended cores


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    reason = unavailable()
    if reason:
        pytest.skip(f"no namespace hosts here: {reason}")
    with Hosts(log=print) as h:
        h.start_ray(cpus={"head": 1, "w1": 1, "w2": 1},
                    resources={"w1": {"replica_slot": 1}, "w2": {"replica_slot": 1}})
        yield h
    out = os.environ.get("INTENTRANK_FAULTS_OUT")
    if out and RESULTS:  # merged into what an earlier run (e.g. of other tests) wrote
        path = Path(out)
        old = json.loads(path.read_text()) if path.exists() else {}
        for key, value in RESULTS.items():
            old.setdefault(key, {}).update(value)
        path.write_text(json.dumps(old, indent=1) + "\n")


def _env(cache: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT / "src"), "INTENTRANK_CACHE": str(cache)}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "intentrank.cli", *args]


def _run_and_kill(hosts: Hosts, cmd: list[str], cache: Path, log: Path, marker: str | None,
                  after_s: float = 3.0) -> dict:
    """Run ``cmd`` in the head's namespace; with ``marker`` (a Ray process title), once such
    a process on a worker host has used ``after_s`` CPU seconds (it is working: model loaded,
    batches or queries under way), SIGKILL every process of that host. Returns seconds,
    exit status, the host killed and how many processes."""
    before = {p for name in ("w1", "w2") for p in hosts.pids(name)}  # an earlier job's
    start = time.monotonic()
    proc = hosts.popen("head", cmd, log=log, **_env(cache))
    killed: dict = {}
    if marker is not None:  # kill a host whose marked process is computing (mid-job)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None and not killed:
            for name in ("w1", "w2"):
                busy = [p for p in hosts.pids(name)
                        if p not in before and marker in _cmdline(p)]
                if busy and _cpu_s(busy[0]) >= after_s:
                    killed = {"host": name, "at_s": time.monotonic() - start,
                              "cpu_s_before_kill": _cpu_s(busy[0]),
                              "pids": len(hosts.kill(name))}
                    break
            time.sleep(0.2)
        assert killed, f"no worker host ran {marker!r}: {log.read_text()[-3000:]}"
    code = proc.wait(timeout=TIMEOUT)
    return {"seconds": time.monotonic() - start, "exit": code, **killed}


def _cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` has used (user + system), 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _restore(hosts: Hosts, name: str) -> None:
    """Start host ``name``'s Ray node again after a kill (bounded wait for 3 nodes)."""
    import json as _json

    from namespace_hosts import ray_bin

    res = {"replica_slot": 1} if name in ("w1", "w2") else {}
    out = hosts.run(name, [ray_bin(), "start", "--node-ip-address", hosts.address[name],
                           "--num-cpus", "1", "--object-store-memory", str(200 << 20),
                           "--disable-usage-stats", "--resources", _json.dumps(res),
                           "--address", hosts.ray_address or ""], timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    hosts.wait_nodes(3, timeout=180)


@pytest.fixture(scope="module")
def subset(data_dir, tmp_path_factory) -> Path:
    """The first DOCS Cranfield documents as a corpus file."""
    path = tmp_path_factory.mktemp("subset") / "corpus.jsonl"
    with (data_dir / "cranfield" / "corpus.jsonl").open() as src:
        path.write_text("".join(line for _, line in zip(range(DOCS), src, strict=False)))
    return path


@pytest.fixture(scope="module")
def local_embeddings(subset, tmp_path_factory):
    """The single-process `intentrank index` of the subset (dense leg)."""
    import subprocess

    from intentrank.index import Index

    out = tmp_path_factory.mktemp("local") / "idx"
    t = time.monotonic()
    subprocess.run(_cli("index", str(subset), str(out), "--legs", "dense"), check=True,
                   timeout=TIMEOUT, capture_output=True,
                   env=dict(os.environ, **_env(tmp_path_factory.mktemp("cache"))))
    RESULTS.setdefault("encode", {})["single_process_s"] = time.monotonic() - t
    with Index(out) as idx:
        return list(idx.ids), np.array(idx.embeddings)


@pytest.mark.parametrize("kill", [False, True], ids=["whole", "host-lost"])
def test_index_on_ray_across_hosts(hosts, subset, local_embeddings, tmp_path, kill):
    from intentrank.index import Index

    out = tmp_path / "idx"
    cmd = _cli("index", str(subset), str(out), "--legs", "dense", "--ray-address",
               hosts.ray_address or "", "--ray-workers", "2", "--ray-batch-size", "32")
    res = _run_and_kill(hosts, cmd, tmp_path / "cache", tmp_path / "log",
                        "_EmbedActor" if kill else None, after_s=5.0)
    assert res["exit"] == 0, (tmp_path / "log").read_text()[-3000:]
    ids, vecs = local_embeddings
    with Index(out) as idx:
        assert list(idx.ids) == ids  # every document once, in corpus order
        got = np.array(idx.embeddings)
    assert got.shape == vecs.shape
    np.testing.assert_allclose(got, vecs, rtol=F32_REL, atol=1e-5)
    RESULTS.setdefault("encode", {})["ray_" + ("host_lost" if kill else "whole")] = {
        **res, "docs": len(ids), "max_abs_diff": float(np.abs(got - vecs).max())}
    if kill:
        _restore(hosts, res["host"])


@pytest.fixture(scope="module")
def eval_setup(data_dir, tmp_path_factory):
    """A BM25 index of all of Cranfield, the BM25 -> cross-encoder config, and the
    single-process run file of `intentrank eval`."""
    import subprocess

    root = tmp_path_factory.mktemp("eval")
    cfg = root / "bm25_ce.yaml"
    cfg.write_text(CE_PIPELINE)
    env = dict(os.environ, **_env(root / "cache"))
    subprocess.run(_cli("index", str(data_dir / "cranfield"), str(root / "idx"), "--legs",
                        "bm25"), check=True, timeout=TIMEOUT, capture_output=True, env=env)
    t = time.monotonic()
    subprocess.run(_cli("eval", str(data_dir / "cranfield"), "--index", str(root / "idx"),
                        "-p", str(cfg), "--runs-dir", str(root / "local")), check=True,
                   timeout=TIMEOUT, capture_output=True, env=env)
    RESULTS.setdefault("eval", {})["single_process_s"] = time.monotonic() - t
    return root, cfg


def _metrics(run_file: Path, qrels_file: Path) -> dict[str, float]:
    from intentrank.data.trec import load_qrels, load_run
    from intentrank.measures.metrics import evaluate

    return evaluate(load_run(run_file), load_qrels(qrels_file),
                    ["nDCG@10", "MAP@100", "Recall@100", "P@10"]).aggregate


@pytest.mark.parametrize("kill", [False, True], ids=["whole", "host-lost"])
def test_eval_on_ray_across_hosts(hosts, data_dir, eval_setup, tmp_path, kill):
    root, cfg = eval_setup
    runs = tmp_path / "runs"
    cmd = _cli("eval", str(data_dir / "cranfield"), "--index", str(root / "idx"), "-p",
               str(cfg), "--ray-address", hosts.ray_address or "", "--ray-tasks", "2",
               "--runs-dir", str(runs))
    res = _run_and_kill(hosts, cmd, tmp_path / "cache", tmp_path / "log",
                        "_run_chunk" if kill else None, after_s=8.0)
    assert res["exit"] == 0, (tmp_path / "log").read_text()[-3000:]
    local = (root / "local" / "bm25_ce.trec").read_text().splitlines()
    remote = (runs / "bm25_ce.trec").read_text().splitlines()
    assert len(remote) == len(local)
    for a, b in zip(local, remote, strict=True):  # qid Q0 doc rank score tag
        qa, _, da, ra, sa, _ = a.split()
        qb, _, db, rb, sb, _ = b.split()
        assert (qa, da, ra) == (qb, db, rb)
        assert float(sb) == pytest.approx(float(sa), rel=F32_REL, abs=1e-6)
    qrels = data_dir / "cranfield" / "qrels" / "test.tsv"
    m_local, m_remote = _metrics(root / "local" / "bm25_ce.trec", qrels), \
        _metrics(runs / "bm25_ce.trec", qrels)
    assert m_remote == m_local
    RESULTS.setdefault("eval", {})["ray_" + ("host_lost" if kill else "whole")] = {
        **res, "metrics": m_remote, "lines": len(remote)}
    if kill:
        _restore(hosts, res["host"])


# -- Ray Serve: two replicas on two hosts, one host lost under load --------------------------
DEPLOY = """
import sys
from intentrank.scale.serve import run
from intentrank.service.settings import ServiceSettings
settings = ServiceSettings(indexes={{"cranfield": {index!r}}}, pipelines={{"bm25": "bm25"}},
                           rerankers={{}}, require_keys=False, workers=1, access_log=False)
run(settings, replicas=2, cpus_per_replica=0.25, host="0.0.0.0", port={port},
    address={address!r}, replica_resources={{"replica_slot": 1}})
print("deployed", flush=True)
"""
REPLICA_MARKER = "ServeReplica:default:intentrank"


def _post(url: str, body: dict, timeout: float = 10.0) -> tuple[int, dict | None]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, None


def test_serve_replicas_on_two_hosts_survive_a_lost_host(hosts, data_dir, eval_setup,
                                                         tmp_path):
    from fastapi.testclient import TestClient

    from intentrank.service import create_app
    from intentrank.service.settings import ServiceSettings

    root, _ = eval_setup
    index = str(root / "idx")
    port = 8000
    deploy = hosts.run("head", [sys.executable, "-c", DEPLOY.format(
        index=index, port=port, address=hosts.ray_address)], timeout=TIMEOUT,
        **_env(tmp_path / "cache"))
    assert deploy.returncode == 0 and "deployed" in deploy.stdout, deploy.stderr[-3000:]
    placed = {n: any(REPLICA_MARKER in _cmdline(p) for p in hosts.pids(n))
              for n in hosts.names}
    assert placed == {"head": False, "w1": True, "w2": True}, placed

    queries = [json.loads(x)["text"] for x in
               (data_dir / "cranfield" / "queries.jsonl").read_text().splitlines()[:40]]
    plain = TestClient(create_app(ServiceSettings(
        indexes={"cranfield": index}, pipelines={"bm25": "bm25"}, rerankers={},
        require_keys=False, workers=1, access_log=False)))
    expected = {q: [r["doc_id"] for r in plain.post(
        "/search", json={"query": q, "pipeline": "bm25"}).json()["results"]]
        for q in queries}
    url = f"http://{hosts.address['head']}:{port}/search"
    rate, seconds, kill_at = 4.0, 40.0, 12.0
    records: list[dict] = []
    lock = threading.Lock()

    def one(n: int, t0: float) -> None:
        q = queries[n % len(queries)]
        sent = time.monotonic() - t0
        tries, status, body = 0, 0, None
        while tries < 3:  # the retry policy: 3 tries, 0.5 s apart
            tries += 1
            status, body = _post(url, {"query": q, "pipeline": "bm25"})
            if status == 200:
                break
            time.sleep(0.5)
        with lock:
            records.append({"sent": sent, "tries": tries, "status": status,
                            "same": body is not None and [r["doc_id"] for r in
                                                          body["results"]] == expected[q],
                            "done": time.monotonic() - t0})

    t0 = time.monotonic()
    threads, killed = [], {}
    n = 0
    while time.monotonic() - t0 < seconds:  # bounded: seconds * rate requests
        due = t0 + n / rate
        time.sleep(max(0.0, due - time.monotonic()))
        if not killed and time.monotonic() - t0 >= kill_at:
            killed = {"host": "w1", "at_s": time.monotonic() - t0,
                      "pids": len(hosts.kill("w1"))}
        th = threading.Thread(target=one, args=(n, t0), daemon=True)
        th.start()
        threads.append(th)
        n += 1
    for th in threads:
        th.join(timeout=60)
    first_try_failed = [r for r in records if r["tries"] > 1 or r["status"] != 200]
    failed = [r for r in records if r["status"] != 200]
    after = [r for r in records if r["sent"] >= killed["at_s"]]
    recovered = max((r["sent"] for r in first_try_failed), default=killed["at_s"]) \
        - killed["at_s"]
    RESULTS["serve"] = {
        "rate_per_s": rate, "seconds": seconds, "requests": len(records),
        "killed": killed, "failed_first_try": len(first_try_failed),
        "failed_after_retries": len(failed), "retried_ok": len(first_try_failed) - len(failed),
        "recovered_s": recovered, "after_kill": len(after),
        "p50_ms": 1000 * float(np.median([r["done"] - r["sent"] for r in records])),
        "max_ms": 1000 * max(r["done"] - r["sent"] for r in records)}
    assert len(records) == n
    assert not failed, RESULTS["serve"]
    assert all(r["same"] for r in records)
    assert after and all(r["status"] == 200 for r in after)
