"""`peerlog audit`: an observation's premise tree down to its messages, and its history, for a person."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from rich.console import Group
from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from peerlog.v1 import audit_pb2
from services.api.channels import channel
from services.cli.client import Client


def _when(ts) -> str:
    return ts.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if ts.seconds else ""


def _label(o) -> str:
    level = {1: "explicit", 2: "deductive", 3: "inductive", 4: "contradiction"}.get(o.level, "?")
    extra = [
        x
        for x in (
            o.pattern_type,
            f"confidence {o.confidence}" if o.confidence else "",
            f"dream {o.dream_id}" if o.dream_id else "",
        )
        if x
    ]
    state = []
    if o.superseded_by:
        state.append(f"[red]superseded by {escape(o.superseded_by)}[/red]")
    if o.HasField("deleted_at"):
        state.append(f"[red]deleted {_when(o.deleted_at)}: {escape(o.delete_reason)}[/red]")
    if o.HasField("premise_superseded_at"):
        state.append("[yellow]rests on a superseded premise[/yellow]")
    head = f"[bold]{escape(o.content)}[/bold]  [dim]{level}{'; ' + '; '.join(extra) if extra else ''} · {o.observation_id}[/dim]"
    return "  ".join([head, *state])


def _copy_of(m: audit_pb2.SourceMessage) -> str:
    if not m.HasField("origin"):
        return ""
    return f" · copy of {escape(m.origin.message_id)} in session {escape(m.origin.session_id)}"


def provenance_tree(p: audit_pb2.GetProvenanceResponse) -> Tree:
    """The DAG as a tree: a premise shared by two branches is shown under each (marked the second time)."""
    nodes = {n.observation.observation_id: n for n in p.nodes}
    missing = set(p.missing_ids)  # absent from the store; any other absent premise was left out of the reply
    shown: set[str] = set()

    def add(parent: Tree, obs_id: str) -> None:
        node = nodes.get(obs_id)
        if node is None and obs_id in missing:
            parent.add(f"[red]missing premise {escape(obs_id)}[/red]")
            return
        if node is None:
            parent.add(f"[dim]premise {escape(obs_id)} left out: the reply was cut short[/dim]")
            return
        branch = parent.add(_label(node.observation) + ("  [dim](shown above)[/dim]" if obs_id in shown else ""))
        if obs_id in shown:
            return
        shown.add(obs_id)
        for m in node.source_messages:
            # a message always has text: none here is the reply cut short, not a span outside its message
            said = f"“{escape(m.content)}”" if m.content else "[dim](its text left out: the reply was cut short)[/dim]"
            branch.add(
                f"[cyan]{escape(m.peer_id)}[/cyan] [dim]{_when(m.created_at)} · session {escape(m.session_id)}"
                f" · {m.message_id}{_copy_of(m)}[/dim]\n{said}\n[green]span:[/green] “{escape(m.span)}”"
            )
        left = node.observation.source_count - len(node.source_messages)
        if left > 0:  # the first 100 are sent (each reinforcement adds one): say so, or the newest vanish unseen
            branch.add(f"[dim]… {left:,} more source(s) of {node.observation.source_count:,} not shown[/dim]")
        for premise in node.observation.premise_ids:
            add(branch, premise)

    cut = "  [red](cut short at 1,000 premises or 3.5 MB: parts are marked left out)[/red]" if p.truncated else ""
    root = Tree("[bold]provenance[/bold]" + cut)
    add(root, p.root_id)
    return root


def history_tree(entries: Sequence[audit_pb2.HistoryEntry]) -> Tree:
    root = Tree("[bold]history[/bold]")
    for e in entries:
        who = " ".join(
            x for x in (e.producer.component, e.producer.version, e.producer.model, e.producer.prompt_version) if x
        )
        detail = ", ".join(f"{k}={v}" for k, v in sorted(dict(e.detail).items()))
        cause = f" · cause {e.causation_id}" if e.causation_id else ""
        root.add(f"{_when(e.occurred_at)}  [bold]{e.kind}[/bold] {escape(detail)}  [dim]by {escape(who)}{cause}[/dim]")
    return root


def _history(stub, workspace_id: str, observation_id: str) -> list[audit_pb2.HistoryEntry]:
    """The observation's whole history, page by page."""
    entries, token = [], ""
    while True:
        page = stub.GetObservationHistory(
            audit_pb2.GetObservationHistoryRequest(
                workspace_id=workspace_id, observation_id=observation_id, page_token=token
            )
        )
        entries += page.entries
        token = page.next_page_token
        if not token:
            return entries


def audit_view(
    address: str,
    workspace_id: str,
    observation_id: str,
    token: str = "",
    credentials: grpc.ChannelCredentials | None = None,
) -> Group:
    """Both trees for one observation, read from the API at `address` with `token` (over TLS with `credentials`)."""
    with channel(address, token, credentials=credentials) as chan:
        stub = Client(chan).audit
        h = _history(stub, workspace_id, observation_id)
        if any(e.kind == "rejected" for e in h) and not any(e.kind == "added" for e in h):
            # a refused write has no observation, so no provenance: its history says why
            return Group(Text("no observation: its write was rejected", style="red"), Text(""), history_tree(h))
        p = stub.GetProvenance(audit_pb2.GetProvenanceRequest(workspace_id=workspace_id, observation_id=observation_id))
    return Group(provenance_tree(p), Text(""), history_tree(h))
