"""Tokens for tests: one HS256 key per test run, and channels that call as admin."""

from __future__ import annotations

import secrets

import grpc

from services.api.channels import aio_channel
from services.api.settings import AuthSettings
from services.api.tokens import mint
from services.settings import Settings

AUTH = AuthSettings(secret=secrets.token_hex(32))  # auth on, as `serve` runs it


def admin_token(settings: Settings) -> str:
    return mint(settings.auth, ["admin"])


def admin_channel(settings: Settings, port: int) -> grpc.aio.Channel:
    """A channel to the API on 127.0.0.1:`port` whose calls carry an admin token."""
    return aio_channel(f"127.0.0.1:{port}", admin_token(settings))
