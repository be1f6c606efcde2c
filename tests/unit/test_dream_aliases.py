"""The short names a dream specialist is shown for observations are names no client's id can be, and only
whole ids in a text become names, in one pass: a client's ids such as "o2" or "0" keep their own observations
apart and leave dates, content and other ids as they were."""

from __future__ import annotations

from services.api.validation import ID_PATTERN
from services.dreamer.aliases import Aliases
from services.dreamer.edits import bare_id


def test_no_short_name_is_a_valid_observation_id_and_each_survives_bare_id():
    names = Aliases()
    shorts = [names.alias(f"id-{n}") for n in range(1000)]
    assert len(set(shorts)) == 1000
    assert not any(ID_PATTERN.fullmatch(s) for s in shorts)
    assert all(bare_id(s) == s and bare_id(f"[obs:{s}]") == s for s in shorts)


def test_client_ids_that_look_like_old_short_names_keep_their_own_observations_apart():
    names = Aliases()
    shown = names.in_text("[obs:o2] Bob lives in Oslo\n[obs:o1] Bob keeps bees", ["o2", "o1"])
    assert shown == "[obs:#1] Bob lives in Oslo\n[obs:#2] Bob keeps bees"
    assert names.unaliased({"outdated_id": "#1", "premise_ids": ["#2"]}) == {
        "outdated_id": "o2",
        "premise_ids": ["o1"],
    }
    # a full id still passes, and is not taken for a name
    assert names.unaliased({"outdated_id": "o1", "premise_ids": ["[obs:o2]"]}) == {
        "outdated_id": "o1",
        "premise_ids": ["o2"],
    }


def test_only_whole_observation_markers_change_in_a_tool_result_never_dates_content_or_other_ids():
    names = Aliases()
    text = "[obs:0] (explicit, 2026-01-10) Bob has 0 cats, see 01a2-ffff\n[msg:0] (2026-01-10 10:00 UTC) bob: 0\n[obs:01a2-ffff] x"
    assert names.in_text(text, ["0", "01a2-ffff"]) == (
        "[obs:#1] (explicit, 2026-01-10) Bob has 0 cats, see 01a2-ffff\n[msg:0] (2026-01-10 10:00 UTC) bob: 0\n[obs:#2] x"
    )


def test_a_refusal_shows_whole_ids_named_before_as_their_names_and_leaves_the_rest():
    names = Aliases()
    names.in_text("", ["0", "o1"])
    reply = "rejected: premise '0' was superseded or deleted; observation o1 already says that (2026-01-10, o10)"
    assert names.in_reply(reply) == (
        "rejected: premise '#1' was superseded or deleted; observation #2 already says that (2026-01-10, o10)"
    )


def test_a_name_is_rewritten_once_even_where_one_id_is_part_of_another():
    names = Aliases()
    shown = names.in_text("[obs:a] x\n[obs:a-b] y\n[obs:b] z", ["b", "a-b", "a"])
    assert shown == "[obs:#3] x\n[obs:#2] y\n[obs:#1] z"
