"""Where a cluster index's replicas are and whether each answers: for
:meth:`ClusterIndex.status <intentrank.scale.coordinator.ClusterIndex.status>` and
``intentrank cluster status`` (which finds the served indexes by their replicas' actor
names)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from intentrank.scale.pool import NAMESPACE, Replica


def cluster_status(shards: list[list[Replica]], groups: list[Any], timeout_s: float
                   ) -> dict[str, Any]:
    """Each replica's answer to ``info`` (or why not), the hosts Ray knows, and whether
    every shard has all its replicas answering on distinct hosts."""
    import ray
    from ray.util.placement_group import placement_group_table

    refs = {(r.shard, r.replica): r.actor.info.remote() for rs in shards for r in rs}
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    rows, full = [], True
    for (s, r), ref in refs.items():
        try:
            info = ray.get(ref, timeout=0.01)
            rows.append({**info, "state": "up"})
        except Exception as exc:  # noqa: BLE001 (a replica's state, whatever Ray says)
            rows.append({"shard": s, "replica": r, "state": "down",
                         "reason": type(exc).__name__})
    for s in range(len(shards)):
        mine = [x for x in rows if x["shard"] == s]
        hosts = {x.get("node_id") for x in mine if x["state"] == "up"}
        full = full and len(hosts) == len(mine)
    groups_state = [placement_group_table(pg).get("state") for pg in groups]
    nodes = [{"node_id": n["NodeID"], "host": n["NodeManagerAddress"], "alive": n["Alive"]}
             for n in ray.nodes()]
    return {"shards": len(shards), "replicas": rows, "placement_groups": groups_state,
            "hosts": nodes, "replication": "full" if full else "degraded"}


def describe(status: dict[str, Any]) -> Callable[[], str]:
    """A plain-text table of :func:`cluster_status` (for ``intentrank cluster status``)."""
    def text() -> str:
        lines = [f"index {status.get('index', '?')}: {status['shards']} shards, replication "
                 f"{status['replication']}", "shard replica state host generation"]
        for x in sorted(status["replicas"], key=lambda x: (x["shard"], x["replica"])):
            lines.append(f"{x['shard']:>5} {x['replica']:>7} {x['state']:<5} "
                         f"{x.get('host', '-'):<15} {x.get('generation', '-')}")
        lines.append("hosts: " + ", ".join(f"{n['host']} ({'alive' if n['alive'] else 'dead'})"
                                           for n in status["hosts"]))
        return "\n".join(lines)
    return text


def find_served(address: str, prefix: str = "", timeout_s: float = 5.0
                ) -> list[dict[str, Any]]:
    """:func:`cluster_status` of every cluster index served on the Ray cluster at
    ``address`` (its replicas are named actors ``irshard-NAME-SHARD-REPLICA`` in the
    ``intentrank`` namespace), optionally only those whose name starts with ``prefix``."""
    from intentrank.scale.cluster import connect

    ray = connect(address)
    from ray.util import get_placement_group, list_named_actors

    served: dict[str, dict[tuple[int, int], str]] = {}
    for entry in list_named_actors(all_namespaces=True):
        actor = entry["name"] if isinstance(entry, dict) else entry
        if not actor.startswith("irshard-") or (isinstance(entry, dict) and
                                                entry.get("namespace") != NAMESPACE):
            continue
        name, shard, replica = actor[len("irshard-"):].rsplit("-", 2)
        if name.startswith(prefix):
            served.setdefault(name, {})[(int(shard), int(replica))] = actor
    out = []
    for name, actors in sorted(served.items()):
        n_shards = 1 + max(s for s, _ in actors)
        shards = [[Replica(s, r, ray.get_actor(a, namespace=NAMESPACE))
                   for (s2, r), a in sorted(actors.items()) if s2 == s] for s in range(n_shards)]
        groups = []
        for s in range(n_shards):
            with contextlib.suppress(Exception):
                groups.append(get_placement_group(f"irshard-{name}-{s}"))
        out.append(cluster_status(shards, groups, timeout_s) | {"index": name})
    return out
