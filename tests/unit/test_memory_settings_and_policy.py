"""The memory provider's pure parts: the identity resolver's table, session strategies, settings files and
their errors, the tool schemas in both formats, the level heuristic, truncation and chunking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from peerlog_client.memory import policy
from peerlog_client.memory.config import ConfigError, load_config, save_local, validate
from peerlog_client.memory.identity import Sender, display_name, session_name, user_peer
from peerlog_client.memory.tools import TOOL_NAMES, schemas

BASE = {"peerName": "me"}


@pytest.mark.parametrize(
    ("keys", "sender", "peer"),
    [
        ({}, None, "me"),  # off-gateway: peerName
        ({}, Sender("7654321"), "7654321"),  # the raw runtime id
        ({"runtimePeerPrefix": "tg_"}, Sender("7654321"), "tg_7654321"),  # namespaced
        ({"runtimePeerPrefix": "tg_", "userPeerAliases": {"7654321": "alice"}}, Sender("7654321"), "alice"),
        ({"userPeerAliases": {"1": "alice", "2": "alice"}}, Sender("2"), "alice"),  # many-to-one
        ({"pinUserPeer": True, "userPeerAliases": {"1": "alice"}}, Sender("1"), "me"),  # pin beats aliases
        ({"pinUserPeer": True}, Sender("helper", is_bot=True), "bot-helper"),  # a bot is never pinned
        ({"userPeerAliases": {"helper": "me"}}, Sender("helper", is_bot=True), "bot-helper"),
        ({}, Sender("user@example.com"), "user-example-com-b4c9a289323b"),  # made a valid id of its own
        ({}, Sender(""), "me"),
    ],
)
def test_the_identity_resolver_tries_pin_aliases_prefix_raw_id_then_peer_name(keys, sender, peer):
    assert user_peer(validate([("t", {**BASE, **keys})]), sender) == peer


NAMED = {"userDisplayName": "Me Myself", "aiDisplayName": "Lumen", "aiPeer": "ai"}


@pytest.mark.parametrize(
    ("keys", "sender", "peer", "name"),
    [
        ({}, None, "me", "Me Myself"),  # off-gateway: the configured user's name
        ({}, None, "ai", "Lumen"),
        ({}, Sender("7654321", name="Ada King"), "7654321", "Ada King"),  # the platform's name for its own peer
        ({}, Sender("7654321"), "7654321", None),  # no name given: the peer's stays as it is
        ({"pinUserPeer": True}, Sender("1", name="Ada King"), "me", "Me Myself"),  # a pinned peer is shared
        ({"userPeerAliases": {"1": "alice"}}, Sender("1", name="Ada"), "alice", None),  # several accounts may share
        ({"pinUserPeer": True}, Sender("helper", is_bot=True, name="Helper Bot"), "bot-helper", "Helper Bot"),
        ({}, Sender("7654321", name="Ada King"), "ai", "Lumen"),  # the sender names only its own peer
    ],
)
def test_a_peers_display_name_is_its_senders_own_else_the_configured_one(keys, sender, peer, name):
    assert display_name(validate([("t", {**BASE, **NAMED, **keys})]), peer, sender) == name


def test_session_strategies_and_the_order_of_overrides(tmp_path):
    repo = tmp_path / "project"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    per_dir = validate([("t", {})])
    assert session_name(per_dir, repo / "src").startswith("dir-src-")
    assert session_name(per_dir, repo / "src") != session_name(per_dir, tmp_path / "src")  # same name, apart
    assert session_name(validate([("t", {"sessionStrategy": "per-repo"})]), repo / "src") == "repo-project"
    assert session_name(validate([("t", {"sessionStrategy": "global"})]), repo) == "global"
    per_session = validate([("t", {"sessionStrategy": "per-session"})])
    assert session_name(per_session, repo) != session_name(per_session, repo)
    mapped = validate([("t", {"sessions": {str((repo / "src").resolve()): "my work"}})])
    assert session_name(mapped, repo / "src", title="a title") == "my-work"  # a mapping beats a title
    assert session_name(per_dir, repo, title="Trip plans") == "Trip-plans"
    assert session_name(per_session, repo, gateway_key="telegram-42") == "telegram-42"  # gateways keep theirs
    # two chat keys that clean alike are two sessions
    alike = {session_name(per_session, repo, gateway_key=k) for k in ("telegram:42", "telegram/42", "telegram-42")}
    assert len(alike) == 3 and all(k.startswith("telegram-42") for k in alike)


def test_settings_files_layer_global_then_local_then_environment(tmp_path):
    (tmp_path / "g.json").write_text(
        json.dumps(
            {
                "host": "home",
                "contextTokens": 800,
                "recallMode": "tools",
                "hosts": {
                    "home": {"target": "h:1", "token": "home-token", "workspace": "w1"},
                    "work": {"target": "w:2", "token": "work-token"},
                },
            }
        )
    )
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "memory.json").write_text(json.dumps({"host": "work", "contextTokens": 900}))
    env = {
        "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "g.json"),
        "PEERLOG_MEMORY_HOME": str(tmp_path / "local"),
        "PEERLOG_MEMORY_CONTEXT_TOKENS": "1000",
        "PEERLOG_MEMORY_A2A_SESSIONS": "false",
    }
    config = load_config(env)
    assert (config.context_tokens, config.recall_mode, config.a2a_sessions) == (1000, "tools", False)
    assert (config.resolved_target, config.resolved_token, config.resolved_workspace) == (
        "w:2",
        "work-token",
        "default",
    )
    assert load_config({**env, "PEERLOG_TOKEN": "env-token"}).resolved_token == "env-token"
    assert config.public()["hosts"]["home"]["token"] == "***"
    save_local({"recallMode": "context"}, env)
    assert load_config(env).recall_mode == "context"


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"contextTokns": 5}, "contextTokns"),
        ({"recallMode": "both"}, "recallMode"),
        ({"writeFrequency": 0}, "writeFrequency"),
        ({"messageMaxChars": 30_000}, "messageMaxChars"),
        ({"observation": {"user": {"observeMe": "sometimes"}}}, "observation.user.observeMe"),
        ({"peerName": "has space"}, "peerName"),
        ({"timeZone": "Europe/Atlantis"}, "timeZone"),
        ({"userPeerAliases": {"1001": "assistant"}}, "userPeerAliases"),  # the AI's peer: turns as the AI
    ],
)
def test_a_wrong_key_or_value_is_an_error_that_names_it_and_its_file(keys, named):
    with pytest.raises(ConfigError) as raised:
        validate([("/home/me/.peerlog/memory.json", keys)])
    assert named in str(raised.value) and "/home/me/.peerlog/memory.json" in str(raised.value)


@pytest.mark.parametrize("peer", ["ada@example.com", "", "ada king", "ada\n", "x" * 513])
def test_an_alias_that_is_not_a_peer_id_is_refused_when_the_settings_load_naming_the_key_and_file(tmp_path, peer):
    # loaded, every batch of that user would be refused by the server and dropped
    path = tmp_path / "memory.json"
    path.write_text(json.dumps({"userPeerAliases": {"7654321": "alice", "1001": peer}}))
    with pytest.raises(ConfigError) as raised:
        load_config({"PEERLOG_MEMORY_HOME": str(tmp_path), "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "none.json")})
    assert all(part in str(raised.value) for part in ("userPeerAliases", "'1001'", repr(peer), str(path)))


def test_an_unknown_environment_setting_and_a_missing_host_block_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="PEERLOG_MEMORY_CONTEXT_TOKNS"):
        load_config({"PEERLOG_MEMORY_CONTEXT_TOKNS": "1", "PEERLOG_MEMORY_HOME": str(tmp_path)})
    with pytest.raises(ConfigError, match="host 'nope'"):
        _ = validate([("t", {"host": "nope"})]).resolved_target


def test_depth_is_clamped_to_one_to_three():
    assert [validate([("t", {"dialecticDepth": d})]).dialectic_depth for d in (0, 2, 9)] == [1, 2, 3]


@pytest.mark.parametrize("dynamic", [True, False])
def test_the_tool_schemas_are_valid_json_schema_in_both_formats(dynamic):
    config = validate([("t", {"dialecticDynamic": dynamic})])
    openai, anthropic = schemas(config, "openai"), schemas(config, "anthropic")
    assert [t["function"]["name"] for t in openai] == [t["name"] for t in anthropic] == list(TOOL_NAMES)
    for o, a in zip(openai, anthropic, strict=True):
        assert o["type"] == "function" and set(o["function"]) == {"name", "description", "parameters"}
        assert set(a) == {"name", "description", "input_schema"}
        assert o["function"]["parameters"] == a["input_schema"]
        Draft202012Validator.check_schema(a["input_schema"])
        assert a["input_schema"]["type"] == "object" and a["input_schema"]["additionalProperties"] is False
    reasoning = anthropic[TOOL_NAMES.index("peerlog_reasoning")]["input_schema"]
    assert ("reasoning_level" in reasoning["properties"]) is dynamic
    conclude = Draft202012Validator(anthropic[TOOL_NAMES.index("peerlog_conclude")]["input_schema"])
    assert conclude.is_valid({"delete_id": "abc_1"}) and not conclude.is_valid({"delete_id": "a b"})


@pytest.mark.parametrize(
    ("base", "length", "cap", "level"),
    [
        ("low", 119, "high", "low"),
        ("low", 120, "high", "medium"),
        ("low", 400, "high", "high"),
        ("medium", 400, "high", "high"),
        ("low", 400, "medium", "medium"),
        ("high", 500, "low", "high"),
        ("minimal", 130, "max", "low"),
    ],
)
def test_the_level_heuristic(base, length, cap, level):
    assert policy.query_level(base, "x" * length, cap) == level
    assert policy.query_level(base, "x" * length, cap, heuristic=False) == base


def test_pass_levels_rise_to_the_base_or_follow_the_given_list():
    assert policy.pass_levels(1, "low") == ["low"]
    assert policy.pass_levels(3, "medium") == ["minimal", "low", "medium"]
    assert policy.pass_levels(3, "low") == ["minimal", "minimal", "low"]
    assert policy.pass_levels(3, "low", ["high", "max"]) == ["high", "max", "max"]


def test_injection_is_cut_at_word_boundaries_to_both_budgets():
    config = validate([("t", {"contextTokens": 10, "dialecticMaxChars": 12})])
    text = policy.assemble("alpha beta gamma delta epsilon zeta eta theta", "one two three four", config)
    assert len(text) <= 40 and not text.endswith(("alph", "thet"))
    assert policy.truncate_words("one two three four", 12) == "one two"
    assert "three" not in policy.assemble("", "one two three four", validate([("t", {"dialecticMaxChars": 12})]))


@pytest.mark.parametrize("text", ["", "short", "a" * 2500, " ".join(["word"] * 700), "x y " * 600 + "z" * 1500])
def test_chunks_keep_order_lose_nothing_and_respect_the_size(text):
    pieces = policy.chunks(text, 1000)
    assert "".join(pieces) == text and all(len(p) <= 1000 for p in pieces)
    assert len(pieces) == max(1, -(-len(text) // 1000)) or all(len(p) > 500 for p in pieces[:-1])


def test_cadence_decisions():
    config = validate([("t", {"contextCadence": 2, "dialecticCadence": 3})])
    assert policy.due(config, 1, None, None) == policy.Due(True, True)
    assert policy.due(config, 2, 1, 1) == policy.Due(False, False)
    assert policy.due(config, 3, 1, 1) == policy.Due(True, False)
    assert policy.due(config, 4, 3, 1) == policy.Due(False, True)
    assert policy.due(validate([("t", {"recallMode": "tools"})]), 1, None, None) == policy.Due(False, False)


def test_a_path_that_is_not_json_is_a_clear_error(tmp_path: Path):
    (tmp_path / "memory.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config({"PEERLOG_MEMORY_HOME": str(tmp_path), "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "x")})


def test_a_long_cjk_turn_is_cut_to_what_chat_takes_whatever_its_script():
    # cut at dialecticMaxInputChars alone, 6,300 Chinese characters were 8,428 tokens: Chat refused the query
    from peerlog_client.memory.policy import chat_query
    from services.llm.tokens import count_tokens

    chinese = "我们明天去北京看长城然后吃烤鸭。" * 600  # 9,600 characters, within dialecticMaxInputChars
    cut = chat_query(chinese, 10_000)
    assert count_tokens(chinese) > 8_000 and count_tokens(cut) <= 8_000 and chinese.startswith(cut)
    english = "word " * 1_000
    assert chat_query(english, 10_000) == english


FAKE_CA = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def test_tls_and_a_ca_file_are_read_from_a_host_block_the_top_level_and_the_environment(tmp_path):
    import grpc

    ca = tmp_path / "ca.pem"
    ca.write_text(FAKE_CA)
    remote = {"host": "remote", "hosts": {"remote": {"target": "m.example.com:443", "tls": True, "caFile": str(ca)}}}
    config = validate([("t", remote)])
    assert (config.resolved_tls, config.resolved_ca_file) == (True, str(ca))
    assert isinstance(config.channel_credentials(), grpc.ChannelCredentials)
    assert validate([("t", {**remote, "tls": False, "caFile": ""})]).channel_credentials() is None  # top level wins
    assert validate([("t", {"target": "m.example.com:443"})]).channel_credentials() is None  # a port implies nothing
    system_roots = validate([("t", {"tls": True})])
    assert system_roots.resolved_ca_file is None and system_roots.channel_credentials() is not None
    env = {"PEERLOG_MEMORY_HOME": str(tmp_path), "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "none.json")}
    from_env = load_config({**env, "PEERLOG_MEMORY_TLS": "true", "PEERLOG_MEMORY_CA_FILE": str(ca)})
    assert (from_env.resolved_tls, from_env.resolved_ca_file) == (True, str(ca))


def test_a_ca_file_that_cannot_be_read_holds_no_certificate_or_comes_without_tls_is_refused_naming_it(tmp_path):
    from peerlog_client.memory import MemoryProvider

    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    (tmp_path / "ca.pem").write_text(FAKE_CA)
    for keys, problem in [
        ({"tls": True, "caFile": str(tmp_path / "missing.pem")}, "cannot be read"),
        ({"tls": True, "caFile": str(tmp_path / "garbage.pem")}, "holds no PEM certificate"),
        ({"caFile": str(tmp_path / "ca.pem")}, "tls is not"),  # never plaintext with settings that look secure
    ]:
        with pytest.raises(ConfigError, match=problem) as raised:
            MemoryProvider(validate([("t", {"target": "127.0.0.1:1", **keys})]), directory=tmp_path)
        assert keys["caFile"] in str(raised.value)


def test_a_host_blocks_token_is_not_sent_to_a_target_the_environment_overrides(tmp_path):
    (tmp_path / "memory.json").write_text(
        json.dumps({"host": "home", "hosts": {"home": {"target": "home:1", "token": "home-token"}}})
    )
    env = {"PEERLOG_MEMORY_HOME": str(tmp_path), "PEERLOG_MEMORY_GLOBAL": str(tmp_path / "none.json")}
    assert load_config(env).resolved_token == "home-token"
    assert load_config({**env, "PEERLOG_TARGET": "home:1"}).resolved_token == "home-token"  # the same server
    elsewhere = load_config({**env, "PEERLOG_TARGET": "elsewhere:2"})
    assert (elsewhere.resolved_target, elsewhere.resolved_token) == ("elsewhere:2", None)
    assert load_config({**env, "PEERLOG_TARGET": "elsewhere:2", "PEERLOG_TOKEN": "its-token"}).resolved_token == (
        "its-token"
    )
