"""Reciprocal rank fusion, the meaning of ``a | b`` and ``fuse: {method: rrf}``.

It belongs with the algebra, so it is defined in the core (``rrf`` and ``check_rrf_k`` in
``core/fusion.py``, ``RRFFusion`` in ``core/stage.py``, registered there); this module keeps
``intentrank.fuse.rrf`` imports working."""

from intentrank.core.fusion import check_rrf_k, rrf
from intentrank.core.stage import RRFFusion

__all__ = ["RRFFusion", "check_rrf_k", "rrf"]
