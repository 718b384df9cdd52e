"""Fusion methods, one file each: RRF (``a | b``), weighted min-max, interleave, RRF with the
input ranking, LLM-assigned (dynamic) modality weights."""

from intentrank.fuse import dynamic, interleave, rrf, rrf_with_input, weighted  # noqa: F401
