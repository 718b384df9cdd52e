"""Run background index work (a merge) so that searches in the same process keep the CPU.

:func:`yielding` lowers the calling thread's CPU priority to the lowest (nice 19; on Linux a
thread has its own nice value, so the searches of the other threads keep theirs) and limits
the OpenMP threads faiss starts from it (an HNSW or IVF-PQ build) to one; both are restored
when the block ends where the system allows. Elsewhere than Linux the priority is left as
it is. Python code of the block still takes the interpreter lock in turns with the searches'.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

LOWEST = 19


@contextlib.contextmanager
def yielding(omp_threads: int = 1) -> Iterator[bool]:
    """Run the block at the lowest priority of this thread, faiss limited to ``omp_threads``
    threads in it; yields whether the priority was lowered."""
    tid = threading.get_native_id()
    before = None
    if sys.platform.startswith("linux"):
        try:
            before = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, LOWEST)
        except OSError:  # not allowed here: run as it is
            before = None
    faiss = _faiss()
    omp_before = faiss.omp_get_max_threads() if faiss is not None else None
    if faiss is not None:
        faiss.omp_set_num_threads(omp_threads)  # an ICV of this thread only (OpenMP)
    try:
        yield before is not None
    finally:
        if faiss is not None:
            faiss.omp_set_num_threads(omp_before)
        if before is not None:
            with contextlib.suppress(OSError):  # raising it back needs privileges
                os.setpriority(os.PRIO_PROCESS, tid, before)


def _faiss() -> object | None:
    try:
        import faiss
    except ImportError:
        return None
    return faiss
