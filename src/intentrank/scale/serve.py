"""The HTTP service on Ray Serve: ``create_app`` of :mod:`intentrank.service` built inside
each replica (indexes and models load there, never pickled from the driver).

Not done yet: batching of cross-encoder calls across requests (``@serve.batch``) needs a
seam in the service's engine; each replica reranks its own requests as the service does.
"""

from __future__ import annotations

from typing import Any


def deployment(settings: Any, *, replicas: int = 2, cpus_per_replica: float = 1.0) -> Any:
    """A bound Ray Serve application of ``replicas`` copies of the service for
    ``settings`` (a :class:`~intentrank.service.settings.ServiceSettings` whose indexes are
    directories: every replica opens them itself)."""
    from ray import serve

    def build() -> Any:
        from intentrank.service import create_app

        return create_app(settings)

    cls = serve.deployment(name="intentrank", num_replicas=replicas,
                           ray_actor_options={"num_cpus": cpus_per_replica})(
        serve.ingress(build)(type("IntentrankService", (), {})))
    return cls.bind()


def run(settings: Any, *, replicas: int = 2, cpus_per_replica: float = 1.0,
        host: str = "127.0.0.1", port: int = 8000, address: str | None = None,
        blocking: bool = False) -> Any:
    """Deploy the service on Ray Serve at http://host:port/ (``intentrank serve --ray``)."""
    from intentrank.scale.cluster import connect

    connect(address)
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    return serve.run(deployment(settings, replicas=replicas,
                                cpus_per_replica=cpus_per_replica),
                     route_prefix="/", blocking=blocking)
