"""Thin gRPC servicers: proto in, one service call, proto out. Errors map in errors.py."""

from __future__ import annotations

from peerlog.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    configuration_pb2,
    configuration_pb2_grpc,
    context_pb2_grpc,
    dialectic_pb2_grpc,
    dreams_pb2,
    dreams_pb2_grpc,
    messages_pb2,
    messages_pb2_grpc,
    observations_pb2,
    observations_pb2_grpc,
    peers_pb2,
    peers_pb2_grpc,
    scopes_pb2,
    scopes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from services.api import (
    audit,
    cards,
    chat,
    clones,
    configurations,
    context_reads,
    convert_audit,
    convert_chat,
    convert_configuration,
    convert_context,
    dreams,
    message_reads,
    observation_reads,
    observation_writes,
    reads,
    scopes,
    uploads,
    writes,
)
from services.api import convert as c
from services.api.auth import visible_workspaces
from services.api.deps import ApiDeps
from services.api.slots import holding


class WorkspaceServicer(workspaces_pb2_grpc.WorkspaceServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def GetOrCreateWorkspace(self, request, context):
        w = await writes.get_or_create_workspace(
            self.ctx,
            request.workspace_id,
            c.metadata(request.metadata),
            convert_configuration.optional_configuration(request, "configuration"),
        )
        return workspaces_pb2.GetOrCreateWorkspaceResponse(
            workspace=c.workspace(w.row), created=w.created, consistency_token=w.token
        )

    async def GetWorkspace(self, request, context):
        row = await reads.get_workspace(self.ctx, request.workspace_id, request.consistency.consistency_token)
        return c.workspace(row)

    async def ListWorkspaces(self, request, context):
        page = await reads.list_workspaces(
            self.ctx,
            request.page.page_size,
            request.page.page_token,
            request.consistency.consistency_token,
            visible_workspaces(),
        )
        return workspaces_pb2.ListWorkspacesResponse(
            workspaces=[c.workspace(r) for r in page.items], next_page_token=page.next_token
        )

    async def SearchMessages(self, request, context):
        return await _search_messages(self.ctx, request, c.message_query(request))


class PeerServicer(peers_pb2_grpc.PeerServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def GetOrCreatePeer(self, request, context):
        observe_me = request.observe_me if request.HasField("observe_me") else None
        w = await writes.get_or_create_peer(
            self.ctx, request.workspace_id, request.peer_id, observe_me, c.metadata(request.metadata)
        )
        return peers_pb2.GetOrCreatePeerResponse(peer=c.peer(w.row), created=w.created, consistency_token=w.token)

    async def SetPeerMetadata(self, request, context):
        w = await writes.set_peer_metadata(
            self.ctx, request.workspace_id, request.peer_id, c.metadata(request.metadata)
        )
        return peers_pb2.SetPeerMetadataResponse(peer=c.peer(w.row), consistency_token=w.token)

    async def GetPeer(self, request, context):
        return c.peer(
            await reads.get_peer(self.ctx, request.workspace_id, request.peer_id, request.consistency.consistency_token)
        )

    async def ListPeers(self, request, context):
        page = await reads.list_peers(
            self.ctx,
            request.workspace_id,
            request.page.page_size,
            request.page.page_token,
            request.consistency.consistency_token,
        )
        return peers_pb2.ListPeersResponse(peers=[c.peer(r) for r in page.items], next_page_token=page.next_token)

    async def GetPeerCard(self, request, context):
        return c.peer_card(
            await cards.get_peer_card(
                self.ctx,
                request.workspace_id,
                request.observer_id,
                request.observed_id,
                request.consistency.consistency_token,
                c.as_of(request),
            )
        )

    async def SetPeerCard(self, request, context):
        card, token = await cards.set_peer_card(
            self.ctx, request.workspace_id, request.observer_id, request.observed_id, list(request.entries)
        )
        return peers_pb2.SetPeerCardResponse(card=c.peer_card(card), consistency_token=token)

    async def SearchMessages(self, request, context):
        return await _search_messages(self.ctx, request, c.message_query(request, author_ids=(request.peer_id,)))


class SessionServicer(sessions_pb2_grpc.SessionServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def GetOrCreateSession(self, request, context):
        w = await writes.get_or_create_session(
            self.ctx,
            request.workspace_id,
            request.session_id,
            c.metadata(request.metadata),
            [c.member_spec(m) for m in request.members],
            convert_configuration.optional_configuration(request, "configuration"),
        )
        view = await reads.get_session(self.ctx, request.workspace_id, request.session_id, "")
        return sessions_pb2.GetOrCreateSessionResponse(
            session=c.session(view), created=w.created, consistency_token=w.token
        )

    async def AddMembers(self, request, context):
        w = await writes.add_members(
            self.ctx, request.workspace_id, request.session_id, [c.member_spec(m) for m in request.members]
        )
        return await self._membership(request, w.token)

    async def RemoveMembers(self, request, context):
        w = await writes.remove_members(self.ctx, request.workspace_id, request.session_id, list(request.peer_ids))
        return await self._membership(request, w.token)

    async def _membership(self, request, token: str):
        view = await reads.get_session(self.ctx, request.workspace_id, request.session_id, "")
        return sessions_pb2.MembershipResponse(session=c.session(view), consistency_token=token)

    async def GetSession(self, request, context):
        return c.session(
            await reads.get_session(
                self.ctx, request.workspace_id, request.session_id, request.consistency.consistency_token
            )
        )

    async def ListSessions(self, request, context):
        page = await reads.list_sessions(
            self.ctx,
            request.workspace_id,
            request.peer_id,
            request.page.page_size,
            request.page.page_token,
            request.consistency.consistency_token,
        )
        return sessions_pb2.ListSessionsResponse(
            sessions=[c.session(s) for s in page.items], next_page_token=page.next_token
        )

    async def GetSessionSummaries(self, request, context):
        return c.session_summaries(
            await reads.get_session_summaries(
                self.ctx, request.workspace_id, request.session_id, request.consistency.consistency_token
            )
        )

    async def SearchMessages(self, request, context):
        return await _search_messages(self.ctx, request, c.message_query(request, session_ids=(request.session_id,)))

    async def CloneSession(self, request, context):
        written, ids = await clones.clone_session(
            self.ctx, c.clone_request(request), request.consistency.consistency_token
        )
        view = await reads.get_session(self.ctx, request.workspace_id, request.new_session_id, "")
        return sessions_pb2.CloneSessionResponse(
            session=c.session(view), message_ids=ids, consistency_token=written.token
        )


async def _search_messages(ctx: ApiDeps, request, query):
    """The one implementation behind WorkspaceService, SessionService and PeerService.SearchMessages."""
    found = await message_reads.search(
        ctx, query, request.consistency.consistency_token, getattr(request, "scope_id", ""), request.rerank
    )  # SessionService's has no scope_id
    return c.search_messages_response(found.hits, found.adjacent, ctx.embedder.model_name)


class MessageServicer(messages_pb2_grpc.MessageServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def AddMessages(self, request, context):
        new = [c.new_message(m, i) for i, m in enumerate(request.messages)]
        ids, token = await writes.add_messages(
            self.ctx, request.workspace_id, request.session_id, new, request.idempotency_key
        )
        return messages_pb2.AddMessagesResponse(message_ids=ids, consistency_token=token)

    async def ListMessages(self, request, context):
        page = await reads.list_messages(
            self.ctx,
            request.workspace_id,
            request.session_id,
            request.page.page_size,
            request.page.page_token,
            request.reverse,
            request.consistency.consistency_token,
        )
        return messages_pb2.ListMessagesResponse(
            messages=[c.message(r) for r in page.items], next_page_token=page.next_token
        )

    async def UploadFile(self, request_iterator, context):
        ids, token = await uploads.upload_file(self.ctx, *await c.upload(request_iterator))
        return messages_pb2.UploadFileResponse(message_ids=ids, consistency_token=token)

    async def GetMessage(self, request, context):
        return c.message(
            await reads.get_message(
                self.ctx, request.workspace_id, request.message_id, request.consistency.consistency_token
            )
        )


class ConfigurationServicer(configuration_pb2_grpc.ConfigurationServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def SetWorkspaceConfiguration(self, request, context):
        token = await configurations.set_workspace(
            self.ctx, request.workspace_id, convert_configuration.configuration(request.configuration)
        )
        return configuration_pb2.SetConfigurationResponse(consistency_token=token)

    async def SetSessionConfiguration(self, request, context):
        token = await configurations.set_session(
            self.ctx,
            request.workspace_id,
            request.session_id,
            convert_configuration.configuration(request.configuration),
        )
        return configuration_pb2.SetConfigurationResponse(consistency_token=token)

    async def SetMessageConfiguration(self, request, context):
        token = await configurations.set_message(
            self.ctx,
            request.workspace_id,
            request.session_id,
            request.message_id,
            convert_configuration.configuration(request.configuration),
            request.consistency.consistency_token,
        )
        return configuration_pb2.SetConfigurationResponse(consistency_token=token)

    async def GetEffectiveConfiguration(self, request, context):
        return convert_configuration.effective(
            await configurations.effective(
                self.ctx,
                request.workspace_id,
                request.session_id,
                request.message_id,
                c.as_of(request),
                request.consistency.consistency_token,
            )
        )


class ObservationServicer(observations_pb2_grpc.ObservationServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def ListObservations(self, request, context):
        page = await observation_reads.list_observations(
            self.ctx,
            c.list_filter(request),
            request.page.page_size,
            request.page.page_token,
            request.reverse,
            request.consistency.consistency_token,
            f"{request.as_of.seconds}.{request.as_of.nanos}" if request.HasField("as_of") else "",
        )
        return observations_pb2.ListObservationsResponse(
            observations=[c.observation(v) for v in page.items], next_page_token=page.next_token
        )

    async def GetObservation(self, request, context):
        return c.observation(
            await observation_reads.get_observation(
                self.ctx, request.workspace_id, request.observation_id, request.consistency.consistency_token
            )
        )

    async def SearchObservations(self, request, context):
        found, truncated = await observation_reads.search_observations(
            self.ctx, c.search_query(request), request.consistency.consistency_token
        )
        return observations_pb2.SearchObservationsResponse(
            results=[c.match(v) for v in found],
            embedding_model=self.ctx.embedder.model_name,
            truncated=truncated,
        )

    async def CreateObservations(self, request, context):
        ids, token = await observation_writes.create_observations(
            self.ctx,
            request.workspace_id,
            request.observer_id,
            request.observed_id,
            [c.new_observation(o) for o in request.observations],
            request.idempotency_key,
            request.consistency.consistency_token,
        )
        return observations_pb2.CreateObservationsResponse(observation_ids=ids, consistency_token=token)

    async def DeleteObservation(self, request, context):
        token = await observation_writes.delete_observation(
            self.ctx,
            request.workspace_id,
            request.observation_id,
            request.reason,
            request.consistency.consistency_token,
        )
        return observations_pb2.DeleteObservationResponse(consistency_token=token)

    async def GetProcessingStatus(self, request, context):
        status = await observation_reads.processing_status(
            self.ctx, c.status_scope(request), request.consistency.consistency_token
        )
        return c.processing_status(status)


class ContextServicer(context_pb2_grpc.ContextServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def GetContext(self, request, context):
        packed = await context_reads.get_context(
            self.ctx, convert_context.context_query(request), request.consistency.consistency_token
        )
        return convert_context.context_response(packed, request.assistant_peer_id)

    async def GetRepresentation(self, request, context):
        observations, truncated = await context_reads.get_representation(
            self.ctx, convert_context.representation_query(request), request.consistency.consistency_token
        )
        return convert_context.representation_response(observations, truncated)


class DreamServicer(dreams_pb2_grpc.DreamServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def ScheduleDream(self, request, context):
        token = await dreams.schedule_dream(
            self.ctx, request.workspace_id, request.observer_id, request.observed_id, request.reason
        )
        return dreams_pb2.ScheduleDreamResponse(consistency_token=token)

    async def ListDreams(self, request, context):
        rows = await dreams.list_dreams(
            self.ctx,
            request.workspace_id,
            request.observer_id,
            request.observed_id,
            request.limit,
            request.consistency.consistency_token,
        )
        return dreams_pb2.ListDreamsResponse(dreams=[c.dream(r) for r in rows])


class AuditServicer(audit_pb2_grpc.AuditServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def GetProvenance(self, request, context):
        found = await audit.get_provenance(
            self.ctx, request.workspace_id, request.observation_id, request.consistency.consistency_token
        )
        return convert_audit.provenance(found)

    async def GetObservationHistory(self, request, context):
        found = await audit.get_observation_history(
            self.ctx,
            request.workspace_id,
            request.observation_id,
            request.consistency.consistency_token,
            request.limit,
            request.page_token,
        )
        return audit_pb2.GetObservationHistoryResponse(
            entries=[convert_audit.history_entry(r) for r in found.items], next_page_token=found.next_token
        )

    async def ListRejectedObservations(self, request, context):
        rejected = await audit.list_rejected(
            self.ctx,
            audit.RejectionFilter(
                request.workspace_id,
                request.observer_id,
                request.observed_id,
                request.dream_id,
                request.limit,
                request.page_token,
            ),
            request.consistency.consistency_token,
        )
        return audit_pb2.ListRejectedObservationsResponse(
            rejections=[convert_audit.rejection(r) for r in rejected.items], next_page_token=rejected.next_token
        )


class ScopeServicer(scopes_pb2_grpc.ScopeServiceServicer):
    def __init__(self, ctx: ApiDeps) -> None:
        self.ctx = ctx

    async def CreateScope(self, request, context):
        view, token = await scopes.create_scope(
            self.ctx, request.workspace_id, request.scope_id, request.name, list(request.session_ids)
        )
        return scopes_pb2.CreateScopeResponse(scope=c.scope(view), consistency_token=token)

    async def ListScopes(self, request, context):
        listed = await scopes.list_scopes(
            self.ctx,
            request.workspace_id,
            request.page.page_size,
            request.page.page_token,
            request.consistency.consistency_token,
        )
        return scopes_pb2.ListScopesResponse(
            scopes=[c.scope(v) for v in listed.items], next_page_token=listed.next_token
        )

    async def GetScope(self, request, context):
        return c.scope(
            await scopes.get_scope(
                self.ctx,
                request.workspace_id,
                request.scope_id,
                c.as_of(request),
                request.consistency.consistency_token,
            )
        )

    async def AddScopeSessions(self, request, context):
        return await self._change(request, add=True)

    async def RemoveScopeSessions(self, request, context):
        return await self._change(request, add=False)

    async def _change(self, request, add: bool):
        view, token = await scopes.change_sessions(
            self.ctx, request.workspace_id, request.scope_id, list(request.session_ids), add
        )
        return scopes_pb2.ScopeSessionsResponse(scope=c.scope(view), consistency_token=token)


class DialecticServicer(dialectic_pb2_grpc.DialecticServiceServicer):
    def __init__(self, ctx: ApiDeps, per_workspace: int = 16) -> None:
        self.ctx, self.running = ctx, chat.running_chats(per_workspace)

    async def Chat(self, request, context):
        with holding((self.running, request.workspace_id)):
            result = await chat.chat(
                self.ctx,
                convert_chat.chat_request(request),
                request.consistency.consistency_token,
                context.time_remaining(),
            )
        return convert_chat.chat_response(result)

    async def ChatStream(self, request, context):
        with holding((self.running, request.workspace_id)):
            async for event in chat.chat_stream(
                self.ctx,
                convert_chat.chat_request(request),
                request.consistency.consistency_token,
                context.time_remaining(),
            ):
                yield convert_chat.chat_chunk(event)
