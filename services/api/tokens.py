"""Scoped API tokens: what a token may touch, and minting and verifying them (JWTs, PyJWT).

A token's `scope` claim holds space-separated scopes (the OAuth 2.0 convention):
  admin          everything, every workspace
  workspace:W    everything in workspace W
  peer:W/P       act as peer P in W: P itself, its messages, what P observes
  session:W/S    session S in W: its members, messages and summaries
An optional `exp` ends it. Ids cannot hold ':', '/' or spaces, so the forms cannot be confused.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from services.api.settings import AuthSettings
from services.errors import Unauthenticated

ADMIN = "admin"
_ID = r"[A-Za-z0-9_-]{1,512}"
_SCOPE = re.compile(rf"admin|workspace:{_ID}|(?:peer|session):{_ID}/{_ID}")
MIN_SECRET_BYTES = 32  # RFC 7518 §3.2: an HS256 key at least as long as the hash
VERIFIED_TOKENS = 4096  # tokens whose grant Verifier remembers
LATEST_EXP = 253_402_300_799  # 9999-12-31T23:59:59Z: an `exp` past it is no time a token can end at
LONGEST_LIFETIME = timedelta(days=36_500)  # `--expires` at most 100 years: longer is the same as no `exp`
_PUBLIC_KEY = {
    "RS256": (RSAPublicKey, "an RSA public key"),
    "ES256": (EllipticCurvePublicKey, "an EC P-256 public key"),
}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resource:
    """What a call touches: a workspace, or a peer or a session in one."""

    workspace: str
    kind: Literal["workspace", "peer", "session"] = "workspace"
    id: str = ""

    @property
    def scope(self) -> str:
        """The narrowest scope that covers it."""
        return f"workspace:{self.workspace}" if self.kind == "workspace" else f"{self.kind}:{self.workspace}/{self.id}"


def workspace(w: str) -> Resource:
    return Resource(w)


def peer(w: str, p: str) -> Resource:
    return Resource(w, "peer", p)


def session(w: str, s: str) -> Resource:
    return Resource(w, "session", s)


@dataclass(frozen=True)
class NarrowView:
    """What a peer or session token covers of one workspace: the sessions it names, and those its peers
    have been members of (read where it matters: guards.check_scope)."""

    peers: frozenset[str]
    sessions: frozenset[str]


@dataclass(frozen=True)
class Grant:
    """The verified scopes of one token, and until when (seconds since 1970, the leeway included; None:
    for ever) it holds: a stream opened under it ends then."""

    scopes: frozenset[str]
    until: float | None = None

    def lapsed(self, now: float | None = None) -> bool:
        return self.until is not None and (time.time() if now is None else now) >= self.until

    def covers(self, r: Resource) -> bool:
        return bool({ADMIN, f"workspace:{r.workspace}", r.scope} & self.scopes)

    def within(self, workspace_id: str) -> NarrowView | None:
        """What it covers of a workspace when less than the whole of it; None: all of it."""
        if self.covers(workspace(workspace_id)):
            return None
        prefix = f"{workspace_id}/"
        named = [s.split(":", 1) for s in self.scopes if ":" in s]
        return NarrowView(
            peers=frozenset(i.removeprefix(prefix) for k, i in named if k == "peer" and i.startswith(prefix)),
            sessions=frozenset(i.removeprefix(prefix) for k, i in named if k == "session" and i.startswith(prefix)),
        )

    def workspaces(self) -> frozenset[str] | None:
        """The workspaces it may see whole (ListWorkspaces); None: every one."""
        if ADMIN in self.scopes:
            return None
        return frozenset(s.removeprefix("workspace:") for s in self.scopes if s.startswith("workspace:"))


def parse_scopes(claim: object) -> frozenset[str]:
    """The scopes of a `scope` claim; Unauthenticated unless it is a non-empty string of known forms."""
    if not isinstance(claim, str) or not claim.split():
        raise Unauthenticated("the token has no scope claim (e.g. 'workspace:W'); make one with `peerlog keys create`")
    bad = [s for s in claim.split() if not _SCOPE.fullmatch(s)]
    if bad:
        raise Unauthenticated(f"the token's scope {bad[0][:100]!r} is not admin, workspace:W, peer:W/P or session:W/S")
    return frozenset(claim.split())


def scopes_for(workspace_id: str = "", peer_id: str = "", session_id: str = "") -> list[str]:
    """The scopes `peerlog keys create` grants: admin without a workspace; else peer and/or session
    scopes inside it, or the whole workspace when neither is named."""
    if not workspace_id:
        if peer_id or session_id:
            raise ValueError("--peer and --session need --workspace")
        return [ADMIN]
    narrow = [
        r.scope
        for r in (
            peer(workspace_id, peer_id) if peer_id else None,
            session(workspace_id, session_id) if session_id else None,
        )
        if r
    ]
    out = narrow or [workspace(workspace_id).scope]
    parse_scopes(" ".join(out))  # ids that no scope can hold fail here, not at the server
    return out


def _read(path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read key file {path}: {err.strerror}") from None


def _holds(data: bytes) -> str:
    """What a key file holds, for the message refusing it."""
    if not data.strip():
        return "it is empty"
    try:
        key = load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        return "it holds no PEM public key"
    if isinstance(key, EllipticCurvePublicKey):
        return f"it holds an EC key on curve {key.curve.name}"
    return f"it holds an {type(key).__name__.removesuffix('PublicKey')} key"


MIN_RSA_BITS = 2048  # NIST's floor; 512-bit keys are factored in hours


def _public_key(auth: AuthSettings) -> RSAPublicKey | EllipticCurvePublicKey:
    """The RS256/ES256 public key, parsed now: a file that is not one fails the start, not every call."""
    path = auth.public_key_file
    data = _read(path)
    kind, wanted = _PUBLIC_KEY[auth.algorithm]
    try:
        key = jwt.get_algorithm_by_name(auth.algorithm).prepare_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm, jwt.PyJWTError):
        raise ValueError(
            f"PEERLOG_AUTH_PUBLIC_KEY_FILE {path} must be {wanted} in PEM, which {auth.algorithm} tokens verify "
            f"with, but {_holds(data)}"
        ) from None
    if not isinstance(key, kind):  # prepare_key takes a private key too; the server needs only the public half
        raise ValueError(
            f"PEERLOG_AUTH_PUBLIC_KEY_FILE {path} holds a private key: give the server its public half "
            f"(`openssl pkey -in {path.name} -pubout`)"
        )
    if isinstance(key, RSAPublicKey) and key.key_size < MIN_RSA_BITS:  # factorable: anyone could mint admin
        raise ValueError(
            f"PEERLOG_AUTH_PUBLIC_KEY_FILE {path} holds an RSA key of {key.key_size} bits, too weak to trust "
            f"tokens to; use one of at least {MIN_RSA_BITS} (`openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:3072`)"
        )
    return key


def verification_key(auth: AuthSettings) -> str | RSAPublicKey | EllipticCurvePublicKey:
    """The key tokens verify with; ValueError (at start, not per call) when it is missing, unusable or
    too weak."""
    if auth.algorithm == "HS256":
        secret = auth.secret.get_secret_value()
        if len(secret.encode()) < MIN_SECRET_BYTES:
            raise ValueError(
                f"PEERLOG_AUTH_SECRET must be at least {MIN_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)"
            )
        return secret
    if auth.public_key_file is None:
        raise ValueError(f"PEERLOG_AUTH_ALGORITHM={auth.algorithm} needs PEERLOG_AUTH_PUBLIC_KEY_FILE")
    return _public_key(auth)


def signing_key(auth: AuthSettings) -> str | bytes:
    if auth.algorithm == "HS256":
        return verification_key(auth)
    if auth.private_key_file is None:
        raise ValueError(f"signing {auth.algorithm} tokens needs PEERLOG_AUTH_PRIVATE_KEY_FILE")
    return _read(auth.private_key_file)


def mint(auth: AuthSettings, scopes: list[str], expires_in: timedelta | None = None, now: float | None = None) -> str:
    """A signed token granting `scopes`, expiring `expires_in` from now (None: no `exp`)."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, object] = {"scope": " ".join(sorted(parse_scopes(" ".join(scopes)))), "iat": issued}
    if expires_in is not None:
        claims["exp"] = issued + int(expires_in.total_seconds())
    return jwt.encode(claims, signing_key(auth), algorithm=auth.algorithm)


class Verifier:
    """Checks tokens against the configured key and algorithm (only that one: no algorithm confusion)."""

    def __init__(self, auth: AuthSettings) -> None:
        self.key = verification_key(auth)
        self.algorithm = auth.algorithm
        self.leeway_s = auth.leeway_s
        self._verified: OrderedDict[str, Grant] = OrderedDict()

    def grant(self, token: str) -> Grant:
        """The token's grant. A token that verified is remembered until its `exp` plus the leeway
        (VERIFIED_TOKENS, least recently used out): a client sends the same token with every call, and decoding
        and checking its signature again cost about 33 µs a call. Only tokens that verified are kept, so a
        caller cannot fill the cache, and one past that time is decoded again, which refuses it."""
        hit = self._verified.get(token)
        if hit is not None and not hit.lapsed():
            self._verified.move_to_end(token)
            return hit
        grant = self._verify(token)
        self._verified[token] = grant
        if len(self._verified) > VERIFIED_TOKENS:
            self._verified.popitem(last=False)
        return grant

    def _verify(self, token: str) -> Grant:
        try:
            claims = jwt.decode(
                token, self.key, algorithms=[self.algorithm], options={"require": ["scope"]}, leeway=self.leeway_s
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the token has expired; make a new one with `peerlog keys create`") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("the token's signature does not verify with this server's key") from None
        except jwt.ImmatureSignatureError as err:
            claim = "nbf" if "nbf" in str(err) else "iat"
            raise Unauthenticated(
                f"the token is not yet valid ({claim} is more than {self.leeway_s:g} s ahead of this server's "
                "clock); if it was just made, the clocks of this server and of the machine that made it disagree "
                "(clock skew): synchronise them (NTP) or raise PEERLOG_AUTH_LEEWAY_S"
            ) from None
        except jwt.InvalidTokenError as err:
            raise Unauthenticated(f"the token is not valid: {str(err)[:200]}") from None
        except Exception as err:  # a token no check above foresaw: refused, never UNKNOWN with library internals
            log.warning("a token failed verification unexpectedly: %s: %.200s", type(err).__name__, err)
            raise Unauthenticated("the token could not be verified") from None
        expires = _expiry(claims.get("exp"))
        return Grant(parse_scopes(claims["scope"]), None if expires is None else expires + self.leeway_s)


def _expiry(exp: object) -> float | None:
    """A verified token's `exp` as seconds; Unauthenticated for one that is no time (10**400, NaN, a string)."""
    if exp is None:
        return None
    # compared before any float(): an int too large for a float overflows there; NaN fails every comparison
    if isinstance(exp, bool) or not isinstance(exp, int | float) or not 0 <= exp <= LATEST_EXP:
        raise Unauthenticated("the token's exp is not a time before the year 10000")
    return float(exp)


_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> timedelta:
    """'30d', '12h', '90m', '45s', '2w' as a timedelta, at most LONGEST_LIFETIME; ValueError otherwise."""
    found = _DURATION.fullmatch(text.strip())
    digits = found[1].lstrip("0") if found else ""
    if not digits:
        raise ValueError(f"{text[:40]!r} is not a duration such as 30d, 12h, 90m (s, m, h, d, w)")
    # the digits are counted first: int() of thousands of them fails, and timedelta past 999,999,999 days
    seconds = int(digits) * _UNIT_S[found[2]] if len(digits) <= 12 else None
    if seconds is None or seconds > LONGEST_LIFETIME.total_seconds():
        raise ValueError(
            f"{text.strip()[:40]} is longer than {LONGEST_LIFETIME.days}d (100 years); leave --expires out for a "
            "token that does not expire"
        )
    return timedelta(seconds=seconds)
