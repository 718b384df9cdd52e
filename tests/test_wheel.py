"""The wheel works without the repository: ``python -m build`` makes an sdist and a wheel
(from the sdist); the wheel holds every module and data file of ``src/intentrank`` (the
bundled cross-encoder, prompts, configs, experiment files, the web page) and no absolute
path of this machine; installed alone into a folder (``pip --target``, the environment's
other packages serve as its dependencies) and run from a directory outside the checkout,
``index``, ``search`` (a shipped config and one with the bundled cross-encoder) and ``eval``
work, ``answer`` runs (no LLM server: an abstention or a counted fallback) and ``serve``
answers a search."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "intentrank"

CORPUS = [
    {"_id": "d1", "title": "Flutter", "text": "wing flutter of a slender swept wing"},
    {"_id": "d2", "title": "Lift", "text": "lift of a wing at low speed"},
    {"_id": "d3", "title": "Boundary layers", "text": "laminar boundary layer on a flat plate"},
    {"_id": "d4", "title": "Shocks", "text": "shock waves in supersonic flow over a wedge"},
    {"_id": "d5", "title": "Heat", "text": "heat transfer in hypersonic flow"},
]
QUERIES = [{"_id": "q1", "text": "wing flutter"}, {"_id": "q2", "text": "boundary layer"}]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n"


def _source_files() -> set[str]:
    return {p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _machine_paths() -> list[str]:
    """Absolute paths of this machine that must not be baked into the wheel."""
    found = {str(ROOT), sys.prefix, str(Path(sys.executable).parent)}
    if str(Path.home()) != "/":
        found.add(str(Path.home()))
    return sorted(p for p in found if len(p) > 1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of the tree (pyproject, README, src), so nothing is written into
    the checkout; sdist first, the wheel from the sdist."""
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(tmp / "dist"), str(tree)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = (tmp / "dist").glob("intentrank-*.tar.gz")
    (whl,) = (tmp / "dist").glob("intentrank-*-py3-none-any.whl")
    assert sdist.stat().st_size > 0
    return whl


@pytest.mark.slow
def test_the_wheel_holds_every_file_and_no_machine_path(wheel) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        package = {n for n in names if n.startswith("intentrank/")}
        assert package == _source_files()  # every module and data file, nothing else
        for needed in ("intentrank/models/reranker/model_int8.onnx",
                       "intentrank/models/reranker/tokenizer.json",
                       "intentrank/prompts/listwise.yaml", "intentrank/configs/cascade.yaml",
                       "intentrank/experiments/cascade-ablation.yaml",
                       "intentrank/service/static/index.html", "intentrank/py.typed"):
            assert needed in names
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(info).decode()
        for extra in ("langchain", "llamaindex", "service", "llm", "all"):
            assert f"Provides-Extra: {extra}" in metadata
        scripts = z.read(info.replace("METADATA", "entry_points.txt")).decode()
        assert "intentrank = intentrank.cli:app" in scripts
        paths = _machine_paths()
        pattern = re.compile(r"/work/[A-Za-z0-9_.-]")
        leaks = []
        for name in sorted(names):
            text = z.read(name).decode("utf-8", errors="replace")
            leaks += [f"{name}: {p}" for p in paths if p in text]
            leaks += [f"{name}: {m.group(0)}" for m in pattern.finditer(text)]
        assert not leaks, leaks


def _serves(site: Path, work: Path) -> None:
    """``serve`` from the wheel answers /health and a search on a free loopback port."""
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.Popen([sys.executable, "-m", "intentrank.cli", "serve", "--index",
                             "idx", "-p", "bm25", "--no-keys", "--port", str(port)], cwd=work,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):  # bounded: up to 60 s to start
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
                time.sleep(0.5)
        else:
            raise AssertionError("serve did not answer /health within 60 s")
        request = urllib.request.Request(f"{url}/search", method="POST",
                                         data=json.dumps({"query": "wing flutter"}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            assert json.loads(r.read())["results"][0]["doc_id"] == "d1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cli(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # the installed wheel, not the checkout
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_the_installed_wheel_runs_outside_the_checkout(wheel, tmp_path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-index", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    work = tmp_path / "work"
    beir = work / "tiny"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    (beir / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    (beir / "qrels" / "test.tsv").write_text(QRELS)
    (work / "rerank.yaml").write_text(textwrap.dedent("""
        pipeline:
          - bm25: {depth: 5}
          - cross_encoder: {top_k: 5}
        """))

    def ok(*args: str) -> str:
        result = _cli(site, work, *args)
        assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
        return result.stdout

    where = ok("-c", "import intentrank, intentrank.cli; print(intentrank.__file__)").strip()
    assert Path(where).is_relative_to(site), where  # the wheel's copy, not the checkout's
    ok("-m", "intentrank.cli", "index", "tiny/corpus.jsonl", "idx", "--legs", "bm25")
    (bm25,) = json.loads(ok("-m", "intentrank.cli", "search", "idx", "wing flutter", "-p",
                            "bm25", "--json"))
    assert bm25["results"][0]["id"] == "d1"
    (reranked,) = json.loads(ok("-m", "intentrank.cli", "search", "idx", "boundary layer "
                                "growth", "-p", "rerank.yaml", "--json"))
    assert reranked["results"][0]["id"] == "d3"  # the bundled cross-encoder, from the wheel
    assert "cross_encoder" in reranked["results"][0]["stage_scores"]
    ok("-m", "intentrank.cli", "eval", "tiny", "-p", "bm25", "--index", "idx", "--metrics",
       "nDCG@10,MRR@10", "--report", "report.md")
    report = (work / "report.md").read_text()
    assert "| bm25 | **1.0000** | **1.0000** |" in report  # each query's document first
    contract = ok("-c", "from intentrank.llm.prompts import load_contract, shipped_contracts;"
                  "print(len(shipped_contracts()), load_contract('listwise').source)")
    assert contract.split()[0] == str(len(list((PACKAGE / "prompts").glob("*.yaml"))))
    # answer: no LLM server here, so the answer is either the relevance gate's abstention
    # (no call) or a counted fallback; either way the command runs from the wheel
    answered = json.loads(ok("-m", "intentrank.cli", "--llm", "openai:m@http://127.0.0.1:9/v1",
                             "--llm-retries", "0", "answer", "idx", "wing flutter", "-p",
                             "bm25", "--n-ans", "2", "--json"))
    assert answered["sources"] and "answer" in answered
    _serves(site, work)
    script = site / "bin" / "intentrank"  # the console script pip wrote for the wheel
    if script.exists():
        result = subprocess.run([str(script), "--help"], cwd=work, capture_output=True,
                                text=True, timeout=120,
                                env={**os.environ, "PYTHONPATH": str(site)})
        assert result.returncode == 0 and "search" in result.stdout
