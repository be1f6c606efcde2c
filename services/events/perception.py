"""What a pair's observer perceived: the router's output, the deriver's input."""

from __future__ import annotations

from typing import ClassVar

from pydantic import AwareDatetime, BaseModel, ConfigDict

from services.events.base import Event

PAIR_KEY = ("workspace_id", "observer_id", "observed_id")


def pair_of(key: str) -> dict[str, str]:
    """The pair fields of a pair key (the inverse of a pair event's `key`)."""
    return dict(zip(PAIR_KEY, key.split("/", 2), strict=True))


class Turn(BaseModel):
    """A message as context for another: who said what, truncated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message_id: str
    seq: int
    peer_id: str
    content: str
    created_at: AwareDatetime
    author_name: str = ""  # the author's display name (MessageAppended.author_name), if any


class MessagePerceived(Event):
    """`observer` saw `observed` say something (the router decided the pair may see it).

    Carries the message itself and the turn before it by another speaker, so the deriver needs no
    lookups and replay needs nothing but the log.
    """

    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY
    # 2: `instructions`, `dreams`, `dream_threshold`, `peer_card`; 3: `observed_name`, `Turn.author_name`
    schema_version_current: ClassVar[int] = 3
    # version 1 had none: the deriver's prompt as it was; version 2 had no names: peers went by their ids
    upcasters = {1: lambda data: data, 2: lambda data: data}

    observer_id: str
    observed_id: str
    session_id: str
    message_id: str
    seq: int
    content: str
    created_at: AwareDatetime
    previous_turn: Turn | None = None
    observed_name: str = ""  # the author's display name (MessageAppended.author_name): the deriver names it so
    # the custom deriver instructions in force for the message (configuration hierarchy), resolved by the
    # router so the pair-keyed deriver needs no session or workspace state
    instructions: str = ""
    # the dream settings in force for the message, for the dream scheduler (which reads this topic);
    # None: a perception from before the configuration hierarchy, the scheduler's own settings apply
    dreams: bool | None = None
    dream_threshold: int | None = None
    peer_card: bool | None = None


class DerivationDue(Event):
    """A clock tick for one pair: derive its pending messages if the oldest has waited long enough."""

    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY

    observer_id: str
    observed_id: str


# the name that reads (or promotes back) a pair's first live derivation, whose events carry derivation=""
ORIGINAL = "original"


# the label of what a client wrote (CreateObservations): a client's statement is no model's derivation, so
# it belongs to the pair's store under every derivation, and a promotion leaves it where reads find it
PAIR_WIDE = "*"


def stored_derivation(name: str) -> str:
    """The `derivation` label events carry for derivation `name` (ORIGINAL is stored as "")."""
    return "" if name == ORIGINAL else name


class DerivationPromoted(Event):
    """From here on the pair's current derivation is `derivation` ("" = the original one).

    On the perceived topic, so it is ordered with the pair's perceptions: those before it belong to the
    old derivation's live run, those after it are derived into the new one. Nothing existing changes.
    """

    key_fields: ClassVar[tuple[str, ...]] = PAIR_KEY

    observer_id: str
    observed_id: str
    derivation: str  # the stored label, as on the derivation's events
    reason: str = ""
