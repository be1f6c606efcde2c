"""The asyncio client, AsyncPeerlog, and its handles: AsyncWorkspace, AsyncPeer, AsyncSession.

The sync client (_sync.py) is generated from this file by tools/unasync.py: edit this one only. What
is not I/O (typed values, conversions, errors, retry decisions, consistency tokens) lives in the shared
modules both import.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import grpc

from peerlog_client import _convert as c
from peerlog_client import models as m
from peerlog_client._core import CANCELLED, Call, CallContext, RetryPolicy, cancelled_by_caller, sent_under
from peerlog_client._gen.peerlog.v1 import audit_pb2 as au
from peerlog_client._gen.peerlog.v1 import common_pb2, context_pb2, dialectic_pb2, dreams_pb2
from peerlog_client._gen.peerlog.v1 import configuration_pb2 as cf
from peerlog_client._gen.peerlog.v1 import events_pb2 as ev
from peerlog_client._gen.peerlog.v1 import messages_pb2 as ms
from peerlog_client._gen.peerlog.v1 import observations_pb2 as ob
from peerlog_client._gen.peerlog.v1 import peers_pb2 as pe
from peerlog_client._gen.peerlog.v1 import scopes_pb2 as sc
from peerlog_client._gen.peerlog.v1 import sessions_pb2 as se
from peerlog_client._gen.peerlog.v1 import webhooks_pb2 as wh
from peerlog_client._gen.peerlog.v1 import workspaces_pb2 as wo
from peerlog_client._gen.peerlog.v1.audit_pb2_grpc import AuditServiceStub
from peerlog_client._gen.peerlog.v1.configuration_pb2_grpc import ConfigurationServiceStub
from peerlog_client._gen.peerlog.v1.context_pb2_grpc import ContextServiceStub
from peerlog_client._gen.peerlog.v1.dialectic_pb2_grpc import DialecticServiceStub
from peerlog_client._gen.peerlog.v1.dreams_pb2_grpc import DreamServiceStub
from peerlog_client._gen.peerlog.v1.events_pb2_grpc import EventServiceStub
from peerlog_client._gen.peerlog.v1.messages_pb2_grpc import MessageServiceStub
from peerlog_client._gen.peerlog.v1.observations_pb2_grpc import ObservationServiceStub
from peerlog_client._gen.peerlog.v1.peers_pb2_grpc import PeerServiceStub
from peerlog_client._gen.peerlog.v1.scopes_pb2_grpc import ScopeServiceStub
from peerlog_client._gen.peerlog.v1.sessions_pb2_grpc import SessionServiceStub
from peerlog_client._gen.peerlog.v1.webhooks_pb2_grpc import WebhookServiceStub
from peerlog_client._gen.peerlog.v1.workspaces_pb2_grpc import WorkspaceServiceStub
from peerlog_client.errors import ClientClosed, DataLoss, from_rpc_error

T = TypeVar("T")
# gRPC waits 1 s, then longer, before reconnecting after a failure; calls in between fail at once. Retries
# that wait 0.1-2 s need the channel to reconnect about as soon, or they are spent on a closed door.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)
FOREVER_S = 365 * 24 * 3600.0  # a subscription's default deadline: it ends when its reader stops
PIECE_BYTES = 1024 * 1024  # an upload's piece per request: well inside gRPC's default 4 MiB message limit


class AsyncTransport:
    """The channel, and every call's deadline, retries, metadata and consistency token."""

    def __init__(
        self,
        target: str,
        context: CallContext,
        credentials: grpc.ChannelCredentials | None,
        options: Sequence[tuple[str, Any]],
    ) -> None:
        self._target, self._credentials, self._options = target, credentials, [*CHANNEL_OPTIONS, *options]
        # made at the first call, not here: an asyncio channel belongs to the event loop running when it is
        # made, and a client is often built before any loop runs (one loop per client, all the same)
        self._channel: Any = None
        self._closed = False
        # the sync client may be shared by threads: without it, their first calls each made a channel, and
        # close() closed one; and a stub made on a channel that close() just closed can crash the interpreter
        self._lock = threading.Lock()
        self.context = context
        self._stubs: dict[type, Any] = {}

    def _method(self, call: Call[Any]) -> Any:
        with self._lock:
            self._refuse_if_closed(call, 0)
            if self._channel is None:
                self._channel = (
                    grpc.aio.secure_channel(self._target, self._credentials, self._options)
                    if self._credentials
                    else grpc.aio.insecure_channel(self._target, self._options)
                )
            if call.stub not in self._stubs:
                self._stubs[call.stub] = call.stub(self._channel)
            return getattr(self._stubs[call.stub], call.method)

    def _refuse_if_closed(self, call: Call[Any], attempts: int) -> None:
        if self._closed:
            raise ClientClosed(sent_under(call.request), attempts)

    async def unary(self, call: Call[T], timeout: float | None = None, more: Sequence[Any] | None = None) -> T:
        """One reply to `call.request`; with `more`, a client stream: the request, then those (UploadFile)."""
        attempts = self.context.start(call.request, timeout)
        while True:
            method = self._method(call)  # each attempt: the client may have been closed while one waited
            # a stream is sent whole again on a retry: its first request's idempotency key makes that safe
            sent = call.request if more is None else iter([call.request, *more])
            try:
                response = await method(sent, timeout=attempts.remaining(), metadata=self.context.metadata)
            except grpc.RpcError as error:
                wait = attempts.retry_after(error)
                if wait is None:
                    raise from_rpc_error(error, attempts.made, sent_under(call.request)) from error
                await asyncio.sleep(wait)
            except CANCELLED:
                self._refuse_if_cut_off(call, attempts.made)
                raise
            else:
                self.context.received(response)
                return call.convert(response)

    async def stream(self, call: Call[T], timeout: float | None = None) -> AsyncIterator[T]:
        """The items of a server stream; retried like `unary` while nothing has arrived yet."""
        attempts = self.context.start(call.request, timeout)
        arrived = False
        while True:
            rpc = self._method(call)(call.request, timeout=attempts.remaining(), metadata=self.context.metadata)
            try:
                async for item in rpc:
                    arrived = True
                    converted = call.convert(item)
                    if converted is not None:  # a kind of item this client does not know
                        yield converted
                return
            except grpc.RpcError as error:
                wait = None if arrived else attempts.retry_after(error)
                if wait is None:
                    raise from_rpc_error(error, attempts.made, sent_under(call.request)) from error
            except CANCELLED:
                self._refuse_if_cut_off(call, attempts.made)
                raise
            finally:
                rpc.cancel()  # the caller stopped early, or the call failed: free it either way
            await asyncio.sleep(wait)

    async def pages(self, page: Callable[[str], Call[m.Page[T]]]) -> AsyncIterator[T]:
        """Every item of a paged list: `page(token)` is the call for the page after `token`."""
        token, seen = "", set()
        while True:
            got = await self.unary(page(token))
            for item in got.items:
                yield item
            token = got.next_page_token
            if not token:
                return
            if token in seen:  # a server's bug: the same page again and again, without end
                raise DataLoss(f"the server sent page token {token[:40]!r} twice: the list would never end")
            seen.add(token)

    def _refuse_if_cut_off(self, call: Call[Any], attempts: int) -> None:
        """For a call cancelled under it: ClientClosed, a PeerlogError with the write's key, if close() cut it
        off; nothing if the caller's own task is being cancelled, whose CancelledError must go on up."""
        if not cancelled_by_caller():
            self._refuse_if_closed(call, attempts)

    async def close(self) -> None:
        with self._lock:  # no call makes a channel or a stub once this is set
            self._closed = True
            channel = self._channel
        if channel is not None:
            await channel.close()


def _get_or_create(create: bool, stub: type, entity: str, create_request: Any, get_request: Any) -> Call[Any]:
    """GetOrCreate<entity> or Get<entity>, answering (the entity, whether this call created it)."""
    if create:
        return Call(
            stub, f"GetOrCreate{entity}", create_request, lambda r: (c.to_model(getattr(r, entity.lower())), r.created)
        )
    return Call(stub, f"Get{entity}", get_request, lambda r: (c.to_model(r), False))


def _page(size: int, token: str) -> common_pb2.PageRequest:
    return common_pb2.PageRequest(page_size=size, page_token=token)


def _search_filters(
    perspective: Any,
    after: datetime | None,
    before: datetime | None,
    limit: int,
    include_adjacent: bool,
    rerank: bool,
    time_zone: str,
) -> dict[str, Any]:
    """The filters and options every SearchMessages request shares."""
    return {
        "perspective_peer_id": c.id_of(perspective),
        "after": c.timestamp(after),
        "before": c.timestamp(before),
        "limit": limit,
        "include_adjacent": include_adjacent,
        "rerank": rerank,
        "time_zone": time_zone,
    }


def _searched(stub: type, request: Any) -> Call[m.SearchHits]:
    return Call(stub, "SearchMessages", request, c.search_hits)


def _scope_id(scope: str | m.Scope | None) -> str:
    return scope.scope_id if isinstance(scope, m.Scope) else scope or ""


def _levels(levels: Iterable[str]) -> list[int]:
    return [c.enum_value(ob.ObservationLevel, "ObservationLevel", level) for level in levels]


def _members(members: Iterable[Any]) -> list[se.MemberSpec]:
    specs = [x if isinstance(x, m.MemberSpec) else m.MemberSpec(c.id_of(x)) for x in members]
    return [se.MemberSpec(peer_id=s.peer_id, observe_me=s.observe_me, observe_others=s.observe_others) for s in specs]


def _new_message(turn: m.NewMessage | tuple[Any, str]) -> ms.NewMessage:
    if not isinstance(turn, m.NewMessage):
        turn = m.NewMessage(c.id_of(turn[0]), turn[1])
    return ms.NewMessage(
        peer_id=turn.peer_id,
        content=turn.content,
        created_at=c.timestamp(turn.created_at),
        metadata=c.struct(turn.metadata),
        message_id=turn.message_id,
        configuration=c.configuration(turn.configuration, cf.Configuration),
    )


def _set_configuration(method: str, request: Any, configuration: m.Configuration) -> Call[m.Written]:
    request.configuration.CopyFrom(c.configuration(configuration, cf.Configuration))
    return Call(ConfigurationServiceStub, method, request, c.to_model)


def _effective(
    workspace_id: str, session_id: str = "", message_id: str = "", as_of: datetime | None = None
) -> Call[m.EffectiveConfiguration]:
    return Call(
        ConfigurationServiceStub,
        "GetEffectiveConfiguration",
        cf.GetEffectiveConfigurationRequest(
            workspace_id=workspace_id, session_id=session_id, message_id=message_id, as_of=c.timestamp(as_of)
        ),
        c.effective_configuration,
    )


def _new_observation(item: str | m.NewObservation) -> ob.NewObservation:
    if isinstance(item, str):
        item = m.NewObservation(item)
    return ob.NewObservation(
        content=item.content,
        session_id=item.session_id,
        sources=[ob.ObservationSource(message_id=s.message_id, span=s.span) for s in item.sources],
        observation_id=item.observation_id,
    )


def _response_format(schema: str | dict[str, Any] | None) -> dialectic_pb2.ResponseFormat | None:
    if schema is None:
        return None
    if isinstance(schema, str):
        return dialectic_pb2.ResponseFormat(json_schema=schema)
    return dialectic_pb2.ResponseFormat(json_schema_object=c.struct(schema))


class AsyncPeerlog:
    """A peerlog server, through the asyncio client: `async with AsyncPeerlog("host:port") as peerlog: ...`

    token: sent as `authorization: Bearer <token>` with every call. timeout: every call's deadline in
    seconds, retries included. retry: how UNAVAILABLE is retried (reads only; see RetryPolicy).
    credentials: TLS channel credentials (None: plaintext). options: extra gRPC channel options.
    The client sends the consistency token of its writes with its reads, so it always reads its writes.
    """

    def __init__(
        self,
        target: str,
        token: str | None = None,
        timeout: float = 10.0,
        *,
        retry: RetryPolicy = RetryPolicy(),
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._t = AsyncTransport(target, CallContext(token, timeout, retry), credentials, options)

    async def workspace(
        self,
        workspace_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        create: bool = True,
    ) -> AsyncWorkspace:
        """The workspace, created first if needed (create=False: NotFound if it does not exist)."""
        info, created = await self._t.unary(
            _get_or_create(
                create,
                WorkspaceServiceStub,
                "Workspace",
                wo.GetOrCreateWorkspaceRequest(workspace_id=workspace_id, metadata=c.struct(metadata)),
                wo.GetWorkspaceRequest(workspace_id=workspace_id),
            )
        )
        return AsyncWorkspace(self._t, info, created)

    def workspaces(self, *, page_size: int = 0) -> AsyncIterator[m.Workspace]:
        """Every workspace, by id."""
        return self._t.pages(
            lambda token: Call(
                WorkspaceServiceStub,
                "ListWorkspaces",
                wo.ListWorkspacesRequest(page=_page(page_size, token)),
                c.page_of("workspaces"),
            )
        )

    @property
    def consistency_token(self) -> str:
        """The log positions of every write this client made; its reads wait for them."""
        return self._t.context.writes.token

    def remember_write(self, token: str) -> None:
        """Make this client's reads wait for a write made elsewhere (another client's token). ValueError for
        what is no token peerlog returns: kept, it replaced this client's own positions and failed every read."""
        self._t.context.writes.remember(token)

    def forget_writes(self) -> None:
        """Stop waiting for the writes this client made or remembered (after a log was reset or replaced,
        whose positions no read can reach)."""
        self._t.context.writes.forget()

    async def close(self) -> None:
        await self._t.close()

    async def __aenter__(self) -> AsyncPeerlog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _AsyncHandle:
    _id_field: str  # the field of `info` that is the handle's id

    def __init__(self, transport: AsyncTransport, info: Any, created: bool) -> None:
        self._t = transport
        self.info = info  # as the server last answered
        self.created = created  # True if getting the handle created it

    @property
    def id(self) -> str:
        return getattr(self.info, self._id_field)

    @property
    def workspace_id(self) -> str:
        return self.info.workspace_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"


class AsyncWorkspace(_AsyncHandle):
    """A workspace: its peers, sessions and everything read or written across them."""

    info: m.Workspace
    _id_field = "workspace_id"

    async def refresh(self) -> m.Workspace:
        self.info = await self._t.unary(
            Call(WorkspaceServiceStub, "GetWorkspace", wo.GetWorkspaceRequest(workspace_id=self.id), c.to_model)
        )
        return self.info

    async def peer(
        self,
        peer_id: str,
        *,
        observe_me: bool | None = None,
        metadata: dict[str, Any] | None = None,
        create: bool = True,
    ) -> AsyncPeer:
        """The peer, created first if needed (create=False: NotFound if it does not exist). A given
        `observe_me` that differs from the stored one reconfigures the peer."""
        info, created = await self._t.unary(
            _get_or_create(
                create,
                PeerServiceStub,
                "Peer",
                pe.GetOrCreatePeerRequest(
                    workspace_id=self.id, peer_id=peer_id, observe_me=observe_me, metadata=c.struct(metadata)
                ),
                pe.GetPeerRequest(workspace_id=self.id, peer_id=peer_id),
            )
        )
        return AsyncPeer(self._t, info, created)

    async def session(
        self,
        session_id: str,
        *,
        members: Iterable[str | AsyncPeer | m.MemberSpec] = (),
        metadata: dict[str, Any] | None = None,
        create: bool = True,
    ) -> AsyncSession:
        """The session, created first if needed, with `members` added where not current members
        (create=False: NotFound if it does not exist, and members are ignored)."""
        info, created = await self._t.unary(
            _get_or_create(
                create,
                SessionServiceStub,
                "Session",
                se.GetOrCreateSessionRequest(
                    workspace_id=self.id, session_id=session_id, members=_members(members), metadata=c.struct(metadata)
                ),
                se.GetSessionRequest(workspace_id=self.id, session_id=session_id),
            )
        )
        return AsyncSession(self._t, info, created)

    def peers(self, *, page_size: int = 0) -> AsyncIterator[m.Peer]:
        """Every peer of the workspace, by id."""
        return self._t.pages(
            lambda token: Call(
                PeerServiceStub,
                "ListPeers",
                pe.ListPeersRequest(workspace_id=self.id, page=_page(page_size, token)),
                c.page_of("peers"),
            )
        )

    def sessions(self, *, peer: str | AsyncPeer | None = None, page_size: int = 0) -> AsyncIterator[m.Session]:
        """Every session of the workspace by id, or only those `peer` has ever been a member of."""
        return self._t.pages(
            lambda token: Call(
                SessionServiceStub,
                "ListSessions",
                se.ListSessionsRequest(workspace_id=self.id, peer_id=c.id_of(peer), page=_page(page_size, token)),
                c.page_of("sessions"),
            )
        )

    async def set_configuration(self, configuration: m.Configuration) -> m.Written:
        """Set the workspace level of the configuration (replacing it whole); applies to the messages
        accepted after the reply."""
        return await self._t.unary(
            _set_configuration(
                "SetWorkspaceConfiguration", cf.SetWorkspaceConfigurationRequest(workspace_id=self.id), configuration
            )
        )

    async def configuration(self, *, as_of: datetime | None = None) -> m.EffectiveConfiguration:
        """The settings in force for the workspace (at `as_of`; None: now) and the level of each."""
        return await self._t.unary(_effective(self.id, as_of=as_of))

    async def message_configuration(self, message_id: str) -> m.EffectiveConfiguration:
        """The settings one message was processed under and the level of each."""
        return await self._t.unary(_effective(self.id, message_id=message_id))

    async def search(
        self,
        query: str,
        *,
        sessions: Iterable[str | AsyncSession] = (),
        authors: Iterable[str | AsyncPeer] = (),
        perspective: str | AsyncPeer | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        limit: int = 0,
        include_adjacent: bool = False,
        rerank: bool = False,
        time_zone: str = "",
        scope: str | m.Scope | None = None,
    ) -> m.SearchHits:
        """Messages of the workspace by meaning and words, best first; filters as SearchMessages
        (scope: only its sessions; rerank: the server's cross-encoder re-ranks the best candidates;
        time_zone: an IANA name whose days the query's time words mean, default UTC)."""
        return await self._t.unary(
            _searched(
                WorkspaceServiceStub,
                wo.SearchWorkspaceMessagesRequest(
                    workspace_id=self.id,
                    query=query,
                    session_ids=c.ids(sessions),
                    author_peer_ids=c.ids(authors),
                    scope_id=_scope_id(scope),
                    **_search_filters(perspective, after, before, limit, include_adjacent, rerank, time_zone),
                ),
            )
        )

    async def create_scope(
        self, scope_id: str, *, name: str = "", sessions: Iterable[str | AsyncSession] = ()
    ) -> m.Scope:
        """A new scope (AlreadyExists if the id is taken) of `sessions` (may be empty: it then recalls nothing)."""
        return await self._t.unary(
            Call(
                ScopeServiceStub,
                "CreateScope",
                sc.CreateScopeRequest(workspace_id=self.id, scope_id=scope_id, name=name, session_ids=c.ids(sessions)),
                c.field_of("scope"),
            )
        )

    async def scope(self, scope_id: str, *, as_of: datetime | None = None) -> m.Scope:
        """A scope with its sessions now, or as they stood `as_of`."""
        return await self._t.unary(
            Call(
                ScopeServiceStub,
                "GetScope",
                sc.GetScopeRequest(workspace_id=self.id, scope_id=scope_id, as_of=c.timestamp(as_of)),
                c.to_model,
            )
        )

    async def scopes(self, *, page_size: int = 0) -> tuple[m.Scope, ...]:
        """The workspace's scopes, by id (every page)."""
        pages = self._t.pages(
            lambda token: Call(
                ScopeServiceStub,
                "ListScopes",
                sc.ListScopesRequest(workspace_id=self.id, page=_page(page_size, token)),
                c.page_of("scopes"),
            )
        )
        return tuple([scope async for scope in pages])

    async def add_scope_sessions(self, scope: str | m.Scope, *sessions: str | AsyncSession) -> m.Scope:
        """Put sessions into a scope (one already in it is left as it is); returns the scope as it is now."""
        return await self._t.unary(
            Call(
                ScopeServiceStub,
                "AddScopeSessions",
                sc.AddScopeSessionsRequest(
                    workspace_id=self.id, scope_id=_scope_id(scope), session_ids=c.ids(sessions)
                ),
                c.field_of("scope"),
            )
        )

    async def remove_scope_sessions(self, scope: str | m.Scope, *sessions: str | AsyncSession) -> m.Scope:
        """Take sessions out of a scope; returns the scope as it is now."""
        return await self._t.unary(
            Call(
                ScopeServiceStub,
                "RemoveScopeSessions",
                sc.RemoveScopeSessionsRequest(
                    workspace_id=self.id, scope_id=_scope_id(scope), session_ids=c.ids(sessions)
                ),
                c.field_of("scope"),
            )
        )

    def events(
        self,
        *,
        types: Iterable[str] = (),
        cursor: Iterable[m.LogPosition] = (),
        from_end: bool = False,
        timeout: float = FOREVER_S,
    ) -> AsyncIterator[m.LogEvent]:
        """The workspace's events (of `types`; empty: all) from `cursor` (the last handled event's .cursor;
        empty: the start of the log, or only new events with from_end), then new ones as they are written,
        until you stop iterating. At least once, in log order per key. A broken stream raises (Unavailable):
        start again from the last cursor you handled and nothing is missed."""
        request = ev.SubscribeRequest(
            workspace_id=self.id,
            event_types=list(types),
            from_end=from_end,
            cursor=ev.EventCursor(
                positions=[ev.LogPosition(topic=p.topic, partition=p.partition, offset=p.offset) for p in cursor]
            ),
        )
        return self._t.stream(Call(EventServiceStub, "Subscribe", request, c.log_event), timeout)

    async def create_webhook(self, url: str, *, types: Iterable[str] = ()) -> m.CreatedWebhook:
        """Register `url` for the workspace's events of `types` (empty: all); keep the secret it answers with."""
        return await self._t.unary(
            Call(
                WebhookServiceStub,
                "CreateWebhook",
                wh.CreateWebhookRequest(workspace_id=self.id, url=url, event_types=list(types)),
                c.to_model,
            )
        )

    async def webhooks(self) -> tuple[m.Webhook, ...]:
        """The workspace's webhooks, by id (without secrets)."""
        return await self._t.unary(
            Call(
                WebhookServiceStub, "ListWebhooks", wh.ListWebhooksRequest(workspace_id=self.id), c.items_of("webhooks")
            )
        )

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._t.unary(
            Call(
                WebhookServiceStub,
                "DeleteWebhook",
                wh.DeleteWebhookRequest(workspace_id=self.id, webhook_id=webhook_id),
                lambda _: None,
            )
        )

    async def webhook_dead_letters(self, webhook_id: str, *, page_size: int = 0) -> tuple[m.WebhookDeadLetter, ...]:
        """Events the webhook's delivery gave up on, oldest first (read a page at a time: each holds a whole
        event)."""
        pages = self._t.pages(
            lambda token: Call(
                WebhookServiceStub,
                "ListWebhookDeadLetters",
                wh.ListWebhookDeadLettersRequest(
                    workspace_id=self.id, webhook_id=webhook_id, page=_page(page_size, token)
                ),
                c.page_of("dead_letters"),
            )
        )
        return tuple([letter async for letter in pages])

    async def retry_webhook_dead_letter(self, webhook_id: str, event_id: str) -> m.WebhookRetry:
        """Deliver a dead letter again, once, now; it is forgotten if delivered."""
        return await self._t.unary(
            Call(
                WebhookServiceStub,
                "RetryWebhookDeadLetter",
                wh.RetryWebhookDeadLetterRequest(workspace_id=self.id, webhook_id=webhook_id, event_id=event_id),
                c.to_model,
            )
        )

    async def message(self, message_id: str) -> m.Message:
        return await self._t.unary(
            Call(
                MessageServiceStub,
                "GetMessage",
                ms.GetMessageRequest(workspace_id=self.id, message_id=message_id),
                c.to_model,
            )
        )

    async def observation(self, observation_id: str) -> m.Observation:
        """One observation with its sources and premises, whatever its state."""
        return await self._t.unary(
            Call(
                ObservationServiceStub,
                "GetObservation",
                ob.GetObservationRequest(workspace_id=self.id, observation_id=observation_id),
                c.to_model,
            )
        )

    async def delete_observation(self, observation_id: str, reason: str = "") -> m.Written:
        """Withdraw an observation (soft: it stays readable, with deleted_at)."""
        return await self._t.unary(
            Call(
                ObservationServiceStub,
                "DeleteObservation",
                ob.DeleteObservationRequest(workspace_id=self.id, observation_id=observation_id, reason=reason),
                c.to_model,
            )
        )

    async def provenance(self, observation_id: str) -> m.Provenance:
        """The premise DAG under an observation, down to its source messages."""
        return await self._t.unary(
            Call(
                AuditServiceStub,
                "GetProvenance",
                au.GetProvenanceRequest(workspace_id=self.id, observation_id=observation_id),
                c.to_model,
            )
        )

    async def observation_history(self, observation_id: str) -> tuple[m.HistoryEntry, ...]:
        """Every event that touched an observation, oldest first (every page)."""
        pages = self._t.pages(
            lambda token: Call(
                AuditServiceStub,
                "GetObservationHistory",
                au.GetObservationHistoryRequest(workspace_id=self.id, observation_id=observation_id, page_token=token),
                c.page_of("entries"),
            )
        )
        return tuple([entry async for entry in pages])

    def rejected_observations(
        self,
        *,
        observer: str | AsyncPeer | None = None,
        target: str | AsyncPeer | None = None,
        dream_id: str = "",
        page_size: int = 0,
    ) -> AsyncIterator[m.RejectedObservation]:
        """Every write a check refused, newest first; narrowed to a pair (both or neither) and/or a dream."""

        def page(token: str) -> Call[m.Page[m.RejectedObservation]]:
            request = au.ListRejectedObservationsRequest(
                workspace_id=self.id,
                observer_id=c.id_of(observer),
                observed_id=c.id_of(target),
                dream_id=dream_id,
                limit=page_size,
                page_token=token,
            )
            return Call(AuditServiceStub, "ListRejectedObservations", request, c.page_of("rejections"))

        return self._t.pages(page)

    async def processing_status(
        self,
        *,
        observer: str | AsyncPeer | None = None,
        target: str | AsyncPeer | None = None,
        session: str | AsyncSession | None = None,
    ) -> m.ProcessingStatus:
        """How far memory formation has got, for the workspace or narrowed by observer, target, session."""
        return await self._t.unary(
            Call(
                ObservationServiceStub,
                "GetProcessingStatus",
                ob.GetProcessingStatusRequest(
                    workspace_id=self.id,
                    observer_id=c.id_of(observer),
                    observed_id=c.id_of(target),
                    session_id=c.id_of(session),
                ),
                c.to_model,
            )
        )


class AsyncPeer(_AsyncHandle):
    """A peer, and what it knows: about itself (target None) or about another peer (`target`)."""

    info: m.Peer
    _id_field = "peer_id"

    def _target(self, target: str | AsyncPeer | None) -> str:
        return c.id_of(target) or self.id

    def message(
        self, content: str, *, created_at: datetime | None = None, metadata: dict[str, Any] | None = None
    ) -> m.NewMessage:
        """A turn by this peer, for Session.add_messages."""
        return m.NewMessage(self.id, content, created_at, metadata)

    async def refresh(self) -> m.Peer:
        self.info = await self._t.unary(
            Call(
                PeerServiceStub,
                "GetPeer",
                pe.GetPeerRequest(workspace_id=self.workspace_id, peer_id=self.id),
                c.to_model,
            )
        )
        return self.info

    async def set_metadata(self, metadata: dict[str, Any]) -> m.Peer:
        """Replace the peer's metadata (the whole of it). Its `name` is the display name the messages the
        peer sends from now on carry; returns once the change is readable."""
        self.info = await self._t.unary(
            Call(
                PeerServiceStub,
                "SetPeerMetadata",
                pe.SetPeerMetadataRequest(workspace_id=self.workspace_id, peer_id=self.id, metadata=c.struct(metadata)),
                c.field_of("peer"),
            )
        )
        return self.info

    def _chat_request(
        self,
        query: str,
        target: Any,
        session: Any,
        level: str | None,
        response_format: str | dict[str, Any] | None,
        as_of: datetime | None,
        scope: Any,
        perspective: Any,
        time_zone: str,
    ) -> dialectic_pb2.ChatRequest:
        return dialectic_pb2.ChatRequest(
            workspace_id=self.workspace_id,
            observer_id=self.id,
            target_id=c.id_of(target),
            query=query,
            session_id=c.id_of(session),
            response_format=_response_format(response_format),
            reasoning_level=c.enum_value(dialectic_pb2.ReasoningLevel, "ReasoningLevel", level) if level else 0,
            as_of=c.timestamp(as_of),
            scope_id=_scope_id(scope),
            perspective_peer_id=c.id_of(perspective),
            time_zone=time_zone,
        )

    async def chat(
        self,
        query: str,
        *,
        target: str | AsyncPeer | None = None,
        session: str | AsyncSession | None = None,
        level: m.Level | None = None,
        response_format: str | dict[str, Any] | None = None,
        timeout: float | None = None,
        as_of: datetime | None = None,
        scope: str | m.Scope | None = None,
        perspective: str | AsyncPeer | None = None,
        time_zone: str = "",
    ) -> m.ChatAnswer:
        """Ask what this peer knows about `target` (None: itself). session: its recent history goes into
        the prompt. level: minimal | low (default) | medium | high | max. response_format: a JSON schema
        (dict or text) the answer must satisfy. timeout: this call's deadline, if not the client's.
        as_of: answer from memory as it stood then. scope: recall only the scope's sessions. perspective:
        search and quote only the messages this peer saw (this peer's store still answers). time_zone:
        an IANA name whose days the time words in its searches mean (default UTC)."""
        return await self._t.unary(
            Call(
                DialecticServiceStub,
                "Chat",
                self._chat_request(
                    query, target, session, level, response_format, as_of, scope, perspective, time_zone
                ),
                c.to_model,
            ),
            timeout,
        )

    def chat_stream(
        self,
        query: str,
        *,
        target: str | AsyncPeer | None = None,
        session: str | AsyncSession | None = None,
        level: m.Level | None = None,
        response_format: str | dict[str, Any] | None = None,
        timeout: float | None = None,
        as_of: datetime | None = None,
        scope: str | m.Scope | None = None,
        perspective: str | AsyncPeer | None = None,
        time_zone: str = "",
    ) -> AsyncIterator[m.ChatEvent]:
        """chat(), streamed: ToolProgress, ChatText pieces (drop those before a DiscardText), and last
        the whole ChatAnswer."""
        return self._t.stream(
            Call(
                DialecticServiceStub,
                "ChatStream",
                self._chat_request(
                    query, target, session, level, response_format, as_of, scope, perspective, time_zone
                ),
                c.chat_event,
            ),
            timeout,
        )

    async def card(self, *, target: str | AsyncPeer | None = None, as_of: datetime | None = None) -> m.PeerCard:
        """The peer card this peer holds about `target` (None: its own), now or as it stood `as_of`."""
        return await self._t.unary(
            Call(
                PeerServiceStub,
                "GetPeerCard",
                pe.GetPeerCardRequest(
                    workspace_id=self.workspace_id,
                    observer_id=self.id,
                    observed_id=c.id_of(target),
                    as_of=c.timestamp(as_of),
                ),
                c.to_model,
            )
        )

    async def set_card(self, entries: Iterable[str], *, target: str | AsyncPeer | None = None) -> m.PeerCard:
        """Replace the card (entries start with IDENTITY:, ATTRIBUTE:, RELATIONSHIP: or INSTRUCTION:)."""
        return await self._t.unary(
            Call(
                PeerServiceStub,
                "SetPeerCard",
                pe.SetPeerCardRequest(
                    workspace_id=self.workspace_id,
                    observer_id=self.id,
                    observed_id=c.id_of(target),
                    entries=list(entries),
                ),
                c.field_of("card"),
            )
        )

    async def representation(
        self,
        *,
        target: str | AsyncPeer | None = None,
        search_query: str = "",
        search_top_k: int = 0,
        search_max_distance: float = 0.0,
        include_most_reinforced: bool | None = None,
        max_observations: int = 0,
        sessions: Iterable[str | AsyncSession] = (),
        as_of: datetime | None = None,
        scope: str | m.Scope | None = None,
    ) -> m.Representation:
        """The working representation of what this peer knows about `target` (see GetRepresentation);
        scope: only what the scope's sessions vouch for."""
        return await self._t.unary(
            Call(
                ContextServiceStub,
                "GetRepresentation",
                context_pb2.GetRepresentationRequest(
                    workspace_id=self.workspace_id,
                    observer_id=self.id,
                    target_id=c.id_of(target),
                    search_query=search_query,
                    search_top_k=search_top_k,
                    search_max_distance=search_max_distance,
                    include_most_reinforced=include_most_reinforced,
                    max_observations=max_observations,
                    session_ids=c.ids(sessions),
                    as_of=c.timestamp(as_of),
                    scope_id=_scope_id(scope),
                ),
                c.to_model,
            )
        )

    def observations(
        self,
        *,
        target: str | AsyncPeer | None = None,
        levels: Iterable[m.ObservationLevel] = (),
        session: str | AsyncSession | None = None,
        include_superseded: bool = False,
        include_deleted: bool = False,
        reverse: bool = False,
        derivation: str = "",
        page_size: int = 0,
        as_of: datetime | None = None,
    ) -> AsyncIterator[m.Observation]:
        """Every observation this peer holds about `target` (None: itself), oldest first (reverse: newest);
        as_of: the store as it stood then."""

        def page(token: str) -> Call[m.Page[m.Observation]]:
            return Call(
                ObservationServiceStub,
                "ListObservations",
                ob.ListObservationsRequest(
                    workspace_id=self.workspace_id,
                    observer_id=self.id,
                    observed_id=self._target(target),
                    levels=_levels(levels),
                    session_id=c.id_of(session),
                    include_superseded=include_superseded,
                    include_deleted=include_deleted,
                    reverse=reverse,
                    derivation=derivation,
                    page=_page(page_size, token),
                    as_of=c.timestamp(as_of),
                ),
                c.page_of("observations"),
            )

        return self._t.pages(page)

    async def search_observations(
        self,
        query: str,
        *,
        target: str | AsyncPeer | None = None,
        top_k: int = 0,
        max_distance: float | None = None,
        levels: Iterable[m.ObservationLevel] = (),
        as_of: datetime | None = None,
        scope: str | m.Scope | None = None,
    ) -> tuple[m.ObservationMatch, ...]:
        """The live observations about `target` nearest in meaning to `query`, nearest first (as_of: in the
        store as it stood then; scope: only what the scope's sessions vouch for)."""
        return await self._t.unary(
            Call(
                ObservationServiceStub,
                "SearchObservations",
                ob.SearchObservationsRequest(
                    workspace_id=self.workspace_id,
                    observer_id=self.id,
                    observed_id=self._target(target),
                    query=query,
                    top_k=top_k,
                    max_distance=max_distance,
                    levels=_levels(levels),
                    as_of=c.timestamp(as_of),
                    scope_id=_scope_id(scope),
                ),
                c.items_of("results"),
            )
        )

    async def create_observations(
        self,
        observations: Iterable[str | m.NewObservation],
        *,
        target: str | AsyncPeer | None = None,
        idempotency_key: str = "",
    ) -> m.CreatedObservations:
        """Write explicit observations (texts, or NewObservation with session and sources) about `target`.
        Sessions and sources may be this client's own, just added: the server checks them once it can read
        this client's writes (the request carries their consistency token). The call is retried under one
        idempotency key (a fresh one unless given: pass your own to repeat the write safely later)."""
        observations = [_new_observation(o) for o in observations]
        return await self._t.unary(
            Call(
                ObservationServiceStub,
                "CreateObservations",
                ob.CreateObservationsRequest(
                    workspace_id=self.workspace_id,
                    observer_id=self.id,
                    observed_id=self._target(target),
                    observations=observations,
                    idempotency_key=idempotency_key,
                    consistency=common_pb2.ReadConsistency(consistency_token=self._t.context.writes.token),
                ),
                c.to_model,
            )
        )

    async def search(
        self,
        query: str,
        *,
        sessions: Iterable[str | AsyncSession] = (),
        perspective: str | AsyncPeer | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        limit: int = 0,
        include_adjacent: bool = False,
        rerank: bool = False,
        time_zone: str = "",
        scope: str | m.Scope | None = None,
    ) -> m.SearchHits:
        """The messages this peer wrote, by meaning and words, best first (scope: only its sessions)."""
        return await self._t.unary(
            _searched(
                PeerServiceStub,
                pe.SearchPeerMessagesRequest(
                    workspace_id=self.workspace_id,
                    peer_id=self.id,
                    query=query,
                    session_ids=c.ids(sessions),
                    scope_id=_scope_id(scope),
                    **_search_filters(perspective, after, before, limit, include_adjacent, rerank, time_zone),
                ),
            )
        )

    def sessions(self, *, page_size: int = 0) -> AsyncIterator[m.Session]:
        """Every session this peer has been a member of, by id."""
        return self._t.pages(
            lambda token: Call(
                SessionServiceStub,
                "ListSessions",
                se.ListSessionsRequest(workspace_id=self.workspace_id, peer_id=self.id, page=_page(page_size, token)),
                c.page_of("sessions"),
            )
        )

    async def schedule_dream(self, *, target: str | AsyncPeer | None = None, reason: str = "") -> m.Written:
        """Ask for a dream (consolidation) of what this peer knows about `target` now."""
        return await self._t.unary(
            Call(
                DreamServiceStub,
                "ScheduleDream",
                dreams_pb2.ScheduleDreamRequest(
                    workspace_id=self.workspace_id, observer_id=self.id, observed_id=c.id_of(target), reason=reason
                ),
                c.to_model,
            )
        )

    async def dreams(self, *, target: str | AsyncPeer | None = None, limit: int = 0) -> tuple[m.Dream, ...]:
        """The dreams of the pair, newest first (limit 0: 20)."""
        return await self._t.unary(
            Call(
                DreamServiceStub,
                "ListDreams",
                dreams_pb2.ListDreamsRequest(
                    workspace_id=self.workspace_id, observer_id=self.id, observed_id=c.id_of(target), limit=limit
                ),
                c.items_of("dreams"),
            )
        )


class AsyncSession(_AsyncHandle):
    """A conversation: its members, messages, summaries and context."""

    info: m.Session
    _id_field = "session_id"

    async def refresh(self) -> m.Session:
        self.info = await self._t.unary(
            Call(
                SessionServiceStub,
                "GetSession",
                se.GetSessionRequest(workspace_id=self.workspace_id, session_id=self.id),
                c.to_model,
            )
        )
        return self.info

    async def add_messages(
        self, messages: Iterable[m.NewMessage | tuple[str | AsyncPeer, str]], *, idempotency_key: str = ""
    ) -> m.AddedMessages:
        """Append 1-100 turns atomically (NewMessage, peer.message(...), or (peer, text) pairs); each author
        must be a current member. The client's next reads see them. The call is retried under one
        idempotency key (a fresh one unless given: pass your own to repeat the write safely later)."""
        return await self._t.unary(
            Call(
                MessageServiceStub,
                "AddMessages",
                ms.AddMessagesRequest(
                    workspace_id=self.workspace_id,
                    session_id=self.id,
                    messages=[_new_message(x) for x in messages],
                    idempotency_key=idempotency_key,
                ),
                c.to_model,
            )
        )

    async def set_configuration(self, configuration: m.Configuration) -> m.Written:
        """Set the session level of the configuration (replacing it whole); applies to the session's
        messages accepted after the reply."""
        return await self._t.unary(
            _set_configuration(
                "SetSessionConfiguration",
                cf.SetSessionConfigurationRequest(workspace_id=self.workspace_id, session_id=self.id),
                configuration,
            )
        )

    async def set_message_configuration(self, message_id: str, configuration: m.Configuration) -> m.Written:
        """Set one message's own level after it was sent (replacing it whole); the message was processed
        under the level it had, reads of its settings see this one from now."""
        return await self._t.unary(
            _set_configuration(
                "SetMessageConfiguration",
                cf.SetMessageConfigurationRequest(
                    workspace_id=self.workspace_id, session_id=self.id, message_id=message_id
                ),
                configuration,
            )
        )

    async def configuration(self, *, as_of: datetime | None = None) -> m.EffectiveConfiguration:
        """The settings in force for the session (at `as_of`; None: now) and the level of each."""
        return await self._t.unary(_effective(self.workspace_id, self.id, as_of=as_of))

    def messages(self, *, reverse: bool = False, page_size: int = 0) -> AsyncIterator[m.Message]:
        """Every message of the session in order (reverse: newest first)."""
        return self._t.pages(
            lambda token: Call(
                MessageServiceStub,
                "ListMessages",
                ms.ListMessagesRequest(
                    workspace_id=self.workspace_id, session_id=self.id, reverse=reverse, page=_page(page_size, token)
                ),
                c.page_of("messages"),
            )
        )

    async def context(
        self,
        *,
        tokens: int = 0,
        search_query: str = "",
        observer: str | AsyncPeer | None = None,
        target: str | AsyncPeer | None = None,
        assistant: str | AsyncPeer | None = None,
        include_summary: bool | None = None,
        search_top_k: int = 0,
        search_max_distance: float = 0.0,
        include_most_reinforced: bool | None = None,
        max_observations: int = 0,
        sessions: Iterable[str | AsyncSession] = (),
        as_of: datetime | None = None,
        scope: str | m.Scope | None = None,
        perspective: str | AsyncPeer | None = None,
        time_zone: str = "",
    ) -> m.Context:
        """A context of at most `tokens` (0: 100,000): what `observer` knows about `target` (None: itself)
        and its card, a summary, with `search_query` the most relevant past messages, then the most recent
        turns. assistant: the peer whose turns are the model's own in to_openai()/to_anthropic().
        as_of: the context as it stood then. scope: recall (representation, relevant messages) only from
        the scope's sessions. perspective: pack only messages this peer saw (the observer's knowledge
        still answers). time_zone: an IANA name whose days `search_query`'s time words mean (default UTC)."""
        assistant_id = c.id_of(assistant)
        packed = await self._t.unary(
            Call(
                ContextServiceStub,
                "GetContext",
                context_pb2.GetContextRequest(
                    workspace_id=self.workspace_id,
                    session_id=self.id,
                    token_budget=tokens,
                    include_summary=include_summary,
                    observer_id=c.id_of(observer),
                    target_id=c.id_of(target),
                    search_query=search_query,
                    search_top_k=search_top_k,
                    search_max_distance=search_max_distance,
                    include_most_reinforced=include_most_reinforced,
                    max_observations=max_observations,
                    assistant_peer_id=assistant_id,
                    session_ids=c.ids(sessions),
                    as_of=c.timestamp(as_of),
                    scope_id=_scope_id(scope),
                    perspective_peer_id=c.id_of(perspective),
                    time_zone=time_zone,
                ),
                c.to_model,
            )
        )
        return c.with_assistant(c.in_time_zone(packed, time_zone), assistant_id)

    async def clone(self, new_session_id: str, *, up_to: str = "") -> m.ClonedSession:
        """Copy this session's messages (up to and including message `up_to`; empty: all) into a new session,
        with the joins, leaves and settings that came among them; each copy names where it was first sent.
        Copies what this client wrote to the session. Observations are not copied."""
        return await self._t.unary(
            Call(
                SessionServiceStub,
                "CloneSession",
                se.CloneSessionRequest(
                    workspace_id=self.workspace_id,
                    session_id=self.id,
                    new_session_id=new_session_id,
                    up_to_message_id=up_to,
                ),
                c.to_model,
            )
        )

    async def upload_file(
        self,
        file_name: str,
        data: bytes,
        *,
        author: str | AsyncPeer,
        idempotency_key: str = "",
        timeout: float | None = None,
    ) -> m.AddedMessages:
        """Append a text, Markdown, JSON or PDF file (≤ 32 MiB; the suffix of `file_name` says which) as
        `author`'s messages, split on paragraph and sentence boundaries, in one transaction. Sent in pieces
        of 1 MiB; retried whole under one idempotency key, like add_messages."""
        pieces = [data[i : i + PIECE_BYTES] for i in range(0, len(data), PIECE_BYTES)] or [b""]
        first = ms.UploadFileRequest(
            workspace_id=self.workspace_id,
            session_id=self.id,
            peer_id=c.id_of(author),
            file_name=file_name,
            idempotency_key=idempotency_key,
            data=pieces[0],
        )
        return await self._t.unary(
            Call(MessageServiceStub, "UploadFile", first, c.to_model),
            timeout,
            [ms.UploadFileRequest(data=p) for p in pieces[1:]],
        )

    async def summaries(self) -> m.SessionSummaries:
        """The latest short and long rolling summaries (each None until written)."""
        return await self._t.unary(
            Call(
                SessionServiceStub,
                "GetSessionSummaries",
                se.GetSessionSummariesRequest(workspace_id=self.workspace_id, session_id=self.id),
                c.to_model,
            )
        )

    async def search(
        self,
        query: str,
        *,
        authors: Iterable[str | AsyncPeer] = (),
        perspective: str | AsyncPeer | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        limit: int = 0,
        include_adjacent: bool = False,
        rerank: bool = False,
        time_zone: str = "",
    ) -> m.SearchHits:
        """The session's messages by meaning and words, best first."""
        return await self._t.unary(
            _searched(
                SessionServiceStub,
                se.SearchSessionMessagesRequest(
                    workspace_id=self.workspace_id,
                    session_id=self.id,
                    query=query,
                    author_peer_ids=c.ids(authors),
                    **_search_filters(perspective, after, before, limit, include_adjacent, rerank, time_zone),
                ),
            )
        )

    async def add_members(self, *members: str | AsyncPeer | m.MemberSpec) -> m.Session:
        """Add peers (AlreadyExists if one is a member now); returns the session as it is now."""
        self.info = await self._t.unary(
            Call(
                SessionServiceStub,
                "AddMembers",
                se.AddMembersRequest(workspace_id=self.workspace_id, session_id=self.id, members=_members(members)),
                c.field_of("session"),
            )
        )
        return self.info

    async def remove_members(self, *peers: str | AsyncPeer) -> m.Session:
        """Remove current members (FailedPrecondition for a non-member); returns the session as it is now."""
        self.info = await self._t.unary(
            Call(
                SessionServiceStub,
                "RemoveMembers",
                se.RemoveMembersRequest(workspace_id=self.workspace_id, session_id=self.id, peer_ids=c.ids(peers)),
                c.field_of("session"),
            )
        )
        return self.info
