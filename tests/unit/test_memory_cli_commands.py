"""peerlog-memory's commands that need no server: sessions, map, peers, mode, tokens. They read the same
settings files as the provider and write only the profile-local one. (status, which connects, is tested
against the real stack in tests/integration/test_memory_provider.py.)"""

from __future__ import annotations

import json
import os

import pytest

from peerlog_client.memory.cli import main
from peerlog_client.memory.config import load_config


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A working directory with its own settings: a global file and an empty profile-local folder."""
    (tmp_path / "global.json").write_text(
        json.dumps(
            {
                "peerName": "alice",
                "aiPeer": "guide",
                "aiDisplayName": "Guide",
                "userPeerAliases": {"7654321": "alice"},
                "runtimePeerPrefix": "tg_",
                "observationMode": "unified",
            }
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for var in [v for v in os.environ if v.startswith("PEERLOG_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("PEERLOG_MEMORY_GLOBAL", str(tmp_path / "global.json"))
    monkeypatch.setenv("PEERLOG_MEMORY_HOME", str(tmp_path / "local"))
    return work


def shown(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_map_writes_this_directory_to_the_local_file_and_sessions_shows_it(home, tmp_path, capsys):
    assert main(["sessions"]) == 0
    before = shown(capsys)
    assert before["strategy"] == "per-directory" and before["this directory"].startswith("dir-work-")
    assert main(["map", "trip planning"]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "local" / "memory.json").read_text()) == {
        "sessions": {str(home.resolve()): "trip planning"}
    }
    assert main(["sessions"]) == 0
    after = shown(capsys)
    assert after["this directory"] == "trip-planning"  # made a valid session id
    assert after["mappings"] == {str(home.resolve()): "trip planning"}
    assert json.loads((tmp_path / "global.json").read_text())["peerName"] == "alice"  # the global file untouched


def test_peers_shows_the_identities_their_display_names_and_the_observation_toggles_of_the_preset(home, capsys):
    assert main(["peers"]) == 0
    assert shown(capsys) == {
        "user": "alice",
        "ai": "guide",
        "userDisplayName": None,
        "aiDisplayName": "Guide",
        "pinUserPeer": False,
        "userPeerAliases": {"7654321": "alice"},
        "runtimePeerPrefix": "tg_",
        "observation": {
            "user": {"observeMe": True, "observeOthers": False},
            "ai": {"observeMe": False, "observeOthers": True},
        },
    }


def test_mode_and_tokens_show_then_set_and_the_provider_reads_what_they_set(home, capsys):
    assert main(["mode"]) == 0 and capsys.readouterr().out.strip() == "hybrid"
    assert main(["mode", "tools"]) == 0
    assert main(["tokens", "--context", "900", "--dialectic", "300"]) == 0
    capsys.readouterr()
    config = load_config()
    assert (config.recall_mode, config.context_tokens, config.dialectic_max_chars) == ("tools", 900, 300)
    assert main(["tokens"]) == 0
    assert shown(capsys) == {"contextTokens": 900, "dialecticMaxChars": 300}


def test_a_wrong_setting_is_refused_with_its_name_and_nothing_is_written(home, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["mode", "sometimes"])  # argparse names the choices
    assert main(["tokens", "--context", "0"]) == 2
    assert "contextTokens" in capsys.readouterr().err
    assert not (tmp_path / "local" / "memory.json").exists()
