"""The one table of what every RPC touches, read from its request: what a token needs to make the call.

A rule returns needs that must all be met; a need is a tuple of resources of which the token must
cover one (tokens.Grant.covers: admin, the workspace, or the resource's own peer or session scope).
A peer token reaches only what that peer may see: its own record, the stores it observes (Chat and
GetContext answer from its perspective only), its own messages, and others' through a perspective filter
set to it.
Anything addressed by an observation or message id alone needs the workspace: the id does not say
whose it is. tests/unit/test_access_table.py fails when an RPC of the proto services is missing here.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import Message

from services.api.tokens import Resource, peer, session, workspace

Need = tuple[Resource, ...]  # any one of these
Rule = Callable[[Message], list[Need]]  # every one of these


def _workspace(r) -> list[Need]:
    return [(workspace(r.workspace_id),)]


def _session(r) -> list[Need]:
    return [(session(r.workspace_id, r.session_id),)]


def _peer(field: str) -> Rule:
    """The peer named by `field` (an observer: the store it observes)."""
    return lambda r: [(peer(r.workspace_id, getattr(r, field)),)]


def _peer_or_workspace(field: str) -> Rule:
    """The peer named by `field`; the whole workspace when it is empty (the list spans every peer)."""
    return lambda r: _peer(field)(r) if getattr(r, field) else _workspace(r)


def _or_seen_by(base: Rule) -> Rule:
    """A message search: `base`, or the perspective peer, since then only what it saw is returned."""

    def rule(r) -> list[Need]:
        (need,) = base(r)
        seen = (peer(r.workspace_id, r.perspective_peer_id),) if r.perspective_peer_id else ()
        return [need + seen]

    return rule


def _anyone(r) -> list[Need]:
    return []  # any valid token; what it lists is narrowed to the token (ListWorkspaces)


# what a peer may set on its own messages without the session's scope: opting out, never more. A message's
# level overrides the session's and the workspace's, so anything else would let one member turn reasoning back
# on where an admin turned it off, make the others model it, or put its words into their deriver's prompt
OWN_MESSAGE_SETTINGS = {"reasoning": False, "observe_me": False}


def settings_beyond_opting_out(r) -> list[str]:
    """The message-level settings of an AddMessages that only the session's scope may set."""
    return sorted(
        {
            field.name
            for m in r.messages
            if m.HasField("configuration")
            for field, value in m.configuration.ListFields()
            if OWN_MESSAGE_SETTINGS.get(field.name) is not value
        }
    )


def _add_messages(r) -> list[Need]:
    # a peer may write into a session as itself (the server still requires it to be a member)
    authors = {m.peer_id for m in r.messages}
    as_itself = len(authors) == 1 and not settings_beyond_opting_out(r)
    own = tuple(peer(r.workspace_id, a) for a in authors) if as_itself else ()
    return [(session(r.workspace_id, r.session_id), *own)]


def _peer_search(r) -> list[Need]:
    # its own messages need only the author's scope, but the turns around them (include_adjacent) are
    # others' words, which a peer token reads only through a perspective filter set to itself
    return _or_seen_by(_workspace if r.include_adjacent else _peer("peer_id"))(r)


def _processing_status(r) -> list[Need]:
    # narrowed to an observer and/or a session, the status reads only what that peer perceived and that
    # session holds (status_reads.StatusScope): with both, a token must cover both
    needs = ([(peer(r.workspace_id, r.observer_id),)] if r.observer_id else []) + (_session(r) if r.session_id else [])
    return needs or _workspace(r)


def _context(r) -> list[Need]:
    w, summary = r.workspace_id, r.include_summary if r.HasField("include_summary") else True
    if r.observer_id:  # its store and card; the session's turns and relevant messages from its perspective
        needs = [(peer(w, r.observer_id),)]
    elif r.search_query:  # relevant messages from every session, seen by no one in particular
        needs = _workspace(r)
    else:  # the session's turns as they are
        needs = _session(r) if r.session_id else _workspace(r)
    if r.session_id and summary:  # a summary covers the whole session, turns its reader may not have seen
        needs.append(_session(r)[0])
    return needs + _perspective(r)  # the messages packed are the ones that peer saw


_OBSERVER = _peer("observer_id")


def _perspective(r) -> list[Need]:
    """Chat and GetContext with a perspective peer read the messages it saw: the token must cover it too."""
    return _peer("perspective_peer_id")(r) if r.perspective_peer_id else []


def _chat(r) -> list[Need]:
    # its store is the observer's; the messages it reads, the perspective peer's when one is named
    return _OBSERVER(r) + _perspective(r)


_OBSERVER_OR_WORKSPACE = _peer_or_workspace("observer_id")

RULES: dict[str, dict[str, Rule]] = {
    "WorkspaceService": {
        "GetOrCreateWorkspace": _workspace,
        "GetWorkspace": _workspace,
        "ListWorkspaces": _anyone,
        "SearchMessages": _or_seen_by(_workspace),
    },
    "PeerService": {
        "GetOrCreatePeer": _peer("peer_id"),
        "SetPeerMetadata": _peer("peer_id"),
        "GetPeer": _peer("peer_id"),
        "ListPeers": _workspace,
        "GetPeerCard": _OBSERVER,
        "SetPeerCard": _OBSERVER,
        "SearchMessages": _peer_search,
    },
    "SessionService": {
        "GetOrCreateSession": _session,
        "AddMembers": _session,
        "RemoveMembers": _session,
        "GetSession": _session,
        "ListSessions": _peer_or_workspace("peer_id"),
        "GetSessionSummaries": _session,
        "SearchMessages": _or_seen_by(_session),
        # reads the source and creates the new session: both sessions' scope
        "CloneSession": lambda r: [*_session(r), (session(r.workspace_id, r.new_session_id),)],
    },
    "MessageService": {
        "AddMessages": _add_messages,
        "ListMessages": _session,
        "GetMessage": _workspace,
        # admitted by its first request (auth.py): the session, or the author writing as itself
        "UploadFile": lambda r: [(session(r.workspace_id, r.session_id), peer(r.workspace_id, r.peer_id))],
    },
    "ConfigurationService": {
        "SetWorkspaceConfiguration": _workspace,
        "SetSessionConfiguration": _session,
        "SetMessageConfiguration": _session,
        # a message's levels include its workspace's and session's: the id does not say whose
        "GetEffectiveConfiguration": lambda r: _workspace(r) if r.message_id or not r.session_id else _session(r),
    },
    "ObservationService": {
        "ListObservations": _OBSERVER_OR_WORKSPACE,
        "GetObservation": _workspace,
        "SearchObservations": _OBSERVER,
        "CreateObservations": _OBSERVER,
        "DeleteObservation": _workspace,
        "GetProcessingStatus": _processing_status,
    },
    "ContextService": {
        "GetContext": _context,
        "GetRepresentation": _OBSERVER,
    },
    "DialecticService": {
        "Chat": _chat,
        "ChatStream": _chat,
    },
    "DreamService": {
        "ScheduleDream": _OBSERVER,
        "ListDreams": _OBSERVER_OR_WORKSPACE,
    },
    "AuditService": {
        "GetProvenance": _workspace,
        "GetObservationHistory": _workspace,
        "ListRejectedObservations": _OBSERVER_OR_WORKSPACE,
    },
    "EventService": {
        "Subscribe": _workspace,  # every event of the workspace, whoever it is about
    },
    "WebhookService": {  # a webhook receives every event of the workspace it names
        "CreateWebhook": _workspace,
        "ListWebhooks": _workspace,
        "DeleteWebhook": _workspace,
        "ListWebhookDeadLetters": _workspace,
        "RetryWebhookDeadLetter": _workspace,
    },
    # a scope names sessions across the workspace; a read given a scope_id only narrows what its own
    # rule already allows, so the reads need nothing more
    "ScopeService": {
        "CreateScope": _workspace,
        "ListScopes": _workspace,
        "GetScope": _workspace,
        "AddScopeSessions": _workspace,
        "RemoveScopeSessions": _workspace,
    },
}
PACKAGE = "peerlog.v1"


def rule_for(method: str) -> Rule | None:
    """The rule of a gRPC method path such as '/peerlog.v1.PeerService/GetPeer'; None when it has none."""
    service, _, name = method.lstrip("/").rpartition("/")
    package, _, short = service.rpartition(".")
    return RULES.get(short, {}).get(name) if package == PACKAGE else None


def hint(method: str, request) -> str:
    """What would make a refused call pass that the scope it needs does not say."""
    if method.endswith("/SearchMessages") and not request.perspective_peer_id:
        return "; a peer token may search with perspective_peer_id set to its peer (what that peer saw)"
    if method.endswith("/AddMessages") and (beyond := settings_beyond_opting_out(request)):
        return (
            f"; a peer token may set on its own messages only reasoning=false and observe_me=false, "
            f"not {', '.join(beyond)}"
        )
    return ""


def need_text(need: Need) -> str:
    """'peer:w/p or session:w/s (or workspace:w, or admin)': the scopes that meet a need."""
    own = [r.scope for r in need if r.kind != "workspace"]
    wide = sorted({workspace(r.workspace).scope for r in need})
    return " or ".join([*own, *wide][:4]) + " (or admin)"
