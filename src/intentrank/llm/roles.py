"""Which embedded model each LLM step uses by default, chosen by measurement.

``--llm embedded`` (the default) means "the embedded models, each step on the one measured
best for it": :data:`ROLE_MODELS` names the steps whose default is not the 0.5B, with the
number it rests on (docs/benchmarks.md, "Defaults"). Any other spec (``llamacpp:<name>``, a
``.gguf`` path, ``openai:...``) is used for every step, and a pipeline step may name its own
with ``llm: <spec>``.
"""

from __future__ import annotations

from intentrank.llm.model_files import DEFAULT_MODEL

EMBEDDED = ("", "embedded", "llamacpp")

# role -> (registry model, why): only steps whose measured best is not the default model.
ROLE_MODELS: dict[str, tuple[str, str]] = {
    "rewrite": ("qwen2.5-coder-1.5b",
                "CAsT 2021, BM25, 60 contextual turns: rewrite_full closes most of the raw-to-"
                "manual-rewrite gap with the 1.5B, none with the 0.5B (it copies the turn)"),
    "judge": ("qwen2.5-coder-1.5b",
              "answers of known quality (Vaswani, 80 pairs): agreement 0.61 with the 1.5B, "
              "0.49 (near chance) with the 0.5B"),
    "support": ("qwen2.5-coder-1.5b",
                "generated Cranfield questions, 17 each: the 1.5B calls 1 wrong and 0 made-up "
                "answers supported, the 0.5B 15 and 16 (`generate --llm-checks`)"),
    "modality_weights": ("qwen2.5-coder-1.5b",
                         "30 SciFact queries: 30/30 valid weight replies with the 1.5B, 0/30 "
                         "with the 0.5B"),
}


def role_spec(spec: str, role: str | None) -> str:
    """The LLM spec a step of ``role`` uses when the user's spec is ``spec``: the role's
    measured model when ``spec`` is the embedded default, else ``spec`` itself."""
    if role is None or spec.strip() not in EMBEDDED:
        return spec
    model = ROLE_MODELS.get(role, (DEFAULT_MODEL, ""))[0]
    return spec if model == DEFAULT_MODEL else f"llamacpp:{model}"
