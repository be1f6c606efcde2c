"""CloneSession's event limit, without a broker: a clone is one transaction on the log, every join and leave
of its replayed membership periods a record of it besides the copies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.api.clones import CloneRequest, Source, clone_events
from services.errors import FailedPrecondition
from services.events import ProducerInfo

P = ProducerInfo(component="test", version="0")
T = datetime(2026, 1, 1, tzinfo=UTC)


def message(seq: int) -> dict:
    return {
        "workspace_id": "w",
        "session_id": "s",
        "message_id": f"m{seq}",
        "seq": seq,
        "peer_id": "alice",
        "author_name": None,
        "content": f"turn {seq}",
        "created_at": T,
        "metadata": {},
    }


def churn(periods: int) -> list[dict]:
    """alice, there throughout, and `periods` visits of a bot, each joining and leaving before message 1."""
    alice = {
        "peer_id": "alice",
        "observe_me": None,
        "observe_others": None,
        "joined_at": T,
        "joined_after_seq": 0,
        "left_at": None,
        "left_after_seq": None,
    }
    at = [T + timedelta(seconds=i) for i in range(periods)]
    visits = [{**alice, "peer_id": "bot", "joined_at": t, "left_at": t, "left_after_seq": 0} for t in at]
    return [alice, *visits]


def clone(periods: int) -> list:
    source = Source(
        metadata={},
        messages=[message(1), message(2)],
        periods=churn(periods),
        session_levels=[],
        message_levels={},
        origins={},
        whole=True,
    )
    ids = iter(range(10))
    return clone_events(CloneRequest("w", "s", "c"), source, P, lambda: f"copy-{next(ids)}")


def test_a_clone_whose_history_passes_the_event_limit_is_refused_failed_precondition():
    # 50,500 periods were 101,000 records in one transaction, past the producer's queue of 100,000:
    # UNAVAILABLE ("retry later") on every retry; now refused before anything is appended, saying why
    with pytest.raises(FailedPrecondition) as refused:
        clone(25_000)  # the session, alice's join, the bot's 50,000 joins and leaves, 2 copies
    said = str(refused.value)
    assert "takes 50004 events, over the 50000 one write may hold" in said
    assert "50001 joins and leaves of its membership periods" in said and "besides its 2 messages" in said
    assert "clone it up to an earlier message (up_to_message_id)" in said
    assert len(clone(24_998)) == 50_000  # at the limit, it is cloned
