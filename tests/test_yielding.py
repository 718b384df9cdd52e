"""index/yielding.py: the block runs at nice 19 with one faiss thread, in its own thread only;
both are restored after it."""

from __future__ import annotations

import os
import sys
import threading

import faiss
import pytest

from intentrank.index.yielding import yielding


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_only_the_yielding_thread_is_lowered():
    inside, done = threading.Event(), threading.Event()
    seen: dict = {}

    def merge() -> None:
        tid = threading.get_native_id()
        with yielding() as lowered:
            seen["in"] = (lowered, os.getpriority(os.PRIO_PROCESS, tid),
                          faiss.omp_get_max_threads())
            inside.set()
            done.wait(10)
        seen["after"] = (os.getpriority(os.PRIO_PROCESS, tid), faiss.omp_get_max_threads())

    main_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    threads = faiss.omp_get_max_threads()
    worker = threading.Thread(target=merge)
    worker.start()
    assert inside.wait(10)
    assert seen["in"] == (True, 19, 1)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_nice
    assert faiss.omp_get_max_threads() == threads  # the other threads keep theirs
    done.set()
    worker.join(10)
    assert seen["after"][1] == threads
    assert seen["after"][0] in (main_nice, 19)  # restored where the system allows it
