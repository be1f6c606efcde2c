"""The demo's dream step: force a dream of (assistant, alice), wait for it, show the new beliefs' provenance."""

from __future__ import annotations

import asyncio
import time

from rich.console import Console

from peerlog.v1 import audit_pb2, dreams_pb2, observations_pb2
from services.cli.audit import provenance_tree
from services.cli.client import Client

PAIR = {"observer_id": "assistant", "observed_id": "alice"}


async def _dream_ids(stub, ws: str) -> set[str]:
    got = await stub.ListDreams(dreams_pb2.ListDreamsRequest(workspace_id=ws, **PAIR))
    return {d.dream_id for d in got.dreams}


async def _wait(stub, ws: str, say, timeout: float, earlier: set[str]) -> dreams_pb2.Dream | None:
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        got = await stub.ListDreams(dreams_pb2.ListDreamsRequest(workspace_id=ws, **PAIR))
        new = [d for d in got.dreams if d.dream_id not in earlier]
        if new:
            dream = new[0]
            if dream.state != last:
                say(f"  dream {dream.dream_id}: {dream.state}")
                last = dream.state
            if dream.state in ("completed", "failed"):
                return dream
        await asyncio.sleep(3)
    say("  (gave up waiting for the dream)")
    return None


async def show_dream(api: Client, ws: str, say, timeout: float = 1200) -> None:
    say("\nScheduleDream (assistant about alice): the deduction and induction specialists run with the model…")
    earlier = await _dream_ids(api.dreams, ws)
    await api.dreams.ScheduleDream(dreams_pb2.ScheduleDreamRequest(workspace_id=ws, reason="make demo", **PAIR))
    dream = await _wait(api.dreams, ws, say, timeout, earlier)
    if dream is None:
        return
    if dream.state == "failed":
        say(f"  the dream failed: {dream.error[:300]}")
    listed = await api.observations.ListObservations(
        observations_pb2.ListObservationsRequest(workspace_id=ws, page={"page_size": 1000}, **PAIR)
    )
    beliefs = [o for o in listed.observations if o.dream_id == dream.dream_id]
    say(f"  {dream.edits} edits; {len(beliefs)} new beliefs in the store")
    console = Console()
    for o in beliefs:
        tree = await api.audit.GetProvenance(
            audit_pb2.GetProvenanceRequest(workspace_id=ws, observation_id=o.observation_id)
        )
        console.print(provenance_tree(tree))
    refused = await api.audit.ListRejectedObservations(
        audit_pb2.ListRejectedObservationsRequest(workspace_id=ws, dream_id=dream.dream_id, limit=5)
    )
    for r in refused.rejections:
        say(f"  refused {r.level} “{r.content[:100]}”: {r.reason[:160]}")
