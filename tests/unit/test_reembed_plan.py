"""What `peerlog reembed` plans: every message (with its previous turn, as the embedder embeds it) and
observation of the workspace, minus what the same model already embedded."""

import gc
from datetime import UTC, datetime
from types import SimpleNamespace

from services.bus.topics import MESSAGE_EMBEDDINGS, OBSERVATIONS, SESSIONS
from services.embedder import reembed
from services.embedder.reembed import chunks, done_by, plan
from services.events import (
    EmbeddedMessage,
    EmbeddedObservation,
    Level,
    MessageAppended,
    MessagesEmbedded,
    ObservationAdded,
    ObservationsEmbedded,
    ProducerInfo,
    encode,
)
from services.events.requests import KeyedRequest

P = ProducerInfo(component="test", version="0")
AT = datetime(2026, 5, 8, tzinfo=UTC)


def _msg(i: int, session: str = "s", workspace: str = "w") -> MessageAppended:
    return MessageAppended(
        workspace_id=workspace,
        session_id=session,
        message_id=f"m{i}",
        peer_id="ann",
        content=f"turn {i}",
        created_at=AT,
        producer=P,
    )


def _obs(i: int, workspace: str = "w") -> ObservationAdded:
    return ObservationAdded(
        workspace_id=workspace,
        observer_id="ann",
        observed_id="ann",
        observation_id=f"o{i}",
        level=Level.EXPLICIT,
        content=f"fact {i}",
        producer=P,
    )


def test_messages_are_planned_in_session_order_with_their_previous_turn_and_other_workspaces_left_out():
    got = plan([_msg(1), _msg(2), _msg(3, "t"), _msg(4, workspace="other")], [_obs(1)], "w", set())
    assert [text for _, text in got.messages["w/s"]] == [
        "[8 May 2026] ann: turn 1",
        "[8 May 2026] ann: turn 2 (replying to ann: turn 1)",
    ]
    assert [m.message_id for m, _ in got.messages["w/t"]] == ["m3"]
    assert [o.observation_id for o in got.observations["w/ann/ann"]] == ["o1"] and got.size() == 4


def test_what_the_same_model_embedded_before_is_skipped_but_its_context_is_kept():
    earlier = [
        MessagesEmbedded(
            workspace_id="w",
            session_id="s",
            embedding_model="new",
            producer=P,
            messages=(EmbeddedMessage(message_id="m1", session_id="s", vector=(1.0,)),),
        ),
        MessagesEmbedded(
            workspace_id="w",
            session_id="s",
            embedding_model="old",
            producer=P,
            messages=(EmbeddedMessage(message_id="m2", session_id="s", vector=(1.0,)),),
        ),
        ObservationsEmbedded(
            workspace_id="w",
            observer_id="ann",
            observed_id="ann",
            embedding_model="new",
            producer=P,
            observations=(EmbeddedObservation(observation_id="o1", vector=(1.0,)),),
        ),
    ]
    done = done_by(earlier, "w", "new")
    assert done == {"m1", "o1"}
    got = plan([_msg(1), _msg(2)], [_obs(1), _obs(2)], "w", done)
    assert [text for _, text in got.messages["w/s"]] == ["[8 May 2026] ann: turn 2 (replying to ann: turn 1)"]
    assert [o.observation_id for o in got.observations["w/ann/ann"]] == ["o2"]


def test_work_is_cut_into_chunks_of_at_most_64():
    assert [len(c) for c in chunks(list(range(130)))] == [64, 64, 2]


def test_an_observation_added_with_a_vector_of_the_model_is_done_and_one_of_another_model_or_none_is_not():
    def added(i: int, model: str, vector: tuple[float, ...]) -> ObservationAdded:
        return _obs(i).model_copy(update={"embedding_model": model, "embedding": vector})

    events = [added(1, "live", (1.0,)), added(2, "other", (1.0,)), added(3, "live", ())]
    assert done_by(events, "w", "live") == {"o1"}  # reembedding with the live model appends nothing for it
    assert done_by(events, "elsewhere", "live") == set()


def test_the_first_turn_after_a_member_joins_is_embedded_without_the_turn_the_newcomer_never_saw():
    from services.events import MemberJoined

    joined = MemberJoined(workspace_id="w", session_id="s", peer_id="bo", joined_at=AT, producer=P)
    got = plan([_msg(1), joined, _msg(2), _msg(3)], [], "w", set())
    assert [text for _, text in got.messages["w/s"]] == [
        "[8 May 2026] ann: turn 1",
        "[8 May 2026] ann: turn 2",  # bo searches by this vector: it must not carry turn 1
        "[8 May 2026] ann: turn 3 (replying to ann: turn 2)",
    ]


def test_a_repeated_keyed_append_is_skipped_as_the_live_embedder_and_the_projector_skip_it():
    # an API died after appending a keyed post; the client's retry appended it again (same message id, a
    # new request): the store holds the first only, so the repeat is neither embedded nor anyone's context
    def keyed(event, request_id: str):
        request = KeyedRequest(key="k1", scope=event.key, fingerprint="f", request_id=request_id)
        return event.model_copy(update={"request": request})

    got = plan(
        [keyed(_msg(1), "r1"), keyed(_msg(1), "r2"), _msg(2)], [keyed(_obs(1), "r1"), keyed(_obs(1), "r2")], "w", set()
    )
    assert [text for _, text in got.messages["w/s"]] == [
        "[8 May 2026] ann: turn 1",
        "[8 May 2026] ann: turn 2 (replying to ann: turn 1)",
    ]
    assert [o.observation_id for o in got.observations["w/ann/ann"]] == ["o1"]


class _Record:
    """A log record as the scan reads it: its value."""

    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value


def test_reembed_keeps_only_the_workspaces_observation_events_while_planning(monkeypatch):
    # the observations topic holds every workspace's events, each with its vector: planning one workspace held
    # all of them in memory
    elsewhere = [_Record(encode(_obs(i, workspace="other"))) for i in range(50)]
    held: list[int] = []

    def sessions():
        gc.collect()  # what the scan still holds when it reads the sessions, after the observations
        held.append(sum(isinstance(o, ObservationAdded) and o.workspace_id == "other" for o in gc.get_objects()))
        yield _Record(encode(_msg(1)))

    records = {
        OBSERVATIONS.full_name("t."): iter([_Record(encode(_obs(1))), *elsewhere]),
        MESSAGE_EMBEDDINGS.full_name("t."): iter([]),
        SESSIONS.full_name("t."): sessions(),
    }
    monkeypatch.setattr(reembed, "to_the_end", lambda kafka, topic, **_: records[topic])
    got = reembed.scan(SimpleNamespace(kafka=SimpleNamespace(topic_prefix="t.")), "w", "new-model")
    assert held == [0]
    assert [o.observation_id for o in got.observations["w/ann/ann"]] == ["o1"] and got.size() == 2
