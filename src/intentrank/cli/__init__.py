"""The ``intentrank`` command line (``app``, the console script), one module per group of
commands:

- :mod:`.search`: ``index``, ``search``, ``answer``;
- :mod:`.update`: ``add``, ``delete``, ``sync`` (an index changed in place);
- :mod:`.evaluate`: ``eval``, ``experiment``, ``ablate``;
- :mod:`.train`: ``train-reranker``, ``train-embedder``, ``tune-fuq``, ``tune-modality``;
- :mod:`.generate`: ``generate``, ``generate-conversations``, ``reformulate``,
  ``cast-passages``;
- :mod:`.choose`: ``choose`` (a corpus's pipeline without labels, and how sure);
- :mod:`.serve`: ``serve``, ``quickstart``;
- :mod:`.keys`: ``keys add|list|rotate|revoke`` (the service's API keys file);
- :mod:`.bench`: ``bench`` (list, plan and rebuild the benchmarks of docs/benchmarks.md);
- :mod:`.cluster`: ``cluster build|status`` (an index in shards on Ray actors);

and what they share in :mod:`.common` (the app, the global options on ``ctx.obj``, the
``cli_errors`` decorator, option checks, output helpers) and :mod:`.options` (options
several commands take). Commands hold argument handling and output; the work is library
functions.
"""

from __future__ import annotations

# Each module registers its commands on ``app`` when imported, in the order `intentrank
# --help` lists them.
# isort: off
from intentrank.cli import search  # noqa: F401
from intentrank.cli import update  # noqa: F401
from intentrank.cli import evaluate  # noqa: F401
from intentrank.cli import serve  # noqa: F401
from intentrank.cli import keys  # noqa: F401
from intentrank.cli import train  # noqa: F401
from intentrank.cli import generate  # noqa: F401
from intentrank.cli import choose  # noqa: F401
from intentrank.cli import bench  # noqa: F401
from intentrank.cli import cluster  # noqa: F401
# isort: on
from intentrank.cli.common import app

__all__ = ["app"]
