"""The dream trigger, decided from events alone: threshold, cooldown, idle wait, de-duplication."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.dreamer.schedule import Defaults, PairSchedule, decide, ready
from services.dreamer.settings import DreamSettings
from services.events import (
    DreamCheckDue,
    DreamCompleted,
    DreamFailed,
    DreamForced,
    DreamReason,
    DreamRequested,
    Level,
    MessagePerceived,
    ObservationAdded,
    ProducerInfo,
)

P = ProducerInfo(component="test", version="0")
CFG = DreamSettings(threshold=3, cooldown_s=3600, idle_s=600)
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
PAIR = dict(workspace_id="w", observer_id="a", observed_id="b", producer=P)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def explicit(minute: float, dream_id: str | None = None, level=Level.EXPLICIT) -> ObservationAdded:
    return ObservationAdded(
        **PAIR, observation_id=f"o{minute}", level=level, content="x", dream_id=dream_id, occurred_at=at(minute)
    )


def message(minute: float) -> MessagePerceived:
    return MessagePerceived(
        **PAIR,
        session_id="s",
        message_id=f"m{minute}",
        seq=1,
        content="hi",
        created_at=at(minute),
        occurred_at=at(minute),
    )


def tick(minute: float) -> DreamCheckDue:
    return DreamCheckDue(**PAIR, occurred_at=at(minute))


def run(events, state=PairSchedule(), defaults=Defaults()):
    out = []
    for e in events:
        state, produced = decide(state, e, CFG, P, defaults)
        out += produced
    return state, out


def test_a_quiet_pair_with_enough_new_explicit_observations_dreams_once():
    state, out = run([message(0), explicit(1), explicit(2), explicit(3), tick(13)])
    assert [(type(e), e.reason, e.new_explicit) for e in out] == [(DreamRequested, DreamReason.THRESHOLD, 3)]
    assert state.outstanding == out[0].dream_id and state.new_explicit == 0


def test_below_the_threshold_nothing_happens_however_long_it_waits():
    _, out = run([explicit(1), explicit(2), tick(10_000)])
    assert out == []


def test_derived_and_dream_written_observations_do_not_count():
    _, out = run([explicit(1), explicit(2), explicit(3, level=Level.DEDUCTIVE), explicit(4, dream_id="d"), tick(100)])
    assert out == []


def test_the_pair_must_have_been_idle_and_a_new_message_postpones_the_wait():
    state, out = run([message(0), explicit(1), explicit(2), explicit(3), message(5), tick(14)])
    assert out == []  # only 9 minutes of quiet
    assert ready(state, at(15), CFG)
    state, out = run([message(15), tick(16)], state)
    assert out == [] and not ready(state, at(24), CFG) and ready(state, at(25), CFG)


def test_the_idle_wait_is_the_same_whether_a_message_is_read_before_or_after_its_observations():
    # perceived and observations are separate topics: a backlog may deliver them in any interleaving
    for position in range(4):
        events = [explicit(1), explicit(2), explicit(3)]
        events.insert(position, message(0))
        state, out = run([*events, tick(5)])
        assert out == [], f"the message read at position {position}: dreamed without waiting"
        _, out = run([tick(13)], state)
        assert len(out) == 1, f"the message read at position {position}"


def test_the_idle_wait_runs_from_the_later_of_the_last_message_and_the_last_new_observation():
    state, out = run([message(0), explicit(1), explicit(2), explicit(9), tick(11)])
    assert out == []  # eleven quiet minutes since the message, but only two since the last new fact
    _, out = run([tick(19)], state)
    assert len(out) == 1


def test_a_pair_without_messages_dreams_once_its_new_observations_have_been_quiet_for_the_idle_time():
    state, out = run([explicit(1), explicit(2), explicit(3), tick(5)])
    assert out == []
    _, out = run([tick(13)], state)
    assert len(out) == 1


def test_the_threshold_reached_during_the_cooldown_is_honoured_by_a_later_tick():
    state, out = run([explicit(1), explicit(2), explicit(3), tick(13)])
    done = DreamCompleted(**PAIR, dream_id=out[0].dream_id, occurred_at=at(14))
    state, out = run([done, explicit(15), explicit(16), explicit(17), tick(30)], state)
    assert out == []  # idle, but in the cooldown: an hour from the end of the last dream
    state, out = run([tick(75)], state)
    assert len(out) == 1 and out[0].new_explicit == 3


def test_only_one_dream_is_outstanding_and_a_forced_one_is_deduplicated():
    state, out = run([explicit(1), explicit(2), explicit(3), tick(13)])
    first = out[0].dream_id
    state, more = run(
        [DreamForced(**PAIR, occurred_at=at(14)), explicit(15), explicit(16), explicit(17), tick(100)], state
    )
    assert more == [] and state.outstanding == first


def test_a_forced_dream_skips_threshold_cooldown_and_idle():
    _, out = run([message(0), DreamForced(**PAIR, occurred_at=at(0.5))])
    assert [e.reason for e in out] == [DreamReason.FORCED]


def test_a_failed_dream_gives_its_observations_back_for_the_next_one():
    state, out = run([explicit(1), explicit(2), explicit(3), tick(13)])
    state, _ = run([DreamFailed(**PAIR, dream_id=out[0].dream_id, reason="model down", occurred_at=at(14))], state)
    assert state.outstanding is None and state.new_explicit == 3
    _, out = run([tick(75)], state)
    assert len(out) == 1 and out[0].new_explicit == 3


def test_a_late_report_of_an_old_dream_changes_nothing():
    state, out = run([explicit(1), explicit(2), explicit(3), tick(13)])
    later, _ = run([DreamCompleted(**PAIR, dream_id="an-old-one", occurred_at=at(14))], state)
    assert state.outstanding == out[0].dream_id and later == state


def test_after_a_promotion_only_the_promoted_derivations_observations_count():
    from services.events import DerivationPromoted

    def in_derivation(minute: float, name: str) -> ObservationAdded:
        return explicit(minute).model_copy(update={"derivation": name})

    promote = DerivationPromoted(**PAIR, derivation="v2", occurred_at=at(1))
    state, out = run(
        [
            in_derivation(0, "v2"),
            promote,
            explicit(2),
            explicit(3),
            in_derivation(4, "v2"),
            in_derivation(5, "v2"),
            tick(100),
        ]
    )
    assert state.derivation == "v2" and out == []
    _, out = run([in_derivation(6, "v2"), tick(200)], state)
    assert [e.new_explicit for e in out] == [3]


def test_a_pair_fed_only_by_client_observations_does_not_dream_when_dreams_are_off_globally():
    # no perceived message stamps the pair's configuration: read as on, it dreamt against PEERLOG_REASONING_DREAMS
    off = Defaults(dreams=False, peer_card=False)
    state, out = run([explicit(1), explicit(2), explicit(3), tick(13)], defaults=off)
    assert out == [] and not ready(state, at(13), CFG, off)
    _, forced = run([DreamForced(**PAIR, occurred_at=at(14))], state, defaults=off)
    assert forced == []  # nor when forced: any peer's token may ask


def test_a_forced_dream_leaves_the_card_alone_where_peer_cards_are_off():
    _, forced = run([DreamForced(**PAIR, occurred_at=at(14))], defaults=Defaults(dreams=True, peer_card=False))
    assert [e.peer_card for e in forced] == [False]


def test_a_forced_dream_is_not_requested_for_a_pair_whose_messages_turned_dreams_off():
    off = message(0).model_copy(update={"dreams": False})
    _, forced = run([off, DreamForced(**PAIR, occurred_at=at(0.5))])
    assert forced == []


def test_a_perceived_messages_configuration_outranks_the_global_level():
    on = message(0).model_copy(update={"dreams": True, "peer_card": True})
    _, out = run([on, explicit(1), explicit(2), explicit(3), tick(13)], defaults=Defaults(False, False))
    assert [e.peer_card for e in out] == [True]
