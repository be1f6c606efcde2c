"""Pure embedding decisions: which messages get a vector, and the event that carries it."""

from __future__ import annotations

from collections.abc import Sequence

from services.events import EmbeddedMessage, Event, MessageAppended, MessagesEmbedded, ProducerInfo


def text_to_embed(event: Event) -> str | None:
    """The text to embed for `event`: a message's content; None for anything else (nothing to do)."""
    if isinstance(event, MessageAppended) and event.content.strip():
        return event.content
    return None


def embedded(message: MessageAppended, vector: Sequence[float], model: str, producer: ProducerInfo) -> MessagesEmbedded:
    """The event recording `message`'s embedding, caused by the message's own event."""
    item = EmbeddedMessage(message_id=message.message_id, session_id=message.session_id,
                           vector=tuple(float(x) for x in vector))
    return MessagesEmbedded(workspace_id=message.workspace_id, session_id=message.session_id, messages=(item,),
                            embedding_model=model, causation_id=message.event_id, producer=producer)
