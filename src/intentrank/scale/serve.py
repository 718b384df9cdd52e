"""The HTTP service on Ray Serve: ``create_app`` of :mod:`intentrank.service` built inside
each replica (indexes and models load there, never pickled from the driver), optionally
with the cross-encoder served by its own deployment that batches pairs across requests.

Batching: :func:`scorer_deployment` is a deployment holding one cross-encoder whose
``score`` method is a ``@serve.batch`` handler: calls from every service replica (one call
per query: its (query, passage) pairs) that arrive within ``batch_wait_timeout_s`` are
scored together, up to ``max_batch_size`` calls per model call. Each service replica's
pipelines then route their ``cross_encoder`` steps that name that model (same ``model``,
``backend``, ``max_length``) to the deployment through a handle (:class:`BatchedScorer`);
other steps score in the replica. Worth it for fp32 / torch cross-encoders only
(docs/scale.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

import numpy as np

SCORER = "cross_encoder_batched"  # the scorer deployment's name


@dataclass(frozen=True)
class ScorerSpec:
    """The cross-encoder a scorer deployment holds, as a ``cross_encoder`` step names it."""

    model: str
    backend: str | None = None
    max_length: int | None = None
    threads: int | None = None
    precision: str | None = None  # the onnx backend's (models/cross_encoder.py PRECISIONS)

    def matches(self, params: dict[str, Any]) -> bool:
        """Whether a ``cross_encoder`` step with ``params`` uses this model."""
        return (str(params.get("model")) == self.model
                and params.get("backend") == self.backend
                and params.get("max_length") == self.max_length
                and params.get("precision") == self.precision)


class BatchedScorer:
    """A :class:`~intentrank.models.cross_encoder.PairScorer` whose ``predict`` sends one
    query's pairs to the scorer deployment (a blocking call: the service runs stages on
    its worker threads, outside the event loop)."""

    def __init__(self, handle: Any, spec: ScorerSpec) -> None:
        self.handle, self.spec = handle, spec
        self.name = f"{Path(spec.model).name} (Ray Serve, batched across requests)"
        self.max_length = spec.max_length

    def predict(self, pairs: Any, batch_size: int = 8) -> np.ndarray:  # noqa: ARG002
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self.handle.score.remote([tuple(p) for p in pairs]).result()
        return np.asarray(scores, dtype=np.float32)

    def __repr__(self) -> str:  # the stage's resource key: one per spec
        return f"BatchedScorer({self.spec.model!r})"


def route_cross_encoder(node: Any, scorer: Any, spec: ScorerSpec,
                        seen: list[dict[str, Any]] | None = None) -> tuple[Any, int]:
    """A copy of a pipeline config node whose ``cross_encoder`` steps naming ``spec`` score
    with ``scorer``; and how many steps were routed. Every ``cross_encoder`` step's
    parameters are appended to ``seen`` when given."""
    seen = [] if seen is None else seen
    if isinstance(node, list):
        routed = [route_cross_encoder(item, scorer, spec, seen) for item in node]
        return [new for new, _ in routed], sum(k for _, k in routed)
    if node == "cross_encoder":  # a step with default parameters
        seen.append({})
    if not isinstance(node, dict):
        return node, 0
    step = node["cross_encoder"] if set(node) == {"cross_encoder"} else False
    if step is None:  # `cross_encoder:` with nothing after it (null): the defaults
        seen.append({})
    elif isinstance(step, dict):
        seen.append(step)
        if spec.matches(step):
            params = {k: v for k, v in step.items()
                      if k not in ("backend", "max_length", "threads", "precision")}
            return {"cross_encoder": params | {"model": scorer}}, 1
    by_key = {key: route_cross_encoder(value, scorer, spec, seen) for key, value in node.items()}
    return {key: new for key, (new, _) in by_key.items()}, sum(k for _, k in by_key.values())


def _describe(params: dict[str, Any]) -> str:
    """``model M, backend B, max_length L`` of a step's (or spec's) parameters."""
    return ", ".join(f"{key} {'(not given)' if params.get(key) is None else params[key]}"
                     for key in ("model", "backend", "max_length"))


def routed_settings(settings: Any, scorer: Any, spec: ScorerSpec) -> Any:
    """``settings`` with every served pipeline's and reranker's matching ``cross_encoder``
    steps routed to ``scorer``; pipelines without one are left as given. Raises
    :class:`~intentrank.errors.ConfigError` naming ``spec`` and the steps it saw when no
    step matches (the scorer would batch nothing)."""
    from intentrank.core.config import load_config, resolve_pipeline
    from intentrank.errors import ConfigError

    pipelines, total, seen = {}, 0, []
    for name, source in settings.pipelines.items():
        node = load_config(resolve_pipeline(source))["pipeline"] \
            if isinstance(source, str | Path) else source
        new, n = route_cross_encoder(node, scorer, spec, seen)
        pipelines[name] = new if n else source
        total += n
    rerankers = {}
    for name, node in settings.rerankers.items():
        rerankers[name], n = route_cross_encoder(node, scorer, spec, seen)
        total += n
    if not total:
        steps = "; ".join(sorted({_describe(p) for p in seen})) or "none"
        raise ConfigError(
            f"no served pipeline or reranker has a cross_encoder step for the batched "
            f"cross-encoder ({_describe(vars(spec))}): it would batch nothing. The "
            f"cross_encoder steps served: {steps}. Name the model, backend and max_length "
            f"as a step does (--ray-ce, --ray-ce-backend, --ray-ce-max-length)")
    return replace(settings, pipelines=pipelines, rerankers=rerankers)


class _Scorer:
    """The scorer deployment's class: one cross-encoder, ``score`` batched by Ray Serve."""

    def __init__(self, spec: ScorerSpec, pair_batch_size: int) -> None:
        from intentrank.models.cross_encoder import load_cross_encoder

        if spec.threads:
            import torch

            torch.set_num_threads(spec.threads)
        self.scorer = load_cross_encoder(spec.model, spec.backend, spec.max_length,
                                         spec.threads, spec.precision)
        self.pair_batch_size = pair_batch_size  # (batch limits: set by scorer_deployment)
        self.batches: list[int] = []  # calls scored in each model call

    async def score(self, calls: list[list[tuple[str, str]]]) -> list[list[float]]:
        """Score every call's pairs in one model call (off the event loop, so calls keep
        queueing for the next batch meanwhile); each call gets its own scores back."""
        flat = [p for call in calls for p in call]
        scores = await asyncio.to_thread(self.scorer.predict, flat, self.pair_batch_size)
        self.batches.append(len(calls))
        bounds = [0, *accumulate(len(call) for call in calls)]
        return [np.asarray(scores[a:b], dtype=float).tolist() for a, b in pairwise(bounds)]

    def stats(self) -> dict[str, Any]:
        """Model calls made and calls (requests' queries) scored, for the mean batch size."""
        return {"batches": len(self.batches), "calls": int(sum(self.batches)),
                "max_batch": max(self.batches, default=0)}

    def reset_stats(self) -> None:
        self.batches = []


def scorer_deployment(spec: ScorerSpec, *, max_batch_size: int = 8,
                      batch_wait_timeout_s: float = 0.01, pair_batch_size: int = 32,
                      cpus: float = 1.0) -> Any:
    """A bound deployment of the cross-encoder ``spec``, scoring up to ``max_batch_size``
    calls together (``max_batch_size=1``: no batching), ``pair_batch_size`` pairs per
    forward pass."""
    from ray import serve

    if max_batch_size < 1 or batch_wait_timeout_s < 0 or pair_batch_size < 1:
        raise ValueError(f"max_batch_size and pair_batch_size must be >= 1 and "
                         f"batch_wait_timeout_s >= 0, got {max_batch_size}, "
                         f"{pair_batch_size}, {batch_wait_timeout_s}")
    cls = type("CrossEncoderScorer", (_Scorer,), {
        "score": serve.batch(max_batch_size=max_batch_size,
                             batch_wait_timeout_s=batch_wait_timeout_s)(_Scorer.score)})
    dep = serve.deployment(name=SCORER, num_replicas=1,
                           max_ongoing_requests=max(8, 4 * max_batch_size),
                           ray_actor_options={"num_cpus": cpus})(cls)
    return dep.bind(spec, pair_batch_size)


class _Service:
    """The service deployment's class: ``create_app`` built at replica start, its
    cross-encoder steps routed to the scorer deployment when one is bound."""

    def __init__(self, settings: Any, scorer: Any = None, spec: ScorerSpec | None = None
                 ) -> None:
        self.settings, self.scorer, self.spec = settings, scorer, spec

    def __serve_build_asgi_app__(self) -> Any:
        from intentrank.service import create_app

        settings = self.settings
        if self.scorer is not None and self.spec is not None:
            settings = routed_settings(settings, BatchedScorer(self.scorer, self.spec),
                                       self.spec)
        return create_app(settings)


def deployment(settings: Any, *, replicas: int = 2, cpus_per_replica: float = 1.0,
               scorer: Any = None, spec: ScorerSpec | None = None,
               replica_resources: dict[str, float] | None = None) -> Any:
    """A bound Ray Serve application of ``replicas`` copies of the service for
    ``settings`` (a :class:`~intentrank.service.settings.ServiceSettings` whose indexes are
    directories: every replica opens them itself); with ``scorer`` (a bound
    :func:`scorer_deployment` of ``spec``) its cross-encoder steps go there.
    ``replica_resources``: Ray custom resources each replica needs (e.g. one slot per
    node, to put replicas on different hosts)."""
    from ray import serve

    options: dict[str, Any] = {"num_cpus": cpus_per_replica}
    if replica_resources:
        options["resources"] = dict(replica_resources)
    cls = serve.deployment(name="intentrank", num_replicas=replicas,
                           max_ongoing_requests=16,
                           ray_actor_options=options)(
        serve.ingress()(type("IntentrankService", (_Service,), {})))
    return cls.bind(settings, scorer, spec)


def run(settings: Any, *, replicas: int = 2, cpus_per_replica: float = 1.0,
        host: str = "127.0.0.1", port: int = 8000, address: str | None = None,
        blocking: bool = False, cross_encoder: ScorerSpec | None = None,
        max_batch_size: int = 8, batch_wait_timeout_s: float = 0.01,
        pair_batch_size: int = 32, scorer_cpus: float = 1.0,
        replica_resources: dict[str, float] | None = None) -> Any:
    """Deploy the service on Ray Serve at http://host:port/ (``intentrank serve --ray``);
    with ``cross_encoder`` its matching cross-encoder steps are scored by a
    :func:`scorer_deployment` batching across requests (refused before Ray starts when no
    served step names it)."""
    from intentrank.scale.cluster import connect

    if cross_encoder is not None:
        routed_settings(settings, None, cross_encoder)
    connect(address)
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    scorer = None
    if cross_encoder is not None:
        scorer = scorer_deployment(cross_encoder, max_batch_size=max_batch_size,
                                   batch_wait_timeout_s=batch_wait_timeout_s,
                                   pair_batch_size=pair_batch_size, cpus=scorer_cpus)
    return serve.run(deployment(settings, replicas=replicas, cpus_per_replica=cpus_per_replica,
                                scorer=scorer, spec=cross_encoder,
                                replica_resources=replica_resources),
                     route_prefix="/", blocking=blocking)


def scorer_stats() -> dict[str, Any]:
    """The running scorer deployment's counters (one replica's)."""
    from ray import serve

    return serve.get_deployment_handle(SCORER, app_name="default").stats.remote().result()


def reset_scorer_stats() -> None:
    from ray import serve

    serve.get_deployment_handle(SCORER, app_name="default").reset_stats.remote().result()
