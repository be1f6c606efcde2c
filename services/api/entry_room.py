"""Ids too long together for an entry of the covering indexes (projections.schema.ENTRY_ID_BYTES), refused
before anything is written: Postgres would refuse the row, and the projector park the acknowledged event in
quarantine, never read (an observation), or leave its message without a vector (never found by meaning)."""

from __future__ import annotations

from collections.abc import Sequence

from projections.schema import ENTRY_ID_BYTES
from services.errors import InvalidArgument
from services.events import new_id

GENERATED_ID_CHARS = len(new_id())  # a UUID's text: what peerlog assigns a message or observation


def _longest(ids: Sequence[str]) -> int:
    """The longest of `ids`, an empty one (peerlog assigns it) counted as generated."""
    return max((len(i) or GENERATED_ID_CHARS for i in ids), default=GENERATED_ID_CHARS)


def _refuse_over(used: int, what: str, entry: str) -> None:
    if used > ENTRY_ID_BYTES:  # ids are ASCII: characters are bytes
        raise InvalidArgument(
            f"{what} take {used} characters together; {entry} holds at most {ENTRY_ID_BYTES} beside its vector: "
            "use shorter ids"
        )


def check_observation_ids(workspace_id: str, observer_id: str, observed_id: str, observation_ids: Sequence[str]):
    used = len(workspace_id) + len(observer_id) + len(observed_id) + _longest(observation_ids)
    _refuse_over(used, "workspace_id, observer_id, observed_id and the observation id", "an observation's index entry")


def check_member_ids(workspace_id: str, peer_ids: Sequence[str]) -> None:
    """A member's longest pair is with itself (its self-model): if that fits, every pair of members does."""
    for peer in peer_ids:
        used = len(workspace_id) + 2 * len(peer) + GENERATED_ID_CHARS
        _refuse_over(
            used,
            f"workspace_id, member {peer[:40]!r} twice (its own pair) and an observation id",
            "an observation's index entry",
        )


def check_message_ids(workspace_id: str, session_id: str, message_ids: Sequence[str]) -> None:
    used = len(workspace_id) + len(session_id) + _longest(message_ids)
    _refuse_over(used, "workspace_id, session_id and the message id", "a message's index entry")
