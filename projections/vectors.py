"""The projections' vector type: pgvector's column type, its parameters written by orjson.

pgvector's own type turns a vector into Postgres's text form with one `str()` per element. For the
384 floats of an embedding that was half of a rebuild's CPU (py-spy over a replay of 202,041 events,
150,000 of them carrying a vector). orjson writes the same text (shortest round-trip decimals, as
`str()` does) in C; Postgres reads it as before, so a rebuilt row equals a live one.
"""

from __future__ import annotations

from typing import Any

import orjson
from pgvector import Vector as PgVector
from pgvector.sqlalchemy import VECTOR


class Vector(VECTOR):
    cache_ok = True

    def bind_processor(self, dialect: Any) -> Any:
        def process(value: Any) -> str | None:
            if value is None:
                return None
            if isinstance(value, PgVector):
                value = value.to_list()
            return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()

        return process
