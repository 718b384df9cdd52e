"""Query transformers: stages that push derived texts (follow-ups, variants) onto queries.

Every module here is imported when the stage registry is first used, so a new stage is one
new file with ``@register_stage``."""

from intentrank.core.registry import import_submodules

import_submodules(__name__, __path__)
