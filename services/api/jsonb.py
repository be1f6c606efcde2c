"""Values read from jsonb columns (metadata), made fit for orjson as the log's values are.

Postgres keeps a JSON number exactly: metadata sent as 1e20 reads back through psycopg as the int
100000000000000000000, which orjson refuses to write ("Integer exceeds 64-bit range"). On the log side
orjson reads such a number as a float, so that is what it becomes here too.
"""

from __future__ import annotations

from typing import Any

import orjson

# the ints orjson writes, and reads back as ints; past them it reads a JSON number as a float
_SMALLEST, _LARGEST = -(2**63), 2**64 - 1


def json_bytes(value: Any) -> bytes:
    """`value` as orjson writes it, with any int past 64 bits written as a float (and any other value JSON has
    no form for as its text: a size is all the callers want)."""
    try:
        return orjson.dumps(value, default=str)
    except orjson.JSONEncodeError:  # `default` is not asked about an int orjson refuses
        return orjson.dumps(_wide_ints_as_floats(value), default=str)


def as_logged(value: Any) -> Any:
    """`value` as an event on the log would hold it: any int past 64 bits as a float (else `value` itself)."""
    try:
        orjson.dumps(value)  # the common case, at C speed: nothing to change
    except orjson.JSONEncodeError:
        return _wide_ints_as_floats(value)
    return value


def _wide_ints_as_floats(value: Any) -> Any:
    # recursion stays shallow: check_metadata writes metadata with orjson, which refuses nesting past 255 levels
    if isinstance(value, dict):
        return {k: _wide_ints_as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wide_ints_as_floats(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not _SMALLEST <= value <= _LARGEST:
        return float(value)
    return value
