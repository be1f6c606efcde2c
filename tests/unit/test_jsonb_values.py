"""Metadata read back from jsonb is written by orjson as the log holds it: ints past 64 bits as floats."""

from __future__ import annotations

import orjson

from services.api.jsonb import as_logged, json_bytes

# as psycopg reads {"n": 1e20, "low": -1e19} back from jsonb: exact ints, which orjson refuses to write
READ_BACK = {"n": 10**20, "low": -(10**19), "list": [10**20, 2**64 - 1, -(2**63)], "flag": True, "text": "1e20"}
# as orjson reads the same JSON from the log
LOGGED = orjson.loads(
    b'{"n": 1e20, "low": -1e19, "list": [1e20, 18446744073709551615, -9223372036854775808], '
    b'"flag": true, "text": "1e20"}'
)


def test_metadata_read_back_with_numbers_past_64_bits_is_what_the_log_holds():
    assert as_logged(READ_BACK) == LOGGED
    assert [type(x) for x in as_logged(READ_BACK)["list"]] == [float, int, int]  # the 64-bit ints stay ints
    assert orjson.loads(json_bytes(READ_BACK)) == LOGGED


def test_metadata_orjson_can_write_is_left_as_it_is():
    plain = {"n": 1, "nested": {"x": [1.5, None]}}
    assert as_logged(plain) is plain
    assert json_bytes(plain) == orjson.dumps(plain)
