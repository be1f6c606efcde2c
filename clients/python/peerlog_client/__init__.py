"""peerlog's Python client: `Peerlog` (sync) and `AsyncPeerlog` (asyncio), with the same methods.

from peerlog_client import Peerlog

with Peerlog("localhost:50051") as peerlog:
    ws = peerlog.workspace("acme")
    alice, bot = ws.peer("alice"), ws.peer("bot")
    chat = ws.session("chat-1", members=[alice, bot])
    chat.add_messages([alice.message("I moved to Lisbon last spring"), bot.message("How do you like it?")])
    ctx = chat.context(tokens=2000, observer=alice, assistant=bot)
    messages = ctx.to_openai()
"""

from peerlog_client._async import AsyncPeer, AsyncPeerlog, AsyncSession, AsyncWorkspace
from peerlog_client._core import RetryPolicy
from peerlog_client._sync import Peer, Peerlog, Session, Workspace
from peerlog_client.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PeerlogError,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from peerlog_client.models import (
    Configuration,
    EffectiveConfiguration,
    LogEvent,
    LogPosition,
    MemberSpec,
    NewMessage,
    NewObservation,
    ObservationSource,
    Scope,
    Webhook,
    WebhookDeadLetter,
)

__all__ = [
    "Aborted",
    "AlreadyExists",
    "AsyncPeer",
    "AsyncPeerlog",
    "AsyncSession",
    "AsyncWorkspace",
    "Cancelled",
    "Configuration",
    "DataLoss",
    "EffectiveConfiguration",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "LogEvent",
    "LogPosition",
    "MemberSpec",
    "NewMessage",
    "NewObservation",
    "NotFound",
    "ObservationSource",
    "OutOfRange",
    "Peer",
    "PeerlogError",
    "Peerlog",
    "PermissionDenied",
    "ResourceExhausted",
    "RetryPolicy",
    "Scope",
    "Session",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "Webhook",
    "WebhookDeadLetter",
    "Workspace",
]
