"""The memory provider's settings: a global and a profile-local JSON file, host blocks, environment overrides.

    {"host": "local", "peerName": "alice", "recallMode": "hybrid", "contextTokens": 1200,
     "hosts": {"local": {"target": "localhost:50051", "token": "eyJ...", "workspace": "me"},
               "remote": {"target": "memory.example.com:443", "token": "eyJ...", "tls": true}}}

Files are read global first (~/.peerlog/memory.json, or $PEERLOG_MEMORY_GLOBAL), then profile-local
($PEERLOG_MEMORY_HOME/memory.json, default ./.peerlog/memory.json), each key of a later file replacing the
same key of an earlier one; then the environment wins (ENV_KEYS, and PEERLOG_MEMORY_<KEY> for any key).
Every key is checked by pydantic: an unknown key or a wrong value is a ConfigError naming it and the file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import grpc
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from peerlog_client import Peerlog

LEVELS: tuple[str, ...] = ("minimal", "low", "medium", "high", "max")
Level = Literal["minimal", "low", "medium", "high", "max"]
RecallMode = Literal["hybrid", "context", "tools"]
SessionStrategy = Literal["per-session", "per-directory", "per-repo", "global"]
WriteFrequency = Literal["async", "turn", "session"] | Annotated[int, Field(ge=1)]
PEER_ID = re.compile(r"^[A-Za-z0-9_-]{1,512}$")  # what the server accepts as an id

# well-known variables, then PEERLOG_MEMORY_<KEY> (e.g. PEERLOG_MEMORY_RECALL_MODE) for the rest
ENV_KEYS = {
    "PEERLOG_TARGET": "target",
    "PEERLOG_TOKEN": "token",
    "PEERLOG_WORKSPACE": "workspace",
    "PEERLOG_TIMEOUT": "timeout",
    "PEERLOG_MEMORY_HOST": "host",
}


class ConfigError(ValueError):
    """A settings file or variable is wrong; the message names the key and where it came from."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class HostBlock(_Strict):
    """One server: where it is, the token for it (each host keeps its own) and how to reach it."""

    target: str = "localhost:50051"
    token: str | None = Field(None, repr=False)  # a repr (an error reporter's locals) never shows it
    workspace: str | None = None
    # TLS is asked for, never guessed from the target's port or scheme; caFile: a PEM file of the CA that
    # signed the server's certificate, else the system's roots verify it
    tls: bool = False
    ca_file: str | None = None


class PeerFlags(_Strict):
    """A session member's observation toggles (observe_me: its own messages build its self-model;
    observe_others: it builds models of the other members)."""

    observe_me: bool = True
    observe_others: bool = True


class Observation(_Strict):
    user: PeerFlags = PeerFlags()
    ai: PeerFlags = PeerFlags()


PRESETS = {
    "directional": Observation(),  # full mutual observation
    # the AI models the user from the user's messages; the user only self-models
    "unified": Observation(
        user=PeerFlags(observe_me=True, observe_others=False), ai=PeerFlags(observe_me=False, observe_others=True)
    ),
}


class MemoryConfig(_Strict):
    """Every setting of the memory provider (JSON keys in camelCase, e.g. contextTokens)."""

    # where: the host block named by `host` gives target/token/workspace/tls/caFile unless set at the top level
    host: str | None = None
    hosts: dict[str, HostBlock] = {}
    target: str | None = None
    token: str | None = Field(None, repr=False)
    workspace: str | None = None
    tls: bool | None = None  # None: the host block's
    ca_file: str | None = None
    # seconds; at most a day: a deadline past what gRPC can hold (1e10, Infinity) failed every call at once
    timeout: float = Field(5.0, gt=0, le=86_400, validation_alias=AliasChoices("timeout", "requestTimeout"))
    # who
    peer_name: str = "user"
    ai_peer: str = "assistant"
    # display names (how people call them): messages are embedded and searched under them, and a question
    # saying one finds that peer's messages; a gateway sender's own name wins for its peer
    user_display_name: str | None = None
    ai_display_name: str | None = None
    pin_user_peer: bool = False
    user_peer_aliases: dict[str, str] = {}
    runtime_peer_prefix: str = ""
    a2a_sessions: bool = Field(True, alias="a2aSessions")  # to_camel would say a2ASessions
    # which session
    session_strategy: SessionStrategy = "per-directory"
    sessions: dict[str, str] = {}  # manual mappings: absolute directory -> session name
    # the injected context
    recall_mode: RecallMode = "hybrid"
    context_tokens: int | None = Field(None, ge=1)
    context_cadence: int = Field(1, ge=1)
    dialectic_cadence: int = Field(2, ge=1)
    dialectic_depth: int = 1
    dialectic_depth_levels: list[Level] | None = None
    dialectic_reasoning_level: Level = "low"
    dialectic_dynamic: bool = True
    dialectic_max_chars: int = Field(600, ge=1)
    dialectic_max_input_chars: int = Field(10_000, ge=1)
    reasoning_heuristic: bool = True
    reasoning_level_cap: Level = "high"
    # peerlog_search asks the server to re-rank with its cross-encoder (more of the answer in the first
    # hits, about half a second more); false for a server that runs without one
    rerank_search: bool = True
    # the user's time zone (IANA name; empty: UTC): what "yesterday" or "last May" means in its searches
    time_zone: str = ""
    init_on_session_start: bool = False
    # writing
    write_frequency: WriteFrequency = "async"
    save_messages: bool = True
    message_max_chars: int = Field(25_000, ge=1, le=25_000)
    # observation
    observation_mode: Literal["directional", "unified"] = "directional"
    observation: Observation | None = None

    @field_validator("time_zone", mode="after")
    @classmethod
    def _known_zone(cls, name: str) -> str:
        if name:
            try:
                ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"{name!r} is not an IANA time zone name, such as 'Europe/Lisbon'") from None
        return name

    @field_validator("dialectic_depth", mode="after")
    @classmethod
    def _clamp_depth(cls, depth: int) -> int:
        return min(max(depth, 1), 3)

    @field_validator("peer_name", "ai_peer", "runtime_peer_prefix", mode="after")
    @classmethod
    def _id_like(cls, value: str) -> str:
        if value and not PEER_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a peer id (letters, digits, _ and -)")
        return value

    @field_validator("user_peer_aliases", mode="after")
    @classmethod
    def _aliases_are_peer_ids(cls, aliases: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # the server refuses a batch whose author is no peer id, and the writer drops it: every turn of that
        # user would be lost, so the alias is refused here, where the operator sees it
        for runtime_id, peer in aliases.items():
            if not PEER_ID.fullmatch(peer):
                raise ValueError(f"{runtime_id!r} maps to {peer!r}, which is not a peer id (letters, digits, _ and -)")
            if peer == info.data.get("ai_peer"):
                raise ValueError(f"{runtime_id!r} maps to the AI's peer {peer!r}: that user's turns would be the AI's")
        return aliases

    def _host_block(self) -> HostBlock:
        if self.host is None:
            return HostBlock()
        if self.host not in self.hosts:
            raise ConfigError(f"host {self.host!r} has no block in hosts (known: {sorted(self.hosts)})")
        return self.hosts[self.host]

    @property
    def resolved_target(self) -> str:
        return self.target or self._host_block().target

    @property
    def resolved_token(self) -> str | None:
        # a host block's token is for its own server: with the target set elsewhere (PEERLOG_TARGET, a top-level
        # target) it would hand that server's credential to another, so only a top-level token goes there
        block = self._host_block()
        return self.token or (block.token if self.resolved_target == block.target else None)

    @property
    def resolved_tls(self) -> bool:
        # unlike the token, kept for an overridden target: a wrong guess fails to connect, it leaks nothing
        return self.tls if self.tls is not None else self._host_block().tls

    @property
    def resolved_ca_file(self) -> str | None:
        # "" at the top level (PEERLOG_MEMORY_CA_FILE=) names none, whatever the host block names
        ca_file = self.ca_file if self.ca_file is not None else self._host_block().ca_file
        return ca_file or None

    @property
    def resolved_workspace(self) -> str:
        return self.workspace or self._host_block().workspace or "default"

    @property
    def flags(self) -> Observation:
        """The observation toggles: the explicit block if given, else the preset."""
        return self.observation or PRESETS[self.observation_mode]

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials for the resolved server, None for plaintext; a ConfigError naming caFile when it
        cannot be read, holds no certificate, or is given without tls."""
        ca_file = self.resolved_ca_file
        if not self.resolved_tls:
            if ca_file:  # a CA with TLS off: the token would go out in plaintext while the settings look secure
                raise ConfigError(f"caFile {ca_file} is set but tls is not: set tls to true (or remove caFile)")
            return None
        return grpc.ssl_channel_credentials(root_certificates=_read_ca(ca_file) if ca_file else None)

    def public(self) -> dict[str, Any]:
        """The settings as JSON keys, every token masked (for status output and logs)."""
        data = self.model_dump(by_alias=True, mode="json")
        if data.get("token"):
            data["token"] = "***"
        for block in data.get("hosts", {}).values():
            if block.get("token"):
                block["token"] = "***"
        return data


def _read_ca(path: str) -> bytes:
    try:
        pem = Path(path).expanduser().read_bytes()
    except OSError as error:
        raise ConfigError(f"caFile {path}: cannot be read ({error.strerror or error})") from error
    # gRPC takes any bytes here and only fails each handshake later, as an unexplained UNAVAILABLE
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigError(f"caFile {path}: holds no PEM certificate")
    return pem


def connect(config: MemoryConfig) -> Peerlog:
    """A client of the server the settings resolve to: its target, token, timeout and TLS."""
    return Peerlog(
        config.resolved_target,
        token=config.resolved_token,
        timeout=config.timeout,
        credentials=config.channel_credentials(),
    )


def global_path(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get("PEERLOG_MEMORY_GLOBAL") or Path.home() / ".peerlog" / "memory.json")


def local_path(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get("PEERLOG_MEMORY_HOME") or Path.cwd() / ".peerlog") / "memory.json"


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # JSON is UTF-8, whatever the system's locale
    except UnicodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text ({error}); save it as UTF-8") from error
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not JSON: {error}") from error
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error})") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the settings must be a JSON object")
    return data


def _env_value(name: str, raw: str) -> Any:
    """A variable's value for field `name`: as written for a text field (PEER_NAME=12345 is a name, not a
    number), else JSON-decoded (numbers, booleans, lists, objects), or as written when it is not JSON."""
    if MemoryConfig.model_fields[name].annotation in (str, str | None):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw  # a plain string, such as a recallMode


def _key(name: str) -> str:
    """The JSON key of a field."""
    return MemoryConfig.model_fields[name].alias or to_camel(name)


def env_overrides(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The settings given by environment variables, by JSON key."""
    out: dict[str, Any] = {}
    for var, raw in env.items():
        if var in ENV_KEYS:
            name = ENV_KEYS[var]
            out[_key(name)] = _env_value(name, raw)
        elif var.startswith("PEERLOG_MEMORY_") and var not in ("PEERLOG_MEMORY_GLOBAL", "PEERLOG_MEMORY_HOME"):
            name = var.removeprefix("PEERLOG_MEMORY_").lower()
            if name not in MemoryConfig.model_fields:
                raise ConfigError(f"{var}: no such setting")
            out[_key(name)] = _env_value(name, raw)
    return out


def validate(layers: list[tuple[str, dict[str, Any]]]) -> MemoryConfig:
    """The config from (where, keys) layers, later ones winning; errors name the key and its origin."""
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for where, data in layers:
        for key, value in data.items():
            merged[key], origin[key] = value, where
    try:
        return MemoryConfig.model_validate(merged)
    except ValidationError as error:
        problems = []
        for e in error.errors():
            key = str(e["loc"][0]) if e["loc"] else "?"
            path = ".".join(str(p) for p in e["loc"])
            problems.append(f"{path} ({origin.get(key, 'default')}): {e['msg']}")
        raise ConfigError("invalid memory settings: " + "; ".join(problems)) from None


def load_config(env: Mapping[str, str] = os.environ, **overrides: Any) -> MemoryConfig:
    """The settings from the global file, the profile-local file, the environment, then `overrides`
    (JSON keys or field names)."""
    g, p = global_path(env), local_path(env)
    return validate(
        [
            (str(g), _read(g)),
            (str(p), _read(p)),
            ("environment", env_overrides(env)),
            ("arguments", {_key(k) if k in MemoryConfig.model_fields else k: v for k, v in overrides.items()}),
        ]
    )


def save_local(changes: dict[str, Any], env: Mapping[str, str] = os.environ) -> Path:
    """Write `changes` (JSON keys) into the profile-local file, checking the result first."""
    path = local_path(env)
    data = {**_read(path), **changes}
    validate([(str(path), data)])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot be written ({error.strerror or error})") from error
    return path
