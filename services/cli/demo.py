"""`make demo`: start the local stack, talk to it through the gRPC API, print what comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import typer

from peerlog.v1 import (
    common_pb2,
    messages_pb2,
    messages_pb2_grpc,
    peers_pb2,
    peers_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    workspaces_pb2,
    workspaces_pb2_grpc,
)

SCRIPT = [
    ("alice", "Hi! I'm planning a trip to Lisbon in May with my sister Maya."),
    ("assistant", "Lovely. How long will you stay, and what do you enjoy doing when you travel?"),
    ("alice", "Five days. I love old bookshops and I don't eat meat, so food tips should be vegetarian."),
    ("assistant", "Noted: vegetarian. Livraria Bertrand in Chiado is the oldest bookshop still open."),
    ("alice", "Perfect. Maya is afraid of heights, so skip anything like the Santa Justa lift."),
    ("assistant", "Understood. The tram 28 route gives views without heights."),
    ("alice", "Great. Also, I work remotely as a data engineer, so I need decent wifi."),
]


async def converse(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        ws, peers = workspaces_pb2_grpc.WorkspaceServiceStub(ch), peers_pb2_grpc.PeerServiceStub(ch)
        sessions, msgs = sessions_pb2_grpc.SessionServiceStub(ch), messages_pb2_grpc.MessageServiceStub(ch)
        await ws.GetOrCreateWorkspace(workspaces_pb2.GetOrCreateWorkspaceRequest(workspace_id="demo"))
        await peers.GetOrCreatePeer(peers_pb2.GetOrCreatePeerRequest(workspace_id="demo", peer_id="alice"))
        await peers.GetOrCreatePeer(peers_pb2.GetOrCreatePeerRequest(
            workspace_id="demo", peer_id="assistant", observe_me=False))
        await sessions.GetOrCreateSession(sessions_pb2.GetOrCreateSessionRequest(
            workspace_id="demo", session_id="lisbon-trip",
            members=[sessions_pb2.MemberSpec(peer_id="alice"),
                     sessions_pb2.MemberSpec(peer_id="assistant", observe_others=True)]))
        added = await msgs.AddMessages(messages_pb2.AddMessagesRequest(
            workspace_id="demo", session_id="lisbon-trip",
            messages=[messages_pb2.NewMessage(peer_id=p, content=t) for p, t in SCRIPT]))
        typer.echo(f"\nAddMessages: {len(added.message_ids)} messages acknowledged by the log "
                   f"(consistency token {added.consistency_token})")
        listed = await msgs.ListMessages(messages_pb2.ListMessagesRequest(
            workspace_id="demo", session_id="lisbon-trip",
            consistency=common_pb2.ReadConsistency(consistency_token=added.consistency_token)))
        session = await sessions.GetSession(sessions_pb2.GetSessionRequest(
            workspace_id="demo", session_id="lisbon-trip"))
    _print(session, listed.messages)


def _print(session, messages) -> None:
    typer.echo(f"\nSession {session.session_id!r}: {session.message_count} messages, members:")
    for m in session.memberships:
        flags = f"observe_others={m.observe_others}"
        typer.echo(f"  - {m.peer_id:<10} joined {m.joined_at.ToDatetime():%H:%M:%S}  {flags}")
    typer.echo("\nRead back from the projections:")
    for m in messages:
        typer.echo(f"  #{m.seq:<2} {m.peer_id:>9}: {m.content}")


def run_demo(root: Path) -> None:
    from infra.stack import down, up

    typer.echo("Starting the local stack (first run resolves Kafka's jars and may take a minute)…")
    state = up(root, progress=lambda line: typer.echo(f"  {line}"))
    try:
        asyncio.run(converse(state.api_port))
    finally:
        typer.echo("\nStopping the local stack…")
        down(root, progress=lambda line: typer.echo(f"  {line}"))
