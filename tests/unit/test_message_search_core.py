"""The pure parts of hybrid message search: what text stands for a message, and score fusion."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from projections.message_ranking import (
    AUTHOR_BOOST,
    NEIGHBOUR_WEIGHT,
    REPORT_LAG_DAYS,
    SESSION_WEIGHT,
    SHORT_PENALTY,
    TIME_BOOST,
    WHEN_BOOST,
    asks_when,
    depth,
    fused_score,
    list_stats,
    name_parts,
    placed_in_time,
    reported,
    standardised,
    without_names,
)
from projections.time_expressions import Period
from services.embedder.policy import embedded, previous_turn, text_to_embed
from services.events import MessageAppended, MessagesEmbedded, ProducerInfo, SessionCreated, decode, encode

P = ProducerInfo(component="test", version="0")


def _message(content: str = "I adopted a greyhound", peer: str = "alice", name: str = "") -> MessageAppended:
    return MessageAppended(
        workspace_id="w",
        session_id="s",
        message_id="m1",
        peer_id=peer,
        author_name=name,
        content=content,
        created_at=datetime(2026, 5, 8, 13, 56, tzinfo=UTC),
        producer=P,
    )


def test_only_messages_with_text_are_embedded():
    assert text_to_embed(_message("   ")) is None
    assert text_to_embed(SessionCreated(workspace_id="w", session_id="s", producer=P)) is None


def test_a_message_is_embedded_with_its_date_its_author_and_the_turn_it_answers():
    assert text_to_embed(_message(peer="Ann_Lee")) == "[8 May 2026] Ann Lee: I adopted a greyhound"
    before = previous_turn(_message("Did you get a dog?", peer="bob"))
    assert text_to_embed(_message("Yes, last week!"), before) == (
        "[8 May 2026] alice: Yes, last week! (replying to bob: Did you get a dog?)"
    )


def test_an_author_with_a_display_name_is_embedded_by_it_not_by_its_id():
    assert (
        text_to_embed(_message(peer="u-7f3a", name="Maria Lopez")) == "[8 May 2026] Maria Lopez: I adopted a greyhound"
    )
    before = previous_turn(_message("Did you get a dog?", peer="u-91bc", name="Tom"))
    assert text_to_embed(_message("Yes!", peer="u-7f3a", name="Maria Lopez"), before) == (
        "[8 May 2026] Maria Lopez: Yes! (replying to Tom: Did you get a dog?)"
    )


def test_only_the_start_of_a_long_previous_turn_is_kept():
    kept = previous_turn(_message("x" * 10_000))
    assert kept == {"author": "alice", "content": "x" * 500}


def test_embedded_event_is_keyed_by_session_caused_by_the_message_and_survives_the_wire():
    message = _message()
    event = embedded(message, [0.5, 0.25], "mini", P)
    assert event.key == "w/s" and event.causation_id == message.event_id
    assert event.messages[0].message_id == "m1" and event.messages[0].vector == (0.5, 0.25)
    assert decode(encode(event)) == event


def test_messages_embedded_refuses_a_message_of_another_session():
    with pytest.raises(ValueError, match="another|keyed"):
        MessagesEmbedded(
            workspace_id="w",
            session_id="s",
            embedding_model="mini",
            producer=P,
            messages=[{"message_id": "m", "session_id": "other", "vector": [1.0]}],
        )


def test_fusion_adds_each_lists_z_score_so_a_message_strong_in_both_ranks_first():
    scores = {"both": (0.9, 6.0), "sem": (0.95, 0.0), "lex": (0.3, 9.0), "none": (0.3, 0.0)}
    lists = ([0.9, 0.95, 0.3], [6.0, 9.0])
    ranked = [m for m, _ in fused_score(scores, lists, {})]
    assert ranked[0] == "both" and ranked[-1] == "none"


def test_an_unembedded_message_counts_as_its_lists_lowest_candidate():
    scores = {"new": (None, 1.0), "low": (0.1, 1.0), "high": (0.9, 1.0)}
    got = dict(fused_score(scores, ([0.1, 0.9], [1.0]), {}))
    assert got["new"] == pytest.approx(got["low"]) and got["high"] > got["low"]


def test_a_turn_next_to_a_strong_match_gains_a_share_of_its_score():
    scores = {"question": (0.9, 9.0), "reply": (0.2, 0.0), "far": (0.2, 0.0)}
    lists = ([0.9, 0.2, 0.2], [9.0, 0.0, 0.0])
    alone = dict(fused_score(scores, lists, {}))
    got = dict(fused_score(scores, lists, {"reply": ["question"], "question": ["reply"]}))
    assert got["reply"] - got["far"] == pytest.approx(NEIGHBOUR_WEIGHT * alone["question"])
    assert [m for m, _ in fused_score(scores, lists, {"reply": ["question"]})][:2] == ["question", "reply"]


def test_fusion_of_nothing_is_empty_and_a_lone_candidate_counts_one_in_each_list():
    assert fused_score({}, ([], []), {}) == []
    assert fused_score({"a": (0.5, 1.0)}, ([0.5], [1.0]), {}) == [("a", 2.0)]


def test_the_only_lexical_match_outranks_a_neighbour_that_does_not_match():
    # "cobblestones" is in one message only: its list has no spread, yet it is the one exact match
    scores = {"match": (0.40, 7.5), "neighbour": (0.45, 0.0), "far": (0.10, 0.0)}
    lists = ([0.40, 0.45, 0.10], [7.5])
    adjacent = {"match": ["neighbour"], "neighbour": ["match"]}
    got = dict(fused_score(scores, lists, adjacent))
    semantic_only = dict(fused_score(scores, (lists[0], []), adjacent))
    assert sorted(got, key=got.__getitem__, reverse=True) == ["match", "neighbour", "far"]
    assert got["match"] - semantic_only["match"] == pytest.approx(1.0)
    assert semantic_only["match"] < semantic_only["neighbour"]  # what a lexical z of 0 left it at


def test_in_a_list_without_spread_what_scores_as_its_candidates_counts_one_and_the_rest_zero():
    stats = list_stats([3.0, 3.0])
    assert [standardised(s, stats) for s in (3.0, 4.0, 0.0, None)] == [1.0, 1.0, 0.0, 0.0]
    assert standardised(0.0, list_stats([])) == 0.0  # an empty list counts for no one


def test_candidate_depth_is_at_least_fifty_four_per_result_up_to_25_then_two_more_per_result():
    assert [depth(n) for n in (1, 10, 25, 26, 50, 100)] == [50, 50, 100, 102, 150, 250]


def test_a_message_by_a_peer_the_query_names_gains_the_author_boost_and_outranks_a_slightly_better_match():
    scores = {"by_named": (0.8, 5.0), "by_other": (0.85, 5.5), "far": (0.1, 0.0)}
    lists = ([0.8, 0.85, 0.1], [5.0, 5.5])
    plain = dict(fused_score(scores, lists, {}))
    got = fused_score(scores, lists, {}, by_named=frozenset({"by_named"}))
    assert [m for m, _ in got][:2] == ["by_named", "by_other"]
    assert dict(got)["by_named"] - plain["by_named"] == pytest.approx(AUTHOR_BOOST)


def test_a_message_sent_in_a_period_the_query_names_gains_the_time_boost():
    scores = {"then": (0.8, 5.0), "other": (0.8, 5.0)}
    lists = ([0.8, 0.8, 0.1], [5.0, 5.0, 1.0])
    got = dict(fused_score(scores, lists, {}, in_period=frozenset({"then"})))
    assert got["then"] - got["other"] == pytest.approx(TIME_BOOST)


@pytest.mark.parametrize(
    "question",
    [
        "When did Ann move to Lisbon?",
        "what year was the house built?",
        "Which month is the wedding in?",
        "How long ago did they meet?",
        "How long has Bo played the cello?",
        '"When is the next game?"',
    ],
)
def test_a_question_of_when_is_recognised_as_one(question):
    assert asks_when(question)


@pytest.mark.parametrize(
    "question", ["Where did Ann move?", "How long is the hike?", "Did Ann say when she moves?", "Whenever is fine"]
)
def test_a_question_that_does_not_ask_when_is_not_one(question):
    assert not asks_when(question)


def test_a_turn_placed_in_time_gains_the_when_boost_over_an_equal_turn():
    scores = {"yesterday": (0.8, 5.0), "undated": (0.8, 5.0)}
    lists = ([0.8, 0.8, 0.1], [5.0, 5.0, 1.0])
    got = dict(fused_score(scores, lists, {}, placed=frozenset({"yesterday"})))
    assert got["yesterday"] - got["undated"] == pytest.approx(WHEN_BOOST)
    assert placed_in_time({"went", "yesterday"}) and placed_in_time({"last", "week"}) and placed_in_time({"juli"})
    assert not placed_in_time({"went", "museum"})


def test_a_short_turn_loses_the_short_penalty_against_an_equal_longer_one():
    scores = {"bye": (0.8, 5.0), "story": (0.8, 5.0)}
    lists = ([0.8, 0.8, 0.1], [5.0, 5.0, 1.0])
    got = fused_score(scores, lists, {}, short=frozenset({"bye"}))
    assert [m for m, _ in got] == ["story", "bye"]
    assert dict(got)["story"] - dict(got)["bye"] == pytest.approx(SHORT_PENALTY)


def test_a_named_day_or_month_reaches_past_its_end_by_the_report_lag_and_a_year_does_not():
    day = Period(datetime(2023, 5, 8, tzinfo=UTC), datetime(2023, 5, 9, tzinfo=UTC))
    month = Period(datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC))
    year = Period(datetime(2023, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC))
    assert reported(day) == Period(day.start, day.end + timedelta(days=REPORT_LAG_DAYS))
    assert reported(month) == Period(month.start, month.end + timedelta(days=REPORT_LAG_DAYS))
    assert reported(year) == year


def test_a_query_loses_the_names_of_the_peers_it_names_and_nothing_else():
    assert without_names("What did Joanna's friend Nate recommend?", ["Joanna", "Nate"]) == "What did friend recommend?"
    assert without_names("Did ann lee or Ann_Lee call?", ["Ann_Lee"]) == "Did or call?"
    assert without_names("Where does Annabel live?", ["Ann"]) == "Where does Annabel live?"
    assert without_names("What did Maria say?", ["Maria Lopez"]) == "What did say?"
    assert without_names("Bob?", ["bob"]) == "Bob?"  # nothing but a name: kept, or there is nothing to embed


def test_a_name_is_taken_out_by_the_parts_its_lexemes_come_from_whatever_surrounds_them():
    name = "C++ (Carol) [x]* Travel"
    assert without_names("What did Carol's travel agent say?", [name]) == "What did agent say?"
    assert without_names("what did (carol) book", [name]) == "what did book"
    assert without_names("Did Ann-Marie call?", ["Ann-Marie O'Neil"]) == "Did call?"
    assert without_names("Did Jo call Al today?", ["Jo", "Al"]) == "Did call today?"  # two letters are a name


def test_a_part_of_a_name_shorter_than_two_characters_is_left_in_the_query():
    assert without_names("does carol like vitamin C or plan X", ["C++ (Carol) [x]* Travel"]) == (
        "does like vitamin C or plan X"
    )
    assert name_parts("C++ (Carol) [x]* Travel") == ["C", "Carol", "x", "Travel"]
    assert name_parts("Ann_Lee") == ["Ann", "Lee"]


def test_a_name_with_a_dotted_capital_i_is_taken_out_of_the_query():
    # lowered whole, "İ" became two code points, which a case-blind pattern then missed in the query
    assert without_names("What did İlker say?", ["İlker Yılmaz"]) == "What did say?"
    assert without_names("Was İLKER's trip long?", ["İlker"]) == "Was trip long?"
    assert without_names("Did Yılmaz call İ?", ["İ Yılmaz"]) == "Did call İ?"  # still one character, no name


def test_stripping_names_takes_no_longer_for_a_long_query_than_for_a_short_one():
    # 20,000 peers named by "Lopez": one pattern of all their names took 0.8-1.3 s a call on a 10,000-character
    # query (11 times its 100-character head); compared with the short query, a loaded machine slows both alike
    names = [f"Peer{i} Lopez" for i in range(20_000)]
    long = ("what did Lopez say about the garden " * 300)[:10_000]
    short = long[:100]
    took: dict[str, list[float]] = {"long": [], "short": []}
    for _ in range(3):  # interleaved, the best of three each
        for name, query in (("long", long), ("short", short)):
            start = time.perf_counter()
            stripped = without_names(query, names)
            took[name].append(time.perf_counter() - start)
            assert stripped == " ".join(query.replace("Lopez", "").split())
    assert min(took["long"]) < 4 * min(took["short"]) + 0.02


def test_a_turn_in_the_session_of_the_best_match_outranks_an_equal_turn_elsewhere():
    scores = {"best": (0.9, 9.0), "same": (0.5, 2.0), "elsewhere": (0.5, 2.0)}
    lists = ([0.9, 0.5, 0.5], [9.0, 2.0, 2.0])
    plain = dict(fused_score(scores, lists, {}))
    got = fused_score(scores, lists, {}, session_of={"best": "s1", "same": "s1", "elsewhere": "s2"})
    assert [m for m, _ in got] == ["best", "same", "elsewhere"]
    assert dict(got)["same"] - plain["same"] == pytest.approx(SESSION_WEIGHT * plain["best"])
    assert plain["elsewhere"] < 0 and dict(got)["elsewhere"] == pytest.approx(plain["elsewhere"])  # no penalty


def test_the_session_lead_ignores_who_speaks_and_when():
    scores = {"best": (0.9, 9.0), "same": (0.5, 2.0), "low": (0.1, 0.0)}
    lists = ([0.9, 0.5, 0.1], [9.0, 2.0, 0.0])
    sessions = {"best": "s1", "same": "s1", "low": "s2"}
    plain = dict(fused_score(scores, lists, {}, session_of=sessions))
    lifted = dict(
        fused_score(scores, lists, {}, session_of=sessions, by_named=frozenset({"best"}), in_period=frozenset({"best"}))
    )
    assert lifted["same"] == pytest.approx(plain["same"])
    assert lifted["best"] - plain["best"] == pytest.approx(AUTHOR_BOOST + TIME_BOOST)
