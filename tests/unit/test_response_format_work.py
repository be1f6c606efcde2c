"""A caller's response_format is applied in bounded work: however its $refs, allOf and $schema combine, a
check ends within about a second of CPU, and a real answer is checked in full. (CPU time, not the wall
clock: a CI run beside other work took 3.7 s of wall clock for a check of well under a second of CPU.)"""

from __future__ import annotations

import time

import pytest

from services.dialectic import response_format as rf
from services.errors import InvalidArgument


def doubling_refs(levels: int) -> dict:
    """Each level checks the next one twice: 2^levels checks, in a schema of 70 bytes a level."""
    defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 2} for i in range(levels)}
    return {"$defs": {**defs, f"a{levels}": {"type": "object"}}, "$ref": "#/$defs/a0"}


def test_a_schema_whose_refs_multiply_is_refused_at_once_naming_why():
    schema = rf.parse(None, doubling_refs(60))  # 2^60 checks: the request's thread never ended
    started = time.thread_time()
    with pytest.raises(InvalidArgument, match="takes over 50,000 steps; its \\$refs with allOf"):
        rf.check(schema)
    assert time.thread_time() - started < 2


def test_a_recursive_schema_given_a_deeply_nested_answer_reports_a_problem_in_bounded_time():
    twice = {"allOf": [{"items": {"$ref": "#/$defs/a"}}] * 2}
    schema = rf.parse(None, {"$defs": {"a": twice}, "$ref": "#/$defs/a"})
    rf.check(schema)
    answer: list = []
    for _ in range(30):  # 60 characters of answer: 2^30 checks
        answer = [answer]
    started = time.thread_time()
    assert rf.problems(schema, answer) == [
        "- (root): checking the answer against the schema took over 50,000 steps; answer more simply"
    ]
    assert time.thread_time() - started < 2


def test_a_subschema_naming_its_own_dialect_still_runs_patterns_on_re2():
    dialect = "https://json-schema.org/draft/2020-12/schema"
    inner = {"$schema": dialect, "type": "string", "pattern": "^(a|a)+$"}
    schema = rf.parse(None, {"type": "object", "properties": {"x": inner}})
    rf.check(schema)
    started = time.thread_time()  # on Python's re, 24 characters took 1.4 s and each 2 more four times that
    assert len(rf.problems(schema, {"x": "a" * 40 + "b"})) == 1
    assert time.thread_time() - started < 0.5


def test_an_answer_of_two_thousand_objects_is_checked_in_full():
    item = {"type": "object", "properties": {k: {"type": "string"} for k in "abcde"}, "required": list("abcde")}
    schema = rf.parse(None, {"type": "array", "items": item})
    rf.check(schema)
    assert rf.problems(schema, [dict.fromkeys("abcde", "x")] * 2000) == []
    wrong = [dict.fromkeys("abcde", "x")] * 1999 + [{"a": 1}]
    assert len(rf.problems(schema, wrong)) == 5  # a's type, and b-e required
