"""What the service tests share: a small real index, a uvicorn server on a loopback port
(in a thread), a slow stage and a scripted LLM backend."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from pathlib import Path
from typing import Any

from fakes import RecordingLLM

import intentrank.pipelines  # noqa: F401  (gives the registry the built-in stage packages)
from intentrank.core.registry import BuildContext, register_stage, stage_factory
from intentrank.core.stage import Stage
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.types import Ranking, Trace

KEY, BM25_KEY = "test-key-all", "test-key-bm25"


def small_index(data_dir: Path, where: Path, n: int = 300) -> Any:
    """A real index (all legs) of the first ``n`` Cranfield abstracts."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import build_index

    ds = load_dataset(data_dir / "cranfield")
    return build_index(itertools.islice(ds.corpus(), n), where)


class Slow(Stage):
    """Sleeps, then passes rankings on (a stand-in for a slow LLM stage)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.name = seconds, "slow_test"

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        time.sleep(self.seconds)
        return rankings


if stage_factory("slow_test") is None:
    @register_stage("slow_test")
    def _slow(ctx: BuildContext, params: dict) -> Stage:
        return Slow(**params)


def has_answer_stage() -> bool:
    return stage_factory("answer") is not None


class ScriptedLLM(RecordingLLM):
    """Answers citing source [1]; ``fail`` makes every call raise ``fail`` (a message)."""

    name, model = "fake:scripted", "scripted"
    fail = ""

    def answer(self, messages: list[Message], params: ChatParams) -> LLMReply:
        if self.fail:
            raise RuntimeError(self.fail)
        return LLMReply("The boundary layer thickens downstream [1].")


class Server:
    """uvicorn serving ``app`` on a free 127.0.0.1 port in a daemon thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False,
                                timeout_keep_alive=5)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
