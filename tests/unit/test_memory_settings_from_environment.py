"""Environment variables for the memory settings: a text setting is taken as written, even when it looks
like a number or a boolean; any other setting is read as JSON."""

from __future__ import annotations

import pytest

from peerlog_client.memory.config import load_config


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """No settings files: only the variables a test adds."""
    return {"PEERLOG_MEMORY_GLOBAL": str(tmp_path / "none.json"), "PEERLOG_MEMORY_HOME": str(tmp_path)}


@pytest.mark.parametrize(
    ("var", "raw", "field"),
    [
        ("PEERLOG_MEMORY_PEER_NAME", "12345", "peer_name"),  # str
        ("PEERLOG_MEMORY_AI_PEER", "007", "ai_peer"),
        ("PEERLOG_MEMORY_USER_DISPLAY_NAME", "true", "user_display_name"),  # str | None
        ("PEERLOG_MEMORY_AI_DISPLAY_NAME", "1.5", "ai_display_name"),
        ("PEERLOG_MEMORY_TARGET", "[::1]:50051", "target"),
        ("PEERLOG_WORKSPACE", "2024", "workspace"),
        ("PEERLOG_MEMORY_HOST", "42", "host"),
    ],
)
def test_a_numeric_or_boolean_looking_value_of_a_text_setting_is_kept_as_text(env, var, raw, field):
    keys = {**env, var: raw}
    if field == "host":
        keys["PEERLOG_MEMORY_HOSTS"] = '{"42": {"target": "h:1"}}'
    assert getattr(load_config(keys), field) == raw


def test_numeric_boolean_and_structured_settings_are_still_read_as_json(env):
    config = load_config(
        {
            **env,
            "PEERLOG_MEMORY_CONTEXT_TOKENS": "800",
            "PEERLOG_TIMEOUT": "2.5",
            "PEERLOG_MEMORY_WRITE_FREQUENCY": "3",
            "PEERLOG_MEMORY_A2A_SESSIONS": "false",
            "PEERLOG_MEMORY_RERANK_SEARCH": "true",
            "PEERLOG_MEMORY_USER_PEER_ALIASES": '{"7": "alice"}',
        }
    )
    assert (config.context_tokens, config.timeout, config.write_frequency) == (800, 2.5, 3)
    assert (config.a2a_sessions, config.rerank_search) == (False, True)
    assert config.user_peer_aliases == {"7": "alice"}


def test_a_plain_word_for_a_choice_setting_is_taken_as_written(env):
    config = load_config({**env, "PEERLOG_MEMORY_RECALL_MODE": "tools", "PEERLOG_MEMORY_WRITE_FREQUENCY": "turn"})
    assert (config.recall_mode, config.write_frequency) == ("tools", "turn")


def test_a_settings_file_that_is_not_utf8_is_a_config_error_naming_the_file(env, tmp_path):
    from peerlog_client.memory.config import ConfigError

    (tmp_path / "memory.json").write_bytes('{"peerName": "jos\u00e9"}'.encode("latin-1"))
    with pytest.raises(ConfigError, match="memory.json: not UTF-8"):
        load_config(env)


@pytest.mark.parametrize("raw", ["1e10", "Infinity"])
def test_a_timeout_no_call_could_be_given_is_refused_when_the_settings_are_read(env, raw):
    from peerlog_client.memory.config import ConfigError

    with pytest.raises(ConfigError, match="timeout"):
        load_config({**env, "PEERLOG_TIMEOUT": raw})


def test_the_settings_printed_or_captured_never_show_the_token(env):
    config = load_config({**env, "PEERLOG_TOKEN": "eyJsecret.token"})
    assert config.resolved_token == "eyJsecret.token" and "eyJsecret" not in repr(config)


def test_settings_that_cannot_be_written_are_a_config_error_naming_the_file(env, tmp_path):
    from peerlog_client.memory.config import ConfigError, save_local

    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="cannot be written"):
        save_local({"peerName": "ada"}, {**env, "PEERLOG_MEMORY_HOME": str(tmp_path / "a-file" / "sub")})
