"""`peerlog reembed`: embed a workspace's messages and observations again with another model, as new
events on the log, ahead of switching the deployment to that model.

Everything is read from the log itself, not from the projections (which keep only the active model's
vectors): the messages in session order (each embedded with its previous turn, as the embedder does),
the observations, and what the same model embedded already, which is skipped: what an earlier run or
the live embedder appended, and the vectors observations were added with. So a run resumes where
another stopped. The command holds a lock per workspace and model for the run (projections/run_lock.py),
so two runs never plan the same work; only a message the live embedder embeds with the same model while
a run goes can get a second, identical vector (the later one wins). The switch itself is a setting and a
rebuild: the projector keeps only vectors of the model it is configured with (projections/handlers.py),
so until then live reads keep comparing the old model's vectors with the old model's queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from services.bus.first_appends import FirstAppends
from services.bus.streams import read, to_the_end
from services.bus.topics import MESSAGE_EMBEDDINGS, OBSERVATIONS, SESSIONS
from services.embedder.policy import after, text_to_embed
from services.embedder.refusals import vectors_or_none
from services.events import (
    EmbeddedMessage,
    EmbeddedObservation,
    Event,
    MessageAppended,
    MessagesEmbedded,
    ObservationAdded,
    ObservationsEmbedded,
    PackedVector,
    ProducerInfo,
)
from services.llm.embeddings import Embedder

CHUNK = 64  # texts per model call, and items per appended event


@dataclass
class Plan:
    """What a run still has to embed: per session, (message, its text); per pair key, observations."""

    messages: dict[str, list[tuple[MessageAppended, str]]] = field(default_factory=dict)
    observations: dict[str, list[ObservationAdded]] = field(default_factory=dict)

    def size(self) -> int:
        return sum(map(len, self.messages.values())) + sum(map(len, self.observations.values()))


def done_by(events: Iterable[Event | None], workspace_id: str, model: str) -> set[str]:
    """Ids of the messages and observations of the workspace that `model` has embedded already: in an
    embedding event, or (observations) in the vector the observation was added with."""
    done: set[str] = set()
    for e in events:
        if e is None or e.workspace_id != workspace_id:
            continue
        if isinstance(e, MessagesEmbedded) and e.embedding_model == model:
            done.update(m.message_id for m in e.messages)
        elif isinstance(e, ObservationsEmbedded) and e.embedding_model == model:
            done.update(o.observation_id for o in e.observations)
        elif isinstance(e, ObservationAdded) and e.embedding_model == model and e.embedding:
            done.add(e.observation_id)
    return done


# keyed appends remembered while planning: a retry's copy follows its first within seconds (FirstAppends'
# own bound is a stream's); a million keys is ~100 MB at most, for one run
REPEAT_WINDOW = 1_000_000


def plan(
    sessions: Iterable[Event | None], observations: Iterable[Event | None], workspace_id: str, done: set[str]
) -> Plan:
    """The work left: every message (in session order, with its context) and observation of the
    workspace not in `done`. Pure: the caller reads the topics. A later append under a used idempotency key
    (a client's retry after its API died before projecting the first) is no message or observation of the
    store, as the projector and the live embedder drop it: it is skipped here too, else its vector won over
    the first's (replying to itself) and the turn after it took it for context."""
    out, previous, firsts = Plan(), {}, FirstAppends(REPEAT_WINDOW)
    for e in sessions:
        if e is None or e.workspace_id != workspace_id or firsts.repeated(e):
            continue
        text = text_to_embed(e, previous.get(e.key))
        previous[e.key] = after(e, previous.get(e.key))
        if text is not None and e.message_id not in done:
            out.messages.setdefault(e.key, []).append((e, text))
    for e in observations:
        if not isinstance(e, ObservationAdded) or e.workspace_id != workspace_id or firsts.repeated(e):
            continue
        if e.observation_id not in done:
            out.observations.setdefault(e.key, []).append(e)
    return out


def chunks(items: Sequence, size: int = CHUNK) -> list[Sequence]:
    return [items[i : i + size] for i in range(0, len(items), size)]


async def _kept(embedder: Embedder, items: Sequence, texts: list[str]) -> list[tuple]:
    """(item, vector) for each item whose text the model embeds; one it refuses for good is left out."""
    vectors = await vectors_or_none(embedder, texts)
    return [(item, v) for item, v in zip(items, vectors, strict=True) if v is not None]


async def _messages(
    embedder: Embedder, items: Sequence[tuple[MessageAppended, str]], producer: ProducerInfo
) -> MessagesEmbedded | None:
    """The chunk's vectors, without those of texts the model refuses (None: it refuses every one)."""
    kept = await _kept(embedder, items, [text for _, text in items])
    first = items[0][0]
    embedded = tuple(
        EmbeddedMessage(message_id=m.message_id, session_id=m.session_id, vector=PackedVector.of(v))
        for (m, _), v in kept
    )
    if not embedded:
        return None
    return MessagesEmbedded(
        workspace_id=first.workspace_id,
        session_id=first.session_id,
        embedding_model=embedder.model_name,
        producer=producer,
        messages=embedded,
    )


async def _observations(
    embedder: Embedder, items: Sequence[ObservationAdded], producer: ProducerInfo
) -> ObservationsEmbedded | None:
    """The chunk's vectors, without those of texts the model refuses (None: it refuses every one)."""
    kept = await _kept(embedder, items, [o.content for o in items])
    first = items[0]
    embedded = tuple(EmbeddedObservation(observation_id=o.observation_id, vector=PackedVector.of(v)) for o, v in kept)
    if not embedded:
        return None
    return ObservationsEmbedded(
        workspace_id=first.workspace_id,
        observer_id=first.observer_id,
        observed_id=first.observed_id,
        derivation=first.derivation,
        embedding_model=embedder.model_name,
        producer=producer,
        observations=embedded,
    )


def scan(settings, workspace_id: str, model: str) -> Plan:
    """Read the three topics and plan the run (blocking)."""
    prefix = settings.kafka.topic_prefix

    def events(topic):
        return (
            read(m.value()) for m in to_the_end(settings.kafka, topic.full_name(prefix), timeout=3600, must_exist=True)
        )

    # the observations topic holds both what to embed and what was embedded: read it once, keeping only the
    # workspace's events, since it holds every workspace's, each with its vector (about 7 KB decoded at 384 dimensions)
    observations = [e for e in events(OBSERVATIONS) if e is not None and e.workspace_id == workspace_id]
    done = done_by(events(MESSAGE_EMBEDDINGS), workspace_id, model) | done_by(observations, workspace_id, model)
    return plan(events(SESSIONS), observations, workspace_id, done)


async def reembed(the_plan: Plan, embedder: Embedder, append: Callable, advance: Callable[[int], None]) -> int:
    """Embed what `the_plan` holds, CHUNK texts at a time, appending one event per chunk before the next
    (so a run stopped at any point has lost at most the chunk in flight); returns the vectors appended. A
    text the model refuses for good is left out (logged) and the rest goes on: one such text stopped every
    run at the same chunk, and nothing after it was ever embedded."""
    producer = ProducerInfo(component="reembed", version="0.1.0", model=embedder.model_name)
    work = [(chunk, _messages) for items in the_plan.messages.values() for chunk in chunks(items)]
    work += [(chunk, _observations) for items in the_plan.observations.values() for chunk in chunks(items)]
    total = 0
    for chunk, embedded_by in work:
        event = await embedded_by(embedder, chunk, producer)
        if event is not None:
            await append([event])
            total += len(event.messages if isinstance(event, MessagesEmbedded) else event.observations)
        advance(len(chunk))
    return total
