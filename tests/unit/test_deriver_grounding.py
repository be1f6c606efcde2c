"""Grounding a model's span in its message: typography aside, on word boundaries, stored as the message says it."""

from __future__ import annotations

import unicodedata

import pytest

from services.deriver.grounding import locate
from services.deriver.prompt import ExtractedFact
from services.events import ObservationAdded, ObservationRejected
from tests.unit.test_deriver_core import verdicts

NFD_ZURICH = unicodedata.normalize("NFD", "I moved to Zürich in 2020")


@pytest.mark.parametrize(
    "message, span",
    [
        ("I\u2019m a nurse at St. Mary\u2019s", "I'm a nurse"),
        ("I'm a nurse", "I\u2019m a nurse"),
        ("She said \u201cI\u2019m a nurse\u201d", 'said "I\'m a nurse"'),
        ("I work 9\u20135 as a nurse", "I work 9-5 as a nurse"),
        ("I am a nurse\u2026 mostly", "I am a nurse... mostly"),
        (NFD_ZURICH, "I moved to Zürich"),
        ("\uff29 am a nurse", "I am a nurse"),
        ("I am a nu\u00adrse", "I am a nurse"),
        ("I am a\u00a0nurse", "I am a nurse"),
    ],
    ids=[
        "curly-message",
        "curly-span",
        "double-quotes",
        "en-dash",
        "ellipsis",
        "nfd",
        "full-width",
        "soft-hyphen",
        "nbsp",
    ],
)
def test_a_span_with_straight_quotes_grounds_in_a_message_with_curly_ones(message, span):
    content = "a moved to Zürich in 2020" if "rich" in span else "a is a nurse"
    out = verdicts([ExtractedFact(content=content, message_id="m0", span=span)], texts=(message,))
    assert [type(e) for e in out.events] == [ObservationAdded]


def test_a_span_inside_a_word_is_not_grounded():
    fact = ExtractedFact(content="a is the workspace admin", message_id="m0", span="admin")
    out = verdicts([fact], texts=("I play badminton on sundays",))
    assert [type(e) for e in out.events] == [ObservationRejected]
    assert "span 'admin' is not in message" in out.events[0].reason
    assert locate("2", "I am 25") is None and locate("rust", "I trust you") is None
    # whole words ground; so does any run of a script written without spaces
    assert locate("admin", "I am the (admin).") == "admin"
    assert locate("北京", "我住在北京") == "北京"
    assert locate("Mary", "It is Mary\u2019s") == "Mary"


def test_a_span_with_a_character_its_message_lacks_is_not_grounded():
    assert locate("I am a nurse\u200b", "I am a nurse") is None
    assert locate("nurse\u2026", "I am a nurse.") is None
    # ...while one copied with the message's own zero-width non-joiner grounds (Persian writes words with it)
    assert locate("می\u200cخواهم", "من می\u200cخواهم بروم") == "می\u200cخواهم"


def test_the_stored_span_is_the_messages_own_text():
    message = "Well, I\u2019m a  fire\u00adfighter now"
    fact = ExtractedFact(content="a is a firefighter", message_id="m0", span="i'm A FIREFIGHTER")
    out = verdicts([fact], texts=(message,))
    assert [s.span for s in out.events[0].sources] == ["I\u2019m a  fire\u00adfighter"]
    # the message's own characters, not the model's: "ü" as two code points, as the message has it
    assert locate("Zürich", NFD_ZURICH) == unicodedata.normalize("NFD", "Zürich")
    assert locate("I AM A ﬁREﬁGHTER", "i am a firefighter") == "i am a firefighter"
    # a span takes whole characters of the message: all of a "ﬁ" or of a "…", never a part
    assert locate("fi", "the ﬁ ligature") == "ﬁ" and locate("nurse.", "I am a nurse\u2026") is None
