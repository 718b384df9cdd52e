"""The LLM of each step: the embedded default picks each role's measured model, a spec the
user chose serves every step, a step may name its own with ``llm:``."""

from __future__ import annotations

import pytest

from intentrank.core.registry import BuildContext
from intentrank.errors import ConfigError
from intentrank.pipelines import build_pipeline


def test_the_embedded_default_picks_each_roles_measured_model():
    from intentrank.llm.roles import ROLE_MODELS, role_spec

    assert role_spec("embedded", "rewrite") == f"llamacpp:{ROLE_MODELS['rewrite']}"
    assert role_spec("embedded", "support") == "llamacpp:qwen2.5-coder-1.5b"  # generate checks
    assert role_spec("embedded", "listwise") == "embedded"
    assert role_spec("embedded", None) == "embedded"
    for spec in ("llamacpp:qwen2.5-coder-0.5b", "openai:m@http://127.0.0.1:9/v1", "x.gguf"):
        assert role_spec(spec, "rewrite") == spec  # a spec the user chose serves every step


def test_a_step_may_name_its_own_llm_and_models_are_built_once():
    from intentrank.pipelines import build_context

    ctx = build_context(None, llm="openai:main@http://127.0.0.1:9/v1")
    own = build_pipeline({"rewrite_full": {"llm": "openai:other@http://127.0.0.1:9/v1"}}, ctx)
    shared = build_pipeline("rewrite_summary", ctx)
    again = build_pipeline("hyde", ctx)
    assert "other" in own.llm.name and "main" in shared.llm.name
    assert shared.llm is again.llm  # one client per model
    with pytest.raises(ConfigError, match="LLM spec"):
        build_pipeline({"rewrite_full": {"llm": 3}}, ctx)


def test_a_handed_in_client_serves_every_step_without_its_own_llm():
    from fakes import RecordingLLM

    from intentrank.llm.client import LLMClient

    client = LLMClient(RecordingLLM(), cache=False)
    ctx = BuildContext(resources={"llm": client})
    assert build_pipeline("rewrite_full", ctx).llm is client
    assert build_pipeline({"listwise": {}}, BuildContext(index=object(),
                                                          resources={"llm": client})).llm \
        is client
