"""Matching rows by a list of composite keys with one array parameter per key column."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Text, func, literal, select, tuple_
from sqlalchemy.dialects.postgresql import ARRAY


def among(columns: Sequence[ColumnElement], keys: Sequence[tuple[str, ...]]) -> ColumnElement[bool]:
    """`(columns) IN keys` for text key columns, the keys bound as one array per column.

    A plain `IN` binds one parameter per value, so its statement's text changes with the number of keys
    and psycopg converts any statement of more than 50 parameters again on every execution: a batch of
    2,000 messages bound 4,000 (8 % of a rebuild's CPU)."""
    arrays = [literal([key[i] for key in keys], ARRAY(Text)) for i in range(len(columns))]
    return tuple_(*columns).in_(select(*(func.unnest(a) for a in arrays)))
