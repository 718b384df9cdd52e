"""Fusion methods, one file each: RRF (``a | b``), weighted min-max, interleave, RRF with the
input ranking, LLM-assigned (dynamic) modality weights.

Every module here is imported when the stage registry is first used, so a new stage is one
new file with ``@register_stage``."""

from intentrank.core.registry import import_submodules

import_submodules(__name__, __path__)
