"""Server processes of the benchmarks: a free port, a server started and waited for until
``/health`` answers, stopped after; and the service app run in this process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: Any = None, seconds: float = 600, log: Path | None = None
                 ) -> None:
    """Poll ``url``/health until it answers 200; exit when ``proc`` (a Popen) ends first or
    ``seconds`` pass (with the tail of ``log``)."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.25)
    sys.exit(f"the service at {url} did not start" + (
        f": {log.read_text()[-2000:]}" if log and log.exists() else ""))


def stop(proc: subprocess.Popen, seconds: float = 30) -> None:
    """Terminate ``proc``; kill it when it has not ended after ``seconds``."""
    proc.terminate()
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start(command: Sequence[str], port: int, log: Path | None = None, seconds: float = 300,
          **popen: Any) -> tuple[subprocess.Popen, str]:
    """Start ``command`` (a server on 127.0.0.1:``port``; its output to ``log``, else
    inherited) and wait until it is healthy: the process and its URL."""
    if log is not None:
        with open(log, "w") as f:
            proc = subprocess.Popen(list(command), stdout=f, stderr=f, **popen)
    else:
        proc = subprocess.Popen(list(command), **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, seconds, log)
    except SystemExit:
        stop(proc)
        raise
    return proc, url


@contextlib.contextmanager
def running(command: Sequence[str], port: int, log: Path | None = None, seconds: float = 300,
            **popen: Any) -> Iterator[tuple[subprocess.Popen, str]]:
    """:func:`start` as a context: the server is stopped on leaving it."""
    proc, url = start(command, port, log, seconds, **popen)
    try:
        yield proc, url
    finally:
        stop(proc, 60)


async def load(url: str, path: str, bodies: list[dict], clients: int, count: int,
               seconds: float, headers: dict[str, str], start_at: int = 0,
               busy_pause: float = 0.0) -> dict[str, Any]:
    """``clients`` concurrent clients (keep-alive) posting ``bodies`` in turn (from
    ``start_at``) until ``count`` requests are sent or ``seconds`` pass: latencies of the
    200s, the wall time, every status code (-1: no answer) and the first answer to each
    body. A client that gets a 503 waits ``busy_pause`` seconds before its next request."""
    import httpx

    latencies: list[float] = []
    codes: dict[int, int] = {}
    answers: dict[int, Any] = {}
    sent = 0
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits,
                                 headers=headers) as http:
        async def client() -> None:
            nonlocal sent
            while sent < count and time.perf_counter() < stop_at:
                i = (start_at + sent) % len(bodies)
                sent += 1
                t = time.perf_counter()
                try:
                    reply = await http.post(path, json=bodies[i])
                    code = reply.status_code
                except httpx.HTTPError as exc:
                    code = -1
                    if codes.get(-1, 0) < 3:
                        print(f"[bench] {type(exc).__name__}: {exc}", file=sys.stderr)
                codes[code] = codes.get(code, 0) + 1
                if code == 200:
                    latencies.append(time.perf_counter() - t)
                    if i not in answers:
                        answers[i] = reply.json()
                elif code == 503 and busy_pause:
                    await asyncio.sleep(busy_pause)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - start
    return {"latencies": latencies, "wall_s": wall, "codes": codes, "answers": answers}


def serve(settings: Any, port: int) -> None:
    """Run the intentrank service app of ``settings`` on 127.0.0.1:``port`` (the body of a
    benchmark's server process)."""
    import uvicorn

    from intentrank.service import create_app

    uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                access_log=False)


def bench_keys(key: str) -> Any:
    """A key store holding one benchmark key (keys on, as deployed)."""
    from intentrank.service.auth import ApiKey, KeyStore, hash_key

    return KeyStore([ApiKey("bench", hash_key(key))])
