"""The proto-level client the demo, the CLI, the benches and the tests share: one stub per service, and a few
helpers that build the common requests and return the reply protos.

Not the published library (clients/python/peerlog_client): tests assert on the wire-level protos and benches
measure the server, so neither should go through the library's conversion to models.
"""

from __future__ import annotations

import grpc

from peerlog.v1 import (
    audit_pb2_grpc,
    common_pb2,
    configuration_pb2_grpc,
    context_pb2_grpc,
    dialectic_pb2_grpc,
    dreams_pb2_grpc,
    events_pb2_grpc,
    messages_pb2,
    messages_pb2_grpc,
    observations_pb2,
    observations_pb2_grpc,
    peers_pb2,
    peers_pb2_grpc,
    scopes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    webhooks_pb2_grpc,
    workspaces_pb2,
    workspaces_pb2_grpc,
)


class Client:
    """The stubs work over an asyncio or a blocking channel; the helpers below await, so they need asyncio."""

    def __init__(self, channel: grpc.aio.Channel | grpc.Channel) -> None:
        self.workspaces = workspaces_pb2_grpc.WorkspaceServiceStub(channel)
        self.peers = peers_pb2_grpc.PeerServiceStub(channel)
        self.sessions = sessions_pb2_grpc.SessionServiceStub(channel)
        self.messages = messages_pb2_grpc.MessageServiceStub(channel)
        self.observations = observations_pb2_grpc.ObservationServiceStub(channel)
        self.dreams = dreams_pb2_grpc.DreamServiceStub(channel)
        self.audit = audit_pb2_grpc.AuditServiceStub(channel)
        self.context = context_pb2_grpc.ContextServiceStub(channel)
        self.dialectic = dialectic_pb2_grpc.DialecticServiceStub(channel)
        self.configuration = configuration_pb2_grpc.ConfigurationServiceStub(channel)
        self.scopes = scopes_pb2_grpc.ScopeServiceStub(channel)
        self.events = events_pb2_grpc.EventServiceStub(channel)
        self.webhooks = webhooks_pb2_grpc.WebhookServiceStub(channel)

    async def workspace(self, workspace_id: str):
        return await self.workspaces.GetOrCreateWorkspace(
            workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id=workspace_id)
        )

    async def peer(self, workspace_id: str, peer_id: str, **kw):
        return await self.peers.GetOrCreatePeer(
            peers_pb2.GetOrCreatePeerRequest(workspace_id=workspace_id, peer_id=peer_id, **kw)
        )

    async def session(self, workspace_id: str, session_id: str, members=(), **kw):
        specs = [m if isinstance(m, sessions_pb2.MemberSpec) else sessions_pb2.MemberSpec(peer_id=m) for m in members]
        return await self.sessions.GetOrCreateSession(
            sessions_pb2.GetOrCreateSessionRequest(
                workspace_id=workspace_id, session_id=session_id, members=specs, **kw
            )
        )

    async def add(self, workspace_id: str, session_id: str, turns):
        """turns: [(peer_id, content)] or NewMessage protos."""
        msgs = [
            t if isinstance(t, messages_pb2.NewMessage) else messages_pb2.NewMessage(peer_id=t[0], content=t[1])
            for t in turns
        ]
        return await self.messages.AddMessages(
            messages_pb2.AddMessagesRequest(workspace_id=workspace_id, session_id=session_id, messages=msgs)
        )

    async def list_messages(
        self,
        workspace_id: str,
        session_id: str,
        token: str = "",
        page_size: int = 0,
        page_token: str = "",
        reverse: bool = False,
    ):
        return await self.messages.ListMessages(
            messages_pb2.ListMessagesRequest(
                workspace_id=workspace_id,
                session_id=session_id,
                reverse=reverse,
                page=common_pb2.PageRequest(page_size=page_size, page_token=page_token),
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )

    async def all_messages(self, workspace_id: str, session_id: str, token: str = "", page_size: int = 50):
        out, page_token = [], ""
        while True:
            resp = await self.list_messages(workspace_id, session_id, token, page_size, page_token)
            out += resp.messages
            page_token = resp.next_page_token
            if not page_token:
                return out

    async def setup_conversation(self, workspace_id: str, session_id: str, peers=("alice", "bob")):
        await self.workspace(workspace_id)
        for p in peers:
            await self.peer(workspace_id, p)
        return await self.session(workspace_id, session_id, members=peers)

    async def list_observations(
        self,
        workspace_id: str,
        observer_id: str,
        observed_id: str,
        token: str = "",
        page_size: int = 0,
        page_token: str = "",
        **kw,
    ):
        """One page of a pair's observations; kw: levels, session_id, include_superseded/deleted, reverse."""
        return await self.observations.ListObservations(
            observations_pb2.ListObservationsRequest(
                workspace_id=workspace_id,
                observer_id=observer_id,
                observed_id=observed_id,
                page=common_pb2.PageRequest(page_size=page_size, page_token=page_token),
                consistency=common_pb2.ReadConsistency(consistency_token=token),
                **kw,
            )
        )

    async def all_observations(
        self, workspace_id: str, observer_id: str, observed_id: str, token: str = "", page_size: int = 50, **kw
    ):
        """Every observation of a pair the filters in kw let through, following the page tokens."""
        out, page_token = [], ""
        while True:
            resp = await self.list_observations(
                workspace_id, observer_id, observed_id, token, page_size, page_token, **kw
            )
            out += resp.observations
            page_token = resp.next_page_token
            if not page_token:
                return out

    async def get_observation(self, workspace_id: str, observation_id: str, token: str = ""):
        return await self.observations.GetObservation(
            observations_pb2.GetObservationRequest(
                workspace_id=workspace_id,
                observation_id=observation_id,
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )

    async def search_observations(
        self, workspace_id: str, observer_id: str, observed_id: str, query: str, token: str = "", **kw
    ):
        """kw: top_k, max_distance, levels."""
        return await self.observations.SearchObservations(
            observations_pb2.SearchObservationsRequest(
                workspace_id=workspace_id,
                observer_id=observer_id,
                observed_id=observed_id,
                query=query,
                consistency=common_pb2.ReadConsistency(consistency_token=token),
                **kw,
            )
        )

    async def create_observations(self, workspace_id: str, observer_id: str, observed_id: str, items, token=""):
        """items: contents, or NewObservation protos; `token`: checked once the projections include it."""
        new = [
            i if isinstance(i, observations_pb2.NewObservation) else observations_pb2.NewObservation(content=i)
            for i in items
        ]
        return await self.observations.CreateObservations(
            observations_pb2.CreateObservationsRequest(
                workspace_id=workspace_id,
                observer_id=observer_id,
                observed_id=observed_id,
                observations=new,
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )

    async def delete_observation(self, workspace_id: str, observation_id: str, reason: str = ""):
        return await self.observations.DeleteObservation(
            observations_pb2.DeleteObservationRequest(
                workspace_id=workspace_id, observation_id=observation_id, reason=reason
            )
        )

    async def processing_status(self, workspace_id: str, token: str = "", **kw):
        """kw: observer_id, observed_id, session_id."""
        return await self.observations.GetProcessingStatus(
            observations_pb2.GetProcessingStatusRequest(
                workspace_id=workspace_id, consistency=common_pb2.ReadConsistency(consistency_token=token), **kw
            )
        )

    async def session_summaries(self, workspace_id: str, session_id: str, token: str = ""):
        return await self.sessions.GetSessionSummaries(
            sessions_pb2.GetSessionSummariesRequest(
                workspace_id=workspace_id,
                session_id=session_id,
                consistency=common_pb2.ReadConsistency(consistency_token=token),
            )
        )
