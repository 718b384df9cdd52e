"""Test hosts on one machine: Linux network namespaces joined by veth pairs, each with its own
address, and a Ray node started in each, for fault tests (``tests/test_faults_cluster.py``,
``scripts/faults.sh``; test infrastructure, not part of the package). Needs root and
iproute2 (:func:`unavailable` says why not).

Topology, for a run tagged T (names start ``irh-``/``irh`` so teardown only ever touches its
own): a namespace ``irh-T-br`` holding a bridge; one namespace per host ``irh-T-NAME``, its
``eth0`` (10.77.S.2, .3, ...) wired to the bridge by a veth pair; and one veth pair from the
root namespace (10.77.S.1) so the test process can reach the hosts. Nothing is routed
beyond 10.77.S.0/24. Ray nodes are ``ray start`` processes run with ``ip netns exec``, so
each host's raylet, workers and Serve proxy live in its namespace and ``ip netns pids``
lists them (what :meth:`Hosts.kill` SIGKILLs: a host lost). Every wait is bounded; exiting
the context kills every process in the namespaces and deletes them, also after an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PREFIX = "irh"
RAY_PORT = 6379


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def unavailable() -> str | None:
    """Why namespace hosts cannot be made here (not root, no iproute2, no netns), or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    out = _ip("netns", "add", probe, check=False)
    if out.returncode != 0:
        return f"cannot create a network namespace: {out.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def ray_bin() -> str:
    """The ``ray`` command of this Python environment."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


class Hosts:
    """``names`` hosts in their own network namespaces on 10.77.``subnet``.0/24.

    ``hosts.address[name]`` is a host's IP; :meth:`run` / :meth:`popen` run a command in
    one; :meth:`start_ray` makes the first host a Ray head and the others workers."""

    def __init__(self, names: Sequence[str] = ("head", "w1", "w2"), subnet: int | None = None,
                 tag: str | None = None, log: Any = None) -> None:
        self.tag = tag or str(os.getpid() % 100000)
        self.subnet = subnet if subnet is not None else 20 + os.getpid() % 200
        self.names = list(names)
        self.ns = {n: f"{PREFIX}-{self.tag}-{n}" for n in self.names}
        self.bridge_ns = f"{PREFIX}-{self.tag}-br"
        self.address = {n: f"10.77.{self.subnet}.{i + 2}" for i, n in enumerate(self.names)}
        self.root_address = f"10.77.{self.subnet}.1"
        self.root_veth = f"{PREFIX}{self.tag}r"
        self.tmp = Path(f"/tmp/{PREFIX}-{self.tag}")
        self.log = log or (lambda m: None)
        self.ray_address: str | None = None
        self._popens: list[subprocess.Popen[Any]] = []

    # -- set-up and teardown -------------------------------------------------------------
    def __enter__(self) -> Hosts:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Create the namespaces, the bridge and the veth pairs, and bring them up."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        br = self.bridge_ns
        _ip("netns", "add", br)
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        _ip("-n", br, "link", "set", "lo", "up")
        for i, name in enumerate(self.names):
            ns, a, b = self.ns[name], f"{PREFIX}{self.tag}h{i}", f"{PREFIX}{self.tag}b{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", ns)
            _ip("link", "set", b, "netns", br)
            _ip("-n", ns, "link", "set", a, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.address[name]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", br, "link", "set", b, "master", "br0")
            _ip("-n", br, "link", "set", b, "up")
        peer = f"{PREFIX}{self.tag}p"
        _ip("link", "add", self.root_veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", br)
        _ip("-n", br, "link", "set", peer, "master", "br0")
        _ip("-n", br, "link", "set", peer, "up")
        _ip("addr", "add", f"{self.root_address}/24", "dev", self.root_veth)
        _ip("link", "set", self.root_veth, "up")
        self.log(f"hosts {self.address} on 10.77.{self.subnet}.0/24 (this process: "
                 f"{self.root_address})")

    def down(self) -> None:
        """Kill every process in the namespaces, then delete them and the root veth."""
        for p in self._popens:
            if p.poll() is None:
                p.kill()
        for name in self.names:
            self.kill(name)
        for p in self._popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        for ns in [*self.ns.values(), self.bridge_ns]:
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.root_veth, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- processes --------------------------------------------------------------------------
    def pids(self, name: str) -> list[int]:
        """The processes whose network namespace is host ``name``'s."""
        out = _ip("netns", "pids", self.ns[name], check=False)
        return [int(p) for p in out.stdout.split()] if out.returncode == 0 else []

    def kill(self, name: str, rounds: int = 20) -> list[int]:
        """SIGKILL every process of host ``name`` (the host is lost); the pids killed.
        Repeats (bounded) while new ones appear, e.g. a worker forked as it died."""
        killed: list[int] = []
        for _ in range(rounds):
            pids = [p for p in self.pids(name) if p != os.getpid()]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.2)
        return killed

    def env(self, **extra: str) -> dict[str, str]:
        # not RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which a local cluster earlier in the same
        # process sets (intentrank.scale.cluster.loopback): it refuses worker nodes
        inherited = {k: v for k, v in os.environ.items()
                     if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
        return {**inherited, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}

    def run(self, name: str, cmd: Sequence[str], timeout: float = 300,
            **env: str) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` in host ``name``'s namespace to the end (bounded by ``timeout``)."""
        return subprocess.run(["ip", "netns", "exec", self.ns[name], *cmd],
                              capture_output=True, text=True, timeout=timeout,
                              env=self.env(**env))

    def popen(self, name: str, cmd: Sequence[str], log: Path | None = None,
              **env: str) -> subprocess.Popen[Any]:
        """Start ``cmd`` in host ``name``'s namespace (killed at teardown)."""
        out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[name], *cmd], stdout=out,
                             stderr=subprocess.STDOUT, env=self.env(**env))
        self._popens.append(p)
        return p

    # -- Ray ---------------------------------------------------------------------------------
    def start_ray(self, cpus: dict[str, int] | None = None,
                  resources: dict[str, dict[str, float]] | None = None,
                  object_store_mb: int = 200, timeout: float = 180) -> str:
        """``ray start`` the first host as head and the others as workers, each with its
        own address; wait (bounded) until every node is alive. Returns HEAD_IP:PORT."""
        cpus, resources = cpus or {}, resources or {}
        head = self.names[0]
        self.ray_address = f"{self.address[head]}:{RAY_PORT}"
        for name in self.names:
            args = [ray_bin(), "start", "--node-ip-address", self.address[name],
                    "--num-cpus", str(cpus.get(name, 1)),
                    "--object-store-memory", str(object_store_mb << 20), "--disable-usage-stats"]
            if name in resources:
                args += ["--resources", json.dumps(resources[name])]
            if name == head:
                args += ["--head", "--port", str(RAY_PORT), "--include-dashboard", "false",
                         "--temp-dir", str(self.tmp / "ray")]
            else:
                args += ["--address", self.ray_address]
            out = self.run(name, args, timeout=timeout)
            if out.returncode != 0:
                raise RuntimeError(f"ray start on {name} failed: {out.stderr[-2000:]}")
            self.log(f"ray node {name} at {self.address[name]}")
        self.wait_nodes(len(self.names), timeout)
        return self.ray_address

    def alive_nodes(self) -> list[str]:
        """The node addresses Ray reports alive (asked from the head's namespace)."""
        script = ("import ray, json; ray.init(address='auto', log_to_driver=False); "
                  "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes() "
                  "if n['Alive']]))")
        out = self.run(self.names[0], [sys.executable, "-c", script], timeout=120,
                       RAY_ADDRESS=self.ray_address or "")
        if out.returncode != 0:
            return []
        return json.loads(out.stdout.strip().splitlines()[-1])

    def wait_nodes(self, count: int, timeout: float = 180) -> list[str]:
        """Wait until exactly ``count`` nodes are alive; their addresses."""
        deadline = time.monotonic() + timeout
        alive: list[str] = []
        while time.monotonic() < deadline:
            alive = self.alive_nodes()
            if len(alive) == count:
                return alive
            time.sleep(2)
        raise TimeoutError(f"{len(alive)} Ray nodes alive after {timeout:g} s, "
                           f"wanted {count}: {alive}")
