"""Pure routing decisions. State is one session's current members and latest turns.

Scoping is decided by the order of the session's own log partition: a member perceives the messages
that come after its join and before its leave, whatever `created_at` a backfill gives them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from services.events import (
    Event,
    MemberJoined,
    MemberLeft,
    MessageAppended,
    MessagePerceived,
    ProducerInfo,
    SessionCreated,
    Turn,
)

CONTEXT_CHARS = 2000  # the context turn is a hint for the model, not evidence: keep state small


class Member(BaseModel):
    model_config = ConfigDict(frozen=True)

    observe_me: bool | None = None
    observe_others: bool = False


class SessionState(BaseModel):
    model_config = ConfigDict(frozen=True)

    members: dict[str, Member] = Field(default_factory=dict)
    last_turns: dict[str, Turn] = Field(default_factory=dict)  # each peer's latest turn
    last_seq: int = 0


def evolve(state: SessionState, event: Event) -> SessionState:
    """The session state after `event`."""
    if isinstance(event, MemberJoined):
        if event.peer_id in state.members:  # a current member's second join changes nothing, as in the projection
            return state
        member = Member(observe_me=event.observe_me, observe_others=event.observe_others)
        return state.model_copy(update={"members": {**state.members, event.peer_id: member}})
    if isinstance(event, MemberLeft):
        members = {p: m for p, m in state.members.items() if p != event.peer_id}
        return state.model_copy(update={"members": members})
    if isinstance(event, MessageAppended):
        turn = Turn(message_id=event.message_id, seq=state.last_seq + 1, peer_id=event.peer_id,
                    content=event.content[:CONTEXT_CHARS], created_at=event.created_at)
        return state.model_copy(update={"last_turns": {**state.last_turns, event.peer_id: turn},
                                        "last_seq": state.last_seq + 1})
    return state


def observers(state: SessionState, message: MessageAppended) -> list[str]:
    """Who perceives `message`, in a stable order: the author first (self-model), then others."""
    author = state.members.get(message.peer_id)
    if author is None:
        return []  # not a member (the API refuses this; a hand-written log might not)
    own = author.observe_me if author.observe_me is not None else message.author_observe_me
    others = sorted(p for p, m in state.members.items() if p != message.peer_id and m.observe_others)
    return ([message.peer_id] if own else []) + others


def previous_turn(state: SessionState, author: str) -> Turn | None:
    """The latest turn in the session by anyone but `author`."""
    others = [t for p, t in state.last_turns.items() if p != author]
    return max(others, key=lambda t: t.seq, default=None)


def decide(state: SessionState, event: Event, producer: ProducerInfo) -> list[Event]:
    """The MessagePerceived events one session event causes (only messages cause any)."""
    if not isinstance(event, MessageAppended):
        return []
    context = previous_turn(state, event.peer_id)
    return [
        MessagePerceived(
            workspace_id=event.workspace_id, observer_id=observer, observed_id=event.peer_id,
            session_id=event.session_id, message_id=event.message_id, seq=state.last_seq + 1,
            content=event.content, created_at=event.created_at, previous_turn=context,
            causation_id=event.event_id, producer=producer,
        )
        for observer in observers(state, event)
    ]


ROUTED = (SessionCreated, MemberJoined, MemberLeft, MessageAppended)
