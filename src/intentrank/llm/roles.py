"""Which embedded model each LLM step uses by default, chosen by measurement.

``--llm embedded`` (the default) means "the embedded models, each step on the one measured
best for it": :data:`ROLE_MODELS` names the steps whose default is not the 0.5B (the
measurements: docs/benchmarks.md, "Models by role"). Any other spec (``llamacpp:<name>``, a
``.gguf`` path, ``openai:...``) is used for every step, and a pipeline step may name its own
with ``llm: <spec>``.
"""

from __future__ import annotations

from intentrank.llm.model_files import DEFAULT_MODEL

EMBEDDED = ("", "embedded", "llamacpp")

# role -> registry model, for the steps whose measured best is not the default model
ROLE_MODELS: dict[str, str] = dict.fromkeys(
    ("rewrite", "judge", "support", "modality_weights"), "qwen2.5-coder-1.5b")


def role_spec(spec: str, role: str | None) -> str:
    """The LLM spec a step of ``role`` uses when the user's spec is ``spec``: the role's
    measured model when ``spec`` is the embedded default, else ``spec`` itself."""
    if role is None or spec.strip() not in EMBEDDED:
        return spec
    model = ROLE_MODELS.get(role, DEFAULT_MODEL)
    return spec if model == DEFAULT_MODEL else f"llamacpp:{model}"
