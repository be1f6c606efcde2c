"""Model settings: shared defaults from PEERLOG_LLM_*, per-stage overrides from PEERLOG_LLM_<STAGE>_*."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.llm.settings import STAGES, EmbeddingSettings, LlmSettings, ModelStageSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("PEERLOG_LLM_", "PEERLOG_EMBEDDING_")):
            monkeypatch.delenv(name)


def test_defaults_point_at_the_local_model_server() -> None:
    s = LlmSettings()
    assert s.base_url == "http://127.0.0.1:8080/v1"
    assert s.model == "qwen2.5-coder-0.5b-instruct"
    assert s.schema_mode == "json_schema"
    assert (s.timeout_s, s.max_retries, s.api_key_env) == (60.0, 3, "PEERLOG_LLM_API_KEY")


def test_every_stage_inherits_the_shared_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERLOG_LLM_MODEL", "shared-model")
    monkeypatch.setenv("PEERLOG_LLM_TIMEOUT_S", "12.5")
    settings = LlmSettings()

    for stage in STAGES:
        assert settings.stage(stage).model == "shared-model"
        assert settings.stage(stage).timeout_s == 12.5


def test_a_stage_override_changes_only_that_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERLOG_LLM_MODEL", "shared-model")
    monkeypatch.setenv("PEERLOG_LLM_DERIVER_MODEL", "deriver-model")
    monkeypatch.setenv("PEERLOG_LLM_DIALECTIC_MAX_MAX_TOKENS", "4096")
    monkeypatch.setenv("PEERLOG_LLM_DERIVER_SCHEMA_MODE", "json_object_schema")
    settings = LlmSettings()

    deriver, dialectic_max, summarizer = (settings.stage(s) for s in ("deriver", "dialectic_max", "summarizer"))
    assert (deriver.model, deriver.schema_mode) == ("deriver-model", "json_object_schema")
    assert dialectic_max.max_tokens == 4096 and dialectic_max.model == "shared-model"
    assert (summarizer.model, summarizer.max_tokens, summarizer.schema_mode) == ("shared-model", 1024, "json_schema")


def test_constructor_values_are_the_defaults_stages_start_from() -> None:
    settings = LlmSettings(base_url="http://example.invalid/v1", max_retries=0)

    assert settings.stage("induction").base_url == "http://example.invalid/v1"
    assert settings.stage("induction").max_retries == 0


def test_a_bad_override_is_rejected_with_the_settings_naming_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERLOG_LLM_DEDUCTION_SCHEMA_MODE", "xml")

    # at start, not at the stage's first call
    with pytest.raises(ValidationError, match="PEERLOG_LLM_DEDUCTION_SCHEMA_MODE: Input should be 'json_schema'"):
        LlmSettings()


def test_an_unknown_stage_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown model stage 'dreamer'"):
        LlmSettings().stage("dreamer")


def test_api_key_is_read_from_the_named_variable_and_defaults_to_none(monkeypatch: pytest.MonkeyPatch) -> None:
    stage = ModelStageSettings(api_key_env="MY_PROVIDER_KEY")
    assert stage.api_key() == "none"

    monkeypatch.setenv("MY_PROVIDER_KEY", "sk-test")
    assert stage.api_key() == "sk-test"


def test_a_stage_can_use_its_own_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERLOG_LLM_API_KEY", "shared-key")
    monkeypatch.setenv("PEERLOG_LLM_DIALECTIC_HIGH_API_KEY_ENV", "HOSTED_KEY")
    monkeypatch.setenv("HOSTED_KEY", "hosted-key")
    settings = LlmSettings()

    assert settings.stage("dialectic_high").api_key() == "hosted-key"
    assert settings.stage("dialectic_low").api_key() == "shared-key"


def test_embedding_settings_default_to_the_local_model(monkeypatch: pytest.MonkeyPatch) -> None:
    s = EmbeddingSettings()
    assert (s.provider, s.model, s.dimensions) == ("local", "e5-small-v2", 384)

    monkeypatch.setenv("PEERLOG_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("PEERLOG_EMBEDDING_DIMENSIONS", "1536")
    s = EmbeddingSettings()
    assert (s.provider, s.dimensions) == ("openai", 1536)


def test_a_model_of_more_dimensions_than_the_vector_index_takes_is_refused_at_start(monkeypatch: pytest.MonkeyPatch):
    from pydantic import ValidationError

    monkeypatch.setenv("PEERLOG_EMBEDDING_DIMENSIONS", "3072")  # a large hosted model's vectors
    with pytest.raises(ValidationError, match="less than or equal to 2000"):
        EmbeddingSettings()
