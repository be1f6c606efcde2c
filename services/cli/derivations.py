"""`peerlog derivations compare`: a pair's current store (or another derivation) beside a named one."""

from __future__ import annotations

import grpc
from rich.markup import escape
from rich.table import Table

from peerlog.v1 import observations_pb2
from services.api.channels import channel
from services.cli.client import Client


def _contents(stub, workspace: str, observer: str, observed: str, derivation: str) -> list[str]:
    out, token = [], ""
    while True:
        page = stub.ListObservations(
            observations_pb2.ListObservationsRequest(
                workspace_id=workspace,
                observer_id=observer,
                observed_id=observed,
                derivation=derivation,
                page={"page_size": 1000, "page_token": token},
            )
        )
        out += [o.content for o in page.observations]
        token = page.next_page_token
        if not token:
            return out


def comparison(
    address: str,
    workspace: str,
    observer: str,
    observed: str,
    name: str,
    base: str = "",
    token: str = "",
    credentials: grpc.ChannelCredentials | None = None,
) -> Table:
    """`base` ("" = the pair's current derivation) on the left, derivation `name` on the right; the API
    at `address` is called with `token` (over TLS with `credentials`)."""
    with channel(address, token, credentials=credentials) as chan:
        stub = Client(chan).observations
        current = _contents(stub, workspace, observer, observed, base)
        named = _contents(stub, workspace, observer, observed, name)
    return side_by_side(
        f"({observer}, {observed}): {base or 'current'} vs {name}", base or "current", name, current, named
    )


def side_by_side(title: str, left: str, name: str, current: list[str], named: list[str]) -> Table:
    """Two derivations' texts in columns, what only one holds coloured."""
    table = Table(title=escape(title))
    table.add_column(escape(f"{left} ({len(current)})"))
    table.add_column(escape(f"{name} ({len(named)})"))
    only_current, only_named = set(current) - set(named), set(named) - set(current)
    for i in range(max(len(current), len(named))):
        left = current[i] if i < len(current) else ""
        right = named[i] if i < len(named) else ""
        table.add_row(  # stored text is the users', never markup
            f"[red]{escape(left)}[/red]" if left in only_current else escape(left),
            f"[green]{escape(right)}[/green]" if right in only_named else escape(right),
        )
    return table
