"""Pure routing decisions. State is one session's current members and latest turns.

Scoping is decided by the order of the session's own log partition: a member perceives the messages
that come after its join and before its leave, whatever `created_at` a backfill gives them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.events import (
    Configuration,
    Effective,
    Event,
    MemberJoined,
    MemberLeft,
    MessageAppended,
    MessagePerceived,
    ProducerInfo,
    SessionConfigured,
    SessionCreated,
    Turn,
    resolve,
)

CONTEXT_CHARS = 2000  # the context turn is a hint for the model, not evidence: keep state small


class Member(BaseModel):
    model_config = ConfigDict(frozen=True)

    observe_me: bool | None = None
    observe_others: bool | None = None  # None: the configuration's
    joined_after: int = 0  # the session's last seq at the join: a turn the member saw has a greater one


class SessionState(BaseModel):
    model_config = ConfigDict(frozen=True)

    # 2: a member's observe_others is None when it did not say; a state kept by version 1 held false for that
    v: int = 2

    members: dict[str, Member] = Field(default_factory=dict)
    # the latest turn of each of the last two peers who spoke: all `previous_turn` needs, whoever asks
    # (one peer's per speaker grew with the session until the state passed a Kafka record's size)
    last_turns: dict[str, Turn] = Field(default_factory=dict)
    last_seq: int = 0
    session: Configuration | None = None  # the session's configuration level


def load_state(raw: dict[str, Any] | None) -> SessionState:
    """A session's state as kept in the changelog; one kept by version 1 (no `v`) held false where a member
    did not say whether it observes the others, which is None now."""
    if not raw:
        return SessionState()
    if "v" not in raw:
        members = {
            p: {**m, "observe_others": m.get("observe_others") or None} for p, m in raw.get("members", {}).items()
        }
        raw = {**raw, "members": members, "v": 2}
    return SessionState.model_validate(raw)


def evolve(state: SessionState, event: Event, global_: Configuration) -> SessionState:
    """The session state after `event`."""
    if isinstance(event, MemberJoined):
        if event.peer_id in state.members:  # a current member's second join changes nothing, as in the projection
            return state
        member = Member(observe_me=event.observe_me, observe_others=event.observe_others, joined_after=state.last_seq)
        return state.model_copy(update={"members": {**state.members, event.peer_id: member}})
    if isinstance(event, SessionConfigured):
        return state.model_copy(update={"session": event.configuration})
    if isinstance(event, MemberLeft):
        members = {p: m for p, m in state.members.items() if p != event.peer_id}
        return state.model_copy(update={"members": members})
    if isinstance(event, MessageAppended) and not configuration(state, event, global_)["reasoning"]:
        # sent with reasoning off, it is never perceived: nor is it the next turn's context, which goes to the
        # deriver's model and onto the log in MessagePerceived. It is its author's latest turn, so their older
        # one is no one's context either
        turns = {p: t for p, t in state.last_turns.items() if p != event.peer_id}
        return state.model_copy(update={"last_turns": turns, "last_seq": state.last_seq + 1})
    if isinstance(event, MessageAppended):
        turn = Turn(
            message_id=event.message_id,
            seq=state.last_seq + 1,
            peer_id=event.peer_id,
            content=event.content[:CONTEXT_CHARS],
            created_at=event.created_at,
            author_name=event.author_name,
        )
        latest = sorted({**state.last_turns, event.peer_id: turn}.items(), key=lambda kv: kv[1].seq)[-2:]
        return state.model_copy(update={"last_turns": dict(latest), "last_seq": state.last_seq + 1})
    return state


def configuration(state: SessionState, message: MessageAppended, global_: Configuration) -> Effective:
    """The settings in force for `message`: its own level, the session's, the workspace's stamped on it."""
    return resolve(global_, message.workspace_configuration, state.session, message.configuration)


def observers(state: SessionState, message: MessageAppended, config: Effective) -> list[str]:
    """Who perceives `message`, in a stable order: the author first (self-model), then others.

    An opt-out on the message itself (`observe_me` / `observe_others` false at its level) wins over everything;
    then a member's own setting; then a peer's own `observe_me=False` (an opt-out no level overrides); then
    `observe_me` / `observe_others` as the levels resolve them, the global one (PEERLOG_REASONING_OBSERVE_*)
    included: left out, the environment's values were reported in force and never applied."""
    author = state.members.get(message.peer_id)
    if author is None or not config["reasoning"]:
        return []  # not a member (the API refuses this; a hand-written log might not), or reasoning is off
    peer_opted_out = False if not message.author_observe_me else None
    own = _first_said(_message_opt_out(message, "observe_me"), author.observe_me, peer_opted_out, config["observe_me"])
    no_others = _message_opt_out(message, "observe_others")
    others = sorted(
        p
        for p, m in state.members.items()
        if p != message.peer_id and _first_said(no_others, m.observe_others, config["observe_others"])
    )
    return ([message.peer_id] if own else []) + others


def _message_opt_out(message: MessageAppended, name: str) -> bool | None:
    """False where the message's own level turns `name` off, else None (not said). Only its "no" outranks
    the membership: a message may keep itself out of a model, never put itself into one a member declined."""
    level = message.configuration
    return False if level is not None and getattr(level, name) is False else None


def _first_said(*values: bool | None) -> bool:
    """The first value that is not None (the last one always is not)."""
    return next(v for v in values if v is not None)


def previous_turn(state: SessionState, author: str) -> Turn | None:
    """The latest turn in the session by anyone but `author`."""
    others = [t for p, t in state.last_turns.items() if p != author]
    return max(others, key=lambda t: t.seq, default=None)


def decide(state: SessionState, event: Event, producer: ProducerInfo, global_: Configuration) -> list[Event]:
    """The MessagePerceived events one session event causes (only messages cause any)."""
    if not isinstance(event, MessageAppended) or event.origin is not None:
        return []  # a copy (CloneSession) was perceived where it was first sent: again would derive it twice
    config = configuration(state, event, global_)
    context = previous_turn(state, event.peer_id)

    def seen_by(observer: str) -> Turn | None:
        # the context turn is part of what the observer learns from: only one sent while it was a member
        return context if context is not None and context.seq > state.members[observer].joined_after else None

    return [
        MessagePerceived(
            workspace_id=event.workspace_id,
            observer_id=observer,
            observed_id=event.peer_id,
            session_id=event.session_id,
            message_id=event.message_id,
            seq=state.last_seq + 1,
            content=event.content,
            created_at=event.created_at,
            previous_turn=seen_by(observer),
            observed_name=event.author_name,
            instructions=config["deriver_instructions"],
            dreams=config["dreams"],
            dream_threshold=config["dream_threshold"],
            peer_card=config["peer_card"],
            causation_id=event.event_id,
            producer=producer,
        )
        for observer in observers(state, event, config)
    ]


ROUTED = (SessionCreated, MemberJoined, MemberLeft, MessageAppended, SessionConfigured)
