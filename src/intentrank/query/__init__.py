"""Query transformers: stages that push derived texts (follow-ups, variants) onto queries."""
