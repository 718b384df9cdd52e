"""Retrieval stages over an index (BM25, dense, TF-IDF, sparse, entity graph, parents).

Every module here is imported when the stage registry is first used, so a new stage is one
new file with ``@register_stage``."""

from intentrank.core.registry import import_submodules

import_submodules(__name__, __path__)
