"""Pure embedding decisions: which messages get a vector, what text stands for them, and the event.

A message is embedded with its context, not as bare content: `[8 May 2023] Ann Lee: <content>
(replying to Bo: <the turn before>)`. On LoCoMo (tests/bench/README.md) bare content found a third
fewer evidence turns: a question names people and times ("When did Ann…") that bare content lacks, and
an answer is often a short reply ("Yes, last week!") whose meaning is in the turn it answers. Content
comes first, so a long message is cut by the model's token limit in its own words, not its reply's.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.events import (
    EmbeddedMessage,
    Event,
    MemberJoined,
    MessageAppended,
    MessagesEmbedded,
    PackedVector,
    ProducerInfo,
)

# how much of the previous turn rides along (and is kept in the embedder's per-session state)
PREVIOUS_TURN_CHARS = 500


def author_name(event: MessageAppended) -> str:
    """How the message names its author: the peer's display name stamped on it, else its id as words
    ("Ann_Lee" reads "Ann Lee" to a model and to a full-text parser)."""
    return event.author_name or as_words(event.peer_id)


def as_words(peer_id: str) -> str:
    return peer_id.replace("_", " ")


def previous_turn(event: MessageAppended) -> dict:
    """What the session's next message needs to know of this one (the embedder's state). `author` is
    the name as written (a state kept before names were stamped holds the id, read the same way)."""
    return {"author": author_name(event), "content": event.content[:PREVIOUS_TURN_CHARS]}


def after(event: Event, previous: dict | None) -> dict | None:
    """The session's previous turn once `event` is applied: a message is the next one's; a member's join
    forgets it, so the first turn the newcomer sees is not embedded beside one it never saw (its searches
    are ranked by that vector, and a score would tell whether a guess matched the hidden turn)."""
    if isinstance(event, MessageAppended):
        return previous_turn(event)
    return None if isinstance(event, MemberJoined) else previous


def text_to_embed(event: Event, previous: dict | None = None) -> str | None:
    """The text to embed for `event` given the session's previous turn; None when there is nothing to
    embed (not a message, or an empty one)."""
    if not isinstance(event, MessageAppended) or not event.content.strip():
        return None
    text = f"[{event.created_at.day} {event.created_at:%B %Y}] {author_name(event)}: {event.content}"
    if previous:
        text += f" (replying to {as_words(previous['author'])}: {previous['content']})"
    return text


def embedded(message: MessageAppended, vector: Sequence[float], model: str, producer: ProducerInfo) -> MessagesEmbedded:
    """The event recording `message`'s embedding, caused by the message's own event."""
    item = EmbeddedMessage(message_id=message.message_id, session_id=message.session_id, vector=PackedVector.of(vector))
    return MessagesEmbedded(
        workspace_id=message.workspace_id,
        session_id=message.session_id,
        messages=(item,),
        embedding_model=model,
        causation_id=message.event_id,
        producer=producer,
    )
