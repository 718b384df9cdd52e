"""Query transformers: stages that push derived texts (follow-ups, variants) onto queries."""

from intentrank.query import followups, multi_query  # noqa: F401 (registers the stages)
