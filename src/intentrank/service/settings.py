"""What a service serves and how much it accepts: indexes and pipelines by name (the only
way a request reaches either), keys, limits, the worker pool, CORS, report directories."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intentrank.core.params import check_int, check_number
from intentrank.errors import ConfigError

# What the service serves when not told: every shipped retrieval pipeline, the cascade, the
# answer pipeline, and the conversation pipeline (a request with earlier turns and no
# pipeline named runs it; LLMs load on first use).
DEFAULT_PIPELINES = ("bm25", "dense", "tfidf", "sparse", "graph", "rrf", "weighted", "cascade",
                     "answer", "conversation")
CONVERSATION_PIPELINE = "conversation"
# Rerankers for POST /rerank: config nodes run over the request's own candidates.
DEFAULT_RERANKERS: dict[str, Any] = {
    "cross_encoder": {"cross_encoder": {"top_k": 100, "backend": "onnx", "max_length": 128}},
}
# Body-size limits of the endpoints that need another than Limits.max_body_bytes.
BODY_LIMITS = {"/documents": 20_000_000, "/evaluate": 20_000_000}
REPO_REPORTS = Path(__file__).resolve().parents[3] / "docs" / "ablation"


@dataclass
class Limits:
    """Per-request limits; each violation is a 4xx whose message names the limit."""

    max_body_bytes: int = 2_000_000
    max_query_chars: int = 1_000
    max_top_k: int = 100
    max_turns: int = 20
    max_candidates: int = 100
    max_candidate_chars: int = 10_000

    def check(self) -> Limits:
        for name, value in vars(self).items():
            check_int(name, value)
        return self


@dataclass
class ServiceSettings:
    """Everything :func:`intentrank.service.create_app` needs.

    ``indexes``: name -> index directory (or an open ``Index``); the first is the default.
    ``pipelines``: name -> a shipped pipeline name, a YAML config path, or a config node
    (a YAML ``pipeline:`` value); every pipeline is built for every index at start-up.
    ``rerankers``: name -> config node run over a request's own candidates (POST /rerank).
    ``keys``: a :class:`~intentrank.service.auth.KeyStore` or a
    :class:`~intentrank.service.keyring.KeyRing` (a keys file, reloaded when it changes);
    with ``require_keys`` (the default) every endpoint but /health and the static page
    needs one of them. ``body_limits``: path -> its body-size limit (others:
    ``limits.max_body_bytes``); ``log_texts``: log request texts (off: never);
    ``auth_failures_per_minute``: failed authentications a client address may make.
    ``watch_s``: every that many seconds, switch to an index directory's new generation when
    a rebuild has committed one, and a cluster index to the commits another writer made on
    its shards (None: serve the generations opened at start-up).
    ``drain_s``: after SIGTERM, how long in-flight requests get to finish (new ones: 503).
    """

    indexes: dict[str, Any]
    pipelines: dict[str, Any] = field(
        default_factory=lambda: {name: name for name in DEFAULT_PIPELINES})
    rerankers: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_RERANKERS))
    keys: Any = None
    require_keys: bool = True
    limits: Limits = field(default_factory=Limits)
    workers: int = 2
    queue_limit: int = 32
    timeout_s: float = 60.0
    retry_after_s: int = 2
    cors_origins: list[str] = field(default_factory=list)
    report_dirs: list[Path] = field(default_factory=lambda: [REPO_REPORTS])
    llm: Any = "embedded"
    llm_options: dict[str, Any] = field(default_factory=dict)
    access_log: Any = None  # a path, a text stream (default: stderr) or False for none
    default_pipeline: str | None = None
    watch_s: float | None = None  # check the index directories' CURRENT this often (reload)
    drain_s: float = 30.0  # on SIGTERM: at most this long for in-flight requests to finish
    body_limits: dict[str, int] = field(default_factory=lambda: dict(BODY_LIMITS))
    log_texts: bool = False  # put queries and filters in the access log
    auth_failures_per_minute: int = 30  # per client address; then 429 until it refills

    def check(self) -> ServiceSettings:
        """Refuse settings that cannot serve, naming the bad one."""
        if not self.indexes:
            raise ConfigError("the service needs at least one index")
        if not self.pipelines and not self.rerankers:
            raise ConfigError("the service needs at least one pipeline")
        for kind, names in (("index", self.indexes), ("pipeline", self.pipelines),
                            ("reranker", self.rerankers)):
            for name in names:
                if not isinstance(name, str) or not name or not name.replace("-", "").replace(
                        "_", "").replace(".", "").isalnum():
                    raise ConfigError(f"{kind} name {name!r}: use letters, digits, '-', '_', "
                                      f"'.'")
        clash = sorted(set(self.pipelines) & set(self.rerankers))
        if clash:
            raise ConfigError(f"{clash}: a name is either a pipeline or a reranker, not both")
        self.limits.check()
        check_int("workers", self.workers)
        check_int("queue_limit", self.queue_limit, minimum=0)
        check_number("timeout_s", self.timeout_s, above=0)
        check_int("retry_after_s", self.retry_after_s)
        if self.watch_s is not None:
            check_number("watch_s", self.watch_s, above=0)
        check_number("drain_s", self.drain_s, above=0)
        check_int("auth_failures_per_minute", self.auth_failures_per_minute)
        for path, limit in self.body_limits.items():
            check_int(f"body_limits[{path!r}]", limit)
        if self.require_keys and (self.keys is None or not len(self.keys)):
            raise ConfigError("API keys are required but none are configured: give a keys "
                              "file or $INTENTRANK_API_KEYS, or turn keys off explicitly")
        if self.keys is not None:
            unknown = sorted(self.keys.pipelines_named() - set(self.pipelines)
                             - set(self.rerankers))
            if unknown:
                raise ConfigError(f"API keys name pipeline(s) {unknown} that are not served "
                                  f"(served: {', '.join([*self.pipelines, *self.rerankers])})")
            unknown = sorted(self.keys.indexes_named() - set(self.indexes))
            if unknown:
                raise ConfigError(f"API keys name index(es) {unknown} that are not served "
                                  f"(served: {', '.join(self.indexes)})")
        if self.default_pipeline is not None and self.default_pipeline not in self.pipelines:
            raise ConfigError(f"default pipeline {self.default_pipeline!r} is not served")
        return self

    @property
    def default(self) -> str:
        """The pipeline a search without ``pipeline`` uses."""
        if self.default_pipeline:
            return self.default_pipeline
        return "rrf" if "rrf" in self.pipelines else next(iter(self.pipelines), "")

    def default_for(self, conversational: bool) -> str:
        """The pipeline a request without ``pipeline`` uses: for a conversation (earlier
        turns given) the served `conversation` pipeline, which rewrites the question from
        them, when there is one; else :attr:`default`."""
        if conversational and CONVERSATION_PIPELINE in self.pipelines:
            return CONVERSATION_PIPELINE
        return self.default
