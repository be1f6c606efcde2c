"""Chat's response_format runs a caller's regular expressions in linear time, or refuses them."""

from __future__ import annotations

import time

import pytest

from services.dialectic import response_format as rf
from services.errors import InvalidArgument

# exponential on a backtracking engine: Python's re takes minutes on these inputs
EVIL = "^(a|aa)+$"
ATTACK = "a" * 40 + "!"


def test_a_catastrophic_pattern_is_checked_in_milliseconds_and_reported():
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": EVIL}}}
    rf.check(schema)
    started = time.thread_time()
    found = rf.problems(schema, {"name": ATTACK})
    assert time.thread_time() - started < 0.5
    assert len(found) == 1 and "does not match" in found[0] and found[0].startswith("- name:")
    assert rf.problems(schema, {"name": "aaaa"}) == []


def test_pattern_properties_and_additional_properties_use_the_same_engine():
    schema = {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}
    rf.check(schema)
    started = time.thread_time()
    found = rf.problems(schema, {ATTACK: 1, "aa": "not an integer"})
    assert time.thread_time() - started < 0.5
    assert any("additional properties are not allowed" in p and ATTACK in p for p in found)
    assert any(p.startswith("- aa:") for p in found)


@pytest.mark.parametrize("pattern", [r"^(a)\1$", r"^(?=a)a$", r"(?<!x)y"])
def test_a_pattern_needing_backtracking_is_refused_naming_it(pattern):
    with pytest.raises(InvalidArgument, match="cannot be evaluated in linear time"):
        rf.check({"type": "string", "pattern": pattern})


def test_unevaluated_properties_beside_pattern_properties_is_refused():
    with pytest.raises(InvalidArgument, match="unevaluatedProperties together with patternProperties"):
        rf.check({"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False})
