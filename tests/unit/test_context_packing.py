"""GetContext packing never exceeds the budget and follows the design's order of priorities."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.api.packing import Line, Obs, pack
from services.llm.tokens import count_tokens

words = st.text(alphabet=st.sampled_from("abcdefgh ijk.,é😀"), min_size=0, max_size=300)


@settings(max_examples=300, deadline=None)
@given(budget=st.integers(0, 3000), obs=st.lists(words, max_size=30), card=st.lists(words, max_size=10),
       short=words, long=st.text(max_size=2000), msgs=st.lists(words, max_size=40))
def test_the_packed_context_never_exceeds_the_budget(budget, obs, card, short, long, msgs):
    ranked = [Obs(f"o{i}", t, "explicit", (i,)) for i, t in enumerate(obs)]
    lines = [Line(f"m{i}", "alice" if i % 2 else "bob", t) for i, t in enumerate(msgs)]
    out = pack(budget, ranked, card, short, long, lines, count_tokens)
    measured = (count_tokens(out.representation) + count_tokens("\n".join(out.card)) + count_tokens(out.summary)
                + sum(count_tokens(f"{x.peer_id}: {x.content}") for x in out.messages))
    assert measured == out.tokens["total"] <= budget


def test_the_lowest_ranked_observations_go_first_when_the_representation_is_too_big():
    ranked = [Obs(f"o{i}", f"fact number {i} " * 5, "explicit", (10 - i,)) for i in range(10)]
    out = pack(60, ranked, [], "", "", [], count_tokens)
    kept = {o.observation_id for o in out.observations}
    assert kept and kept == {f"o{i}" for i in range(len(kept))}  # a prefix of the ranking


def test_the_summary_is_the_long_one_when_it_fits_and_is_longer_else_the_short_one():
    long, short = "long " * 100, "short " * 10
    assert pack(1000, [], [], short, long, [], count_tokens).summary_kind == "long"
    assert pack(200, [], [], short, long, [], count_tokens).summary_kind == "short"  # long > 0.4 × 200
    assert pack(10, [], [], short, long, [], count_tokens).summary_kind == ""


def test_recent_messages_fill_the_rest_newest_first_and_come_back_in_time_order():
    newest_first = [Line(f"m{i}", "bob", f"message {i}") for i in range(9, -1, -1)]
    out = pack(20, [], [], "", "", newest_first, count_tokens)
    ids = [x.message_id for x in out.messages]
    assert ids == sorted(ids) and ids[-1] == "m9" and len(ids) < 10
