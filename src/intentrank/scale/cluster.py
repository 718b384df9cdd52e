"""Connecting to Ray, and a local head + worker cluster on the loopback address."""

from __future__ import annotations

import os
import sys
from typing import Any

from intentrank.errors import IntentrankError

# what every worker process needs (the repo's cache directory, offline model loading)
_ENV_KEYS = ("INTENTRANK_CACHE", "INTENTRANK_DATA", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
             "TOKENIZERS_PARALLELISM")


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the scale extra is missing
        raise IntentrankError("--ray needs Ray: pip install 'intentrank[scale]'") from exc
    return ray


def runtime_env() -> dict[str, Any]:
    """Environment variables the workers inherit from this process."""
    return {"env_vars": {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}}


def connect(address: str | None = None) -> Any:
    """Initialise Ray once in this process: join ``address`` (``auto``, ``HOST:PORT``,
    ``ray://HOST:PORT``) or, with None, start a local Ray. Returns the ray module. An
    unreachable address raises :class:`IntentrankError` naming it."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    local = {"include_dashboard": False} if address is None else {}
    try:
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env(), **local)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise IntentrankError(f"cannot connect to the Ray cluster at {address!r}: {exc}") \
            from exc
    return ray


def loopback() -> None:
    """Make Ray resolve this machine's address to 127.0.0.1 (by default it resolves
    ``127.0.0.1`` to the machine's outward IP, which a sandbox may not reach), for this
    process and the nodes it starts."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # ray: "use the loopback IP"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # ray already imported: its constant was read at import
        constants.ENABLE_RAY_CLUSTER = False


class LocalCluster:
    """A real Ray cluster on this machine: a head node and ``workers`` worker nodes, each
    its own raylet on 127.0.0.1 with ``cpus_per_node`` CPUs (``ray.cluster_utils``).
    ``shutdown()`` stops exactly the processes it started."""

    def __init__(self, workers: int = 1, cpus_per_node: int = 1) -> None:
        loopback()
        self.ray = import_ray()
        from ray.cluster_utils import Cluster

        node = {"num_cpus": cpus_per_node, "object_store_memory": 256 << 20,
                "node_ip_address": "127.0.0.1"}
        head = dict(node, include_dashboard=False)
        self.cluster = Cluster(initialize_head=True, head_node_args=head)
        for _ in range(workers):
            self.cluster.add_node(**node)
        self.address = self.cluster.address
        self.ray.init(address=self.address, log_to_driver=False, runtime_env=runtime_env(),
                      _node_ip_address="127.0.0.1")
        self.cluster.wait_for_nodes()

    def nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def shutdown(self) -> None:
        self.ray.shutdown()
        self.cluster.shutdown()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
