"""Embeddings inside events: float32 values, on the log as base64 of their little-endian bytes.

A 384-dimension vector written as JSON decimals took 7.7 kB of an 8.7 kB event, and reading one back cost
more than the rest of the event: orjson parsing 384 decimals, pydantic checking 384 floats, then the
projection packing them again for Postgres (tests/bench/README.md, Rebuild, stop 55). As base64 it takes
2 kB and stays bytes from the log to Postgres's COPY. Postgres stores vectors as float32 (pgvector's
`vector`), so float32 loses nothing that a projection kept.

Events written before (schema versions that held lists of numbers) still read: a list or tuple of
numbers is accepted as well as the base64 text.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterator
from typing import Any

import numpy as np
from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

_FLOAT32 = np.dtype("<f4")


class PackedVector:
    """An immutable vector of float32 values; compares equal to another of the same values, or to a
    sequence of numbers that are those values."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes = b"") -> None:
        if len(raw) % _FLOAT32.itemsize:
            raise ValueError(f"a vector's bytes come in fours (float32); got {len(raw)}")
        self._raw = bytes(raw)

    @classmethod
    def of(cls, value: Any) -> PackedVector:
        """`value` as a vector: a PackedVector, its base64 text (the log's form), or numbers (a list, a
        tuple, a numpy array: an older event's form, or a model's output). ValueError for anything else,
        or for a value that is not finite (Postgres refuses those)."""
        if isinstance(value, PackedVector):
            return value
        if isinstance(value, str):
            try:
                return cls(binascii.a2b_base64(value, strict_mode=True))
            except binascii.Error as exc:
                raise ValueError(f"a vector's text is base64 of float32 values: {exc}") from None
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # what overflows is refused just below
                values = np.asarray(value, dtype=_FLOAT32)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"a vector is a list of numbers: {exc}") from None
        if values.ndim != 1:  # a lone number, or lists in a list
            raise ValueError("a vector is base64 text or a flat list of numbers")
        if not np.isfinite(values).all():
            raise ValueError("a vector's values must be finite float32 numbers")
        return cls(values.tobytes())

    def text(self) -> str:
        """The log's form: base64 of the little-endian float32 bytes."""
        return binascii.b2a_base64(self._raw, newline=False).decode("ascii")

    def array(self) -> np.ndarray:
        """The values as a read-only float32 array (no copy)."""
        return np.frombuffer(self._raw, dtype=_FLOAT32)

    def tolist(self) -> list[float]:
        return self.array().tolist()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        values = self.array()  # read-only: a caller that writes asks for a copy
        return values if dtype is None and not copy else values.astype(dtype or _FLOAT32)

    def __len__(self) -> int:
        return len(self._raw) // _FLOAT32.itemsize

    def __iter__(self) -> Iterator[float]:
        return iter(self.tolist())

    def __getitem__(self, index: int | slice) -> Any:
        return self.array()[index].tolist()  # a float, or a list for a slice

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedVector):
            return self._raw == other._raw
        if isinstance(other, (list, tuple)):  # the same vector once made float32, as it would be stored
            try:
                return self._raw == PackedVector.of(other)._raw
            except ValueError:  # not finite numbers: not a vector this could be
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"PackedVector({len(self)} values)"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.of,
            json_schema_input_schema=core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(
                PackedVector.text, return_schema=core_schema.str_schema()
            ),
        )


EMPTY = PackedVector()
