"""The summarizer's pure core: cadence, the configuration levels, word budgets, retry after failure."""

from __future__ import annotations

from datetime import UTC, datetime

from services.events import Configuration, MessageAppended, ProducerInfo, SessionConfigured, SummaryKind, SummaryUpdated
from services.settings import Settings
from services.summarizer.policy import (
    Attempt,
    Failure,
    SessionSummaries,
    after_failure,
    clip_words,
    due,
    evolve,
    failed,
    portion,
    summarised,
    word_limit,
)
from services.summarizer.settings import SummarizerSettings

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)
S = SummarizerSettings(short_every=2, long_every=4)
G = Settings(summarizer=S).configuration()


def msg(i, **levels):
    return MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id=f"m{i}",
        peer_id="a",
        content=f"t{i}",
        created_at=T,
        producer=P,
        **levels,
    )


def fed(n, state=None, **levels):
    state = state or SessionSummaries()
    for i in range(n):
        state = evolve(state, msg(i, **levels), G)
    return state


def summary(kind: SummaryKind, content: str, last_seq: int) -> SummaryUpdated:
    """A summary of the session's messages up to `last_seq` (message m{last_seq - 1})."""
    return SummaryUpdated(
        workspace_id="w",
        session_id="s",
        kind=kind,
        content=content,
        last_message_id=f"m{last_seq - 1}",
        last_seq=last_seq,
        messages_covered=last_seq,
        token_count=len(content.split()),
        model="m",
        prompt_version="v",
        producer=P,
    )


def due_(state):
    return due(state, S, G)


def configured(**settings):
    return SessionConfigured(workspace_id="w", session_id="s", configuration=Configuration(**settings), producer=P)


def test_kinds_fall_due_at_their_cadence():
    assert due_(fed(1)) == []
    assert due_(fed(2)) == [SummaryKind.SHORT]
    assert set(due_(fed(4))) == {SummaryKind.SHORT, SummaryKind.LONG}


def test_the_workspace_level_overrides_the_global_cadence():
    ws = Configuration(summary_short_every=3)
    assert due_(fed(2, workspace_configuration=ws)) == [] and due_(fed(3, workspace_configuration=ws)) == [
        SummaryKind.SHORT
    ]


def test_the_session_level_overrides_the_workspace_and_the_message_level_the_session():
    state = evolve(SessionSummaries(), configured(summary_short_every=5), G)
    ws = Configuration(summary_short_every=3)
    assert SummaryKind.SHORT not in due_(fed(4, state, workspace_configuration=ws))
    assert SummaryKind.SHORT in due_(fed(5, state, workspace_configuration=ws))
    assert due_(fed(1, state, configuration=Configuration(summary_short_every=1))) == [SummaryKind.SHORT]


def test_summaries_off_queue_nothing_and_a_level_above_turns_them_back_on():
    off = evolve(SessionSummaries(), configured(summaries=False), G)
    assert due_(fed(4, off)) == [] and fed(4, off).tracks == {}
    on = fed(2, off, configuration=Configuration(summaries=True))  # the message level wins
    assert due_(on) == [SummaryKind.SHORT]
    no_reasoning = fed(4, workspace_configuration=Configuration(reasoning=False))
    assert due_(no_reasoning) == [] and no_reasoning.seq == 4  # seq still counts every message


def test_a_state_from_before_the_hierarchy_keeps_its_metadata_cadence_as_the_session_level():
    old = SessionSummaries.model_validate({"every": {"short": 3}, "tracks": {}, "seq": 0})
    assert old.session == Configuration(summary_short_every=3)
    assert due_(fed(2, old)) == [] and due_(fed(3, old)) == [SummaryKind.SHORT]


def test_a_recorded_summary_keeps_only_later_messages_and_becomes_the_previous_one():
    state = fed(2)
    after = summarised(state, summary(SummaryKind.SHORT, "so far", 2))
    assert after.tracks[SummaryKind.SHORT].pending == () and after.tracks[SummaryKind.SHORT].previous == "so far"
    assert len(after.tracks[SummaryKind.LONG].pending) == 2


def test_after_a_failure_the_messages_stay_and_the_next_try_waits_one_cadence():
    state = failed(fed(2), SummaryKind.SHORT, G)
    assert due_(state) == [] and SummaryKind.SHORT in due_(fed(2, state))
    assert len(fed(2, state).tracks[SummaryKind.SHORT].pending) == 4


def test_word_limits_follow_the_design():
    assert word_limit(SummaryKind.SHORT, 100, SummarizerSettings(), 8192) == 75
    assert word_limit(SummaryKind.SHORT, 5000, SummarizerSettings(), 8192) == 750
    assert word_limit(SummaryKind.LONG, 5000, SummarizerSettings(), 8192) == 3000
    # no more than the model's reply holds: asked for 3,000 words in 1,024 tokens, it stopped mid-sentence
    assert word_limit(SummaryKind.LONG, 5000, SummarizerSettings(), 1024) == 614
    assert word_limit(SummaryKind.SHORT, 5000, SummarizerSettings(), 1024) == 614
    assert clip_words("a b c d", 2) == "a b"


def test_a_summary_prompt_names_a_display_named_speaker_by_its_name():
    from services.summarizer.prompt import build_messages

    state = evolve(SessionSummaries(), msg(0).model_copy(update={"peer_id": "u-7f3a", "author_name": "Maria Lopez"}), G)
    state = evolve(state, msg(1), G)
    user = build_messages(SummaryKind.SHORT, "", state.tracks[SummaryKind.SHORT].pending, 100)[-1]["content"]
    assert 'speaker="Maria Lopez">t0<' in user and 'speaker="a">t1<' in user


def words(text: str) -> int:
    return len(text.split())


def test_a_backlog_is_summarised_in_pieces_that_shrink_after_each_failure_and_the_rest_waits():
    state = SessionSummaries()
    for i in range(30):
        state = evolve(state, msg(i).model_copy(update={"content": "word " * 100}), G)
    track = state.tracks[SummaryKind.LONG]
    # before, every attempt read all 30 (3,000 words) and each retry more: past the model's context for good
    assert [line.seq for line in portion(track, 1000, words)] == list(range(1, 11))
    once = failed(state, SummaryKind.LONG, G, Attempt(Failure.TOO_LONG, 10, 1000))
    assert len(portion(once.tracks[SummaryKind.LONG], 1000, words)) == 5
    twice = failed(once, SummaryKind.LONG, G, Attempt(Failure.TOO_LONG, 5, 500))
    assert len(portion(twice.tracks[SummaryKind.LONG], 1000, words)) == 2
    outage = failed(twice, SummaryKind.LONG, G)  # the model away, not refusing: the room stays
    assert len(portion(outage.tracks[SummaryKind.LONG], 1000, words)) == 2
    assert len(portion(track, 10, words)) == 1  # a message longer than the room still goes, alone
    done = summarised(twice, summary(SummaryKind.LONG, "ten of them", 10))
    assert [line.seq for line in done.tracks[SummaryKind.LONG].pending] == list(range(11, 31))
    assert SummaryKind.LONG in due_(done)  # the rest is due at once: 20 pending, over the cadence of 4
    # the room that worked is kept: back at the setting, every other call failed and messages fell out
    assert len(portion(done.tracks[SummaryKind.LONG], 1000, words)) == 2


def with_a_model_refusing(refused: str, n: int):
    """What the shell makes of `n` messages when the model refuses every call holding message `refused`:
    the messages left out, and each summary as (kind, first seq, last seq)."""
    state, left_out, summaries = SessionSummaries(), [], []
    for i in range(n):
        state = evolve(state, msg(i), G)
        for kind in due_(state):
            while kind in due_(state):  # as the shell: past a message left out, the rest at once if due
                lines = portion(state.tracks[kind], 1000, words)
                if refused in (line.message_id for line in lines):
                    state, gone = after_failure(state, kind, G, Attempt(Failure.REFUSED, len(lines), 1000))
                    left_out += [gone] if gone else []
                    continue
                summaries.append((kind, lines[0].seq, lines[-1].seq))
                state = summarised(state, summary(kind, "so far", lines[-1].seq))
    return left_out, summaries


def test_one_message_the_model_refuses_is_dead_lettered_alone_and_the_next_summary_comes_at_its_cadence():
    # kept and sent first in every call, it held each kind back until the byte bound dropped hundreds of
    # messages with it: 1,500 messages, the first short summary at message 650, 474 dropped unsummarised
    left_out, summaries = with_a_model_refusing("m5", 40)  # seq 6
    assert [(d.kind, d.message_id, d.first_seq, d.last_seq) for d in left_out] == [
        (SummaryKind.SHORT, "m5", 6, 6),
        (SummaryKind.LONG, "m5", 6, 6),
    ]
    # found by calls half as big each time, a cadence apart (short: 5-6 refused, then 5 and 6 alone at
    # message 8; long: 5-8, 5-6, then 5 and 6 alone at message 16); the summary past it then, the rest on time
    for kind, every, found in ((SummaryKind.SHORT, 2, 8), (SummaryKind.LONG, 4, 16)):
        mine = [(first, last) for k, first, last in summaries if k == kind]
        covered = [seq for first, last in mine for seq in range(first, last + 1)]
        assert covered == [seq for seq in range(1, 41) if seq != 6]  # each other message once, in order
        assert [last for _, last in mine if last > 6] == list(range(found, 41, every))
