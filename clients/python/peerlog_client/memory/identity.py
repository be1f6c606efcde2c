"""Who a turn is from and which session it goes to: the identity resolver and the session strategies."""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from peerlog_client.memory.config import MemoryConfig

_NOT_ID = re.compile(r"[^A-Za-z0-9_-]+")


MAX_ID = 512
HASH_CHARS = 12  # of the raw id's hash, appended to a peer id that cleaning changed


def safe_id(text: str) -> str:
    """`text` as a server id: runs of other characters become '-', at most 512 characters."""
    return _NOT_ID.sub("-", text).strip("-")[:MAX_ID] or "default"


def distinct_id(text: str) -> str:
    """`text` as a peer id of its own: as it is when already clean, else cleaned plus a hash of it, so
    that two ids that clean alike ("ada.smith@x.com", "ada@smith.x.com"; "-1", "1") stay two peers."""
    cleaned = safe_id(text)
    if cleaned == text:
        return text  # existing peers keep their ids
    return hashed_id(text)


# what every hashed form ends in (hashed_id): "-" and 12 lowercase hex digits
_HASHED_TAIL = re.compile(rf"-[0-9a-f]{{{HASH_CHARS}}}\Z")
# a runtime id that is or ends in a UUID ("user-<uuid>", "org_acme_<uuid>"), a common shape of platform ids
_UUID_TAIL = re.compile(r"(?:\A|[^0-9a-fA-F])[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\Z")


def runtime_peer(text: str, runtime_id: str) -> str:
    """distinct_id(`text`), the peer made from a sender's `runtime_id`; and hashed too when `text` is already
    clean but spelled like a hashed form (looks_hashed), which is another id's peer: "ada.smith@x.com" is
    "ada-smith-x-com-<hash>", and a user whose id is that literal string must not become her."""
    if safe_id(text) == text and looks_hashed(text, runtime_id):
        return hashed_id(text)
    return distinct_id(text)


def looks_hashed(peer: str, runtime_id: str) -> bool:
    """True when `peer` ends as a hashed form does, "-" and 12 hex digits with a letter among them; a tail of
    decimal digits (a phone number) or a runtime id that is or ends in a UUID is taken for an ordinary id."""
    # those shapes are common ids, whose users keep their peers (a user-<uuid> moved to a new, empty peer);
    # a hashed form is one only if its hash has no letter (about 1 in 280) or its id cleans to four groups
    # of hex digits (a UUID cut short)
    tail = _HASHED_TAIL.search(peer)
    return bool(tail) and not tail.group()[1:].isdigit() and not _UUID_TAIL.search(runtime_id)


def hashed_id(text: str, prefix: str = "") -> str:
    """`prefix` and `text` cleaned, plus 12 hex digits of the SHA-256 of `text`."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{safe_id(prefix + text)[: MAX_ID - HASH_CHARS - 1]}-{digest}"


@dataclass(frozen=True)
class Sender:
    """Who wrote a turn: the platform's id for them (None off-gateway), whether they are a bot, and the
    name the platform shows for them ("Ada King"), which becomes their peer's display name."""

    runtime_id: str | None = None
    is_bot: bool = False
    name: str | None = None


BOT_PREFIX = "bot-"  # every bot sender's peer starts so, and no human's made from a runtime id does
HUMAN_PREFIX = "human-"  # a human whose id is taken (the AI's, peerName's, a bot's form): "human-assistant-<hash>"


def user_peer(config: MemoryConfig, sender: Sender | None = None) -> str:
    """The peer a human's turn is written under, first match wins: pinUserPeer, userPeerAliases[id],
    runtimePeerPrefix + id, the raw id, peerName. A bot is never pinned nor aliased: it is its own peer.
    A runtime id never yields the AI's peer, peerName's, (for a human) a bot's form, nor another id's
    hashed form: see _own_peer and runtime_peer."""
    runtime_id = sender.runtime_id if sender else None
    if sender and sender.is_bot and runtime_id:
        return _own_peer(config, runtime_peer(f"{BOT_PREFIX}{runtime_id}", runtime_id), bot=True)
    if not runtime_id:
        return config.peer_name
    if config.pin_user_peer:
        return config.peer_name
    if runtime_id in config.user_peer_aliases:
        return config.user_peer_aliases[runtime_id]
    return _own_peer(config, runtime_peer(f"{config.runtime_peer_prefix}{runtime_id}", runtime_id), bot=False)


def _own_peer(config: MemoryConfig, peer: str, *, bot: bool) -> str:
    """`peer`, made from a sender's runtime id, unless another already owns it: then its hashed form. A human
    named "assistant" would otherwise write as the AI and rename it, one named "user" would share peerName's
    memory, and one named "bot-x" another bot's; a bot likewise never becomes the AI or peerName."""
    taken = peer in (config.ai_peer, config.peer_name) or (not bot and peer.startswith(BOT_PREFIX))
    if not taken:
        return peer
    # a bot's hashed form keeps its bot- start; a human's gets one no bot's form can have
    return hashed_id(peer) if bot else hashed_id(peer, HUMAN_PREFIX)


def display_name(config: MemoryConfig, peer_id: str, sender: Sender | None = None) -> str | None:
    """The display name `peer_id` should carry: the sender's own when the peer is theirs alone (not pinned,
    not an alias several accounts may share), else the configured one of the user or AI peer
    (userDisplayName, aiDisplayName); None: leave the peer's as it is."""
    if sender and sender.name and sender.runtime_id and peer_id == user_peer(config, sender):
        shared = not sender.is_bot and (config.pin_user_peer or sender.runtime_id in config.user_peer_aliases)
        if not shared:
            return sender.name
    return {config.peer_name: config.user_display_name, config.ai_peer: config.ai_display_name}.get(peer_id)


def cleaned_gateway_session(gateway_key: str | None) -> str | None:
    """The session a provider before distinct session ids gave `gateway_key` (cleaned, no hash), when that
    differs from today's: the chat's history may be there."""
    if gateway_key and safe_id(gateway_key) != distinct_id(gateway_key):
        return safe_id(gateway_key)
    return None


def a2a_session(peer_id: str) -> str:
    """The session of a bot sender's turns: one per sender, never the human's."""
    return safe_id(f"a2a-{peer_id}")


def repo_root(directory: Path) -> Path | None:
    """The nearest directory at or above `directory` holding .git."""
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def session_name(
    config: MemoryConfig,
    directory: Path,
    *,
    gateway_key: str | None = None,
    title: str | None = None,
    run_id: str | None = None,
) -> str:
    """The session for this run: a gateway's stable chat key; else per-session (a fresh one per run);
    else a manual mapping of the directory, an explicit title, then the strategy."""
    if gateway_key:
        return distinct_id(gateway_key)  # two chat keys that clean alike ("tg:1/2", "tg:1.2") stay two sessions
    if config.session_strategy == "per-session":
        return safe_id(f"run-{run_id or uuid.uuid4().hex[:12]}")
    directory = directory.resolve()
    if str(directory) in config.sessions:
        return safe_id(config.sessions[str(directory)])
    if title:
        return safe_id(title)
    if config.session_strategy == "global":
        return "global"
    if config.session_strategy == "per-repo":
        root = repo_root(directory)
        return safe_id(f"repo-{(root or directory).name}")
    # the name to read it by, a hash of the path so two folders of one name stay apart
    return safe_id(f"dir-{directory.name}-{hashlib.sha256(str(directory).encode()).hexdigest()[:6]}")
