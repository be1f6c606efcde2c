"""Hypothesis strategies for any peerlog request, built field by field from its protobuf descriptor.

Each example draws a hostility rate: 0 gives a plausible request (ids from a small pool of existing and
missing ones, real tokens, valid timestamps), so success and NOT_FOUND paths are reached; higher rates
make more fields hostile (NUL and control characters, unicode, long strings, boundary and huge numbers,
NaN/±Inf, unknown enum numbers, out-of-range timestamps, deep or large Structs, huge repeated fields,
forged tokens, invalid UTF-8 on the wire). Every hostile choice is labelled with its input class, so a
run can report which classes it tried and a short run can leave out a class whose defect is still open.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from tests.fuzz.rpcs import Rpc

F = FieldDescriptor
GRPC_DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024  # what a default gRPC server accepts and a default client receives

# which pool a string field draws its plausible values from, by field name
KIND_BY_NAME = {
    "workspace_id": "workspace",
    "peer_id": "peer",
    "observer_id": "peer",
    "observed_id": "peer",
    "target_id": "peer",
    "perspective_peer_id": "peer",
    "assistant_peer_id": "peer",
    "author_peer_ids": "peer",
    "peer_ids": "peer",
    "session_id": "session",
    "session_ids": "session",
    "message_id": "message",
    "observation_id": "observation",
    "dream_id": "dream",
    "consistency_token": "consistency",
    "page_token": "page",
    "json_schema": "schema",
    "derivation": "derivation",
    "webhook_id": "webhook",
    "event_id": "event",
    "url": "url",
}
# response fields whose values feed the pools, so later requests can name real messages, tokens, …
HARVEST = {
    "message_id": "message",
    "message_ids": "message",
    "observation_id": "observation",
    "observation_ids": "observation",
    "dream_id": "dream",
    "consistency_token": "consistency",
    "next_page_token": "page",
    "webhook_id": "webhook",
    "event_id": "event",
}
POOL_CAP = 64


@dataclass
class Pools:
    """Values a plausible request is made of; seeded with existing and missing ids, grown from replies."""

    topic_prefix: str
    webhook_url: str  # a receiver the fuzz owns, on loopback: no delivery may leave the machine
    values: dict[str, list[str]] = field(
        default_factory=lambda: {
            "workspace": ["fz", "fz-b", "fz-missing"],
            "peer": ["alice", "bob", "carol", "peer-missing"],
            "session": ["s1", "s2", "s-missing"],
            "message": ["0190c6f2-0000-7000-8000-000000000000"],
            "observation": ["0190c6f2-0000-7000-8000-000000000001"],
            "dream": ["0190c6f2-0000-7000-8000-000000000002"],
            "webhook": ["wh_missing"],
            "event": ["0190c6f2-0000-7000-8000-000000000003"],
            # the fuzz's receiver is added at start; a port nothing listens on (refused), a bad scheme
            "url": ["http://127.0.0.1:9/hook", "ftp://x/y"],
            "consistency": [""],
            "page": [""],
            "derivation": ["", "fz-derivation", "missing-derivation"],
            "text": [
                "hello",
                "I keep bees in my garden",
                "Where does Bob live?",
                "Bob keeps bees",
                "bees",
                "Bob lives in Oslo",
                "moved to Oslo",
                "ATTRIBUTE: keeps bees",
                "IDENTITY: Bob",
            ],
            "schema": [
                '{"type": "string"}',
                '{"type": "object", "properties": {"city": {"type": "string"}}}',
                '{"type": "array", "items": {"type": "string"}}',
            ],
        }
    )

    def __post_init__(self) -> None:
        self.values["url"].insert(0, self.webhook_url)

    def add(self, kind: str, value: str) -> None:
        pool = self.values[kind]
        if not value or value in pool:
            return
        if len(pool) >= POOL_CAP:  # keep the seeds (the first 16), rotate the rest
            del pool[16]
        pool.append(value)

    def harvest(self, reply: Message, depth: int = 0) -> None:
        """Take ids and tokens from a successful reply."""
        if depth > 4:
            return
        for fd, value in reply.ListFields():
            if fd.message_type is not None:
                if fd.message_type.full_name.startswith("google.protobuf."):
                    continue
                if fd.message_type.GetOptions().map_entry:  # a map: its values, when they are messages
                    items = [v for v in value.values() if isinstance(v, Message)]
                else:
                    items = value if fd.is_repeated else [value]
                for item in list(items)[:20]:
                    self.harvest(item, depth + 1)
            elif fd.name in HARVEST and fd.type == F.TYPE_STRING:
                for item in (value if fd.is_repeated else [value])[:20]:
                    self.add(HARVEST[fd.name], item)

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"


@dataclass
class Case:
    """One request: the message, bytes appended to its encoding (for what protobuf cannot hold), the
    input classes it holds (`class@field`)."""

    rpc: Rpc
    message: Message
    raw_suffix: bytes = b""
    classes: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        return self.message.SerializeToString() + self.raw_suffix

    def class_names(self) -> set[str]:
        return {c.split("@", 1)[0] for c in self.classes}


def _unsigned(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _deep_schema_text(depth: int) -> str:
    return '{"items": ' * depth + "{}" + "}" * depth


def _deep_dict(depth: int, leaf=1) -> dict:
    value: object = leaf
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[return-value]


HOSTILE_SCHEMAS: dict[str, Callable[[], str]] = {
    "schema:ref-url": lambda: '{"$ref": "http://127.0.0.1:9/schema.json"}',  # port 9: refused at once
    "schema:ref-file": lambda: '{"$ref": "file:///etc/hostname"}',
    "schema:ref-root": lambda: '{"$ref": "#"}',
    "schema:ref-dangling": lambda: '{"$ref": "#/definitions/none"}',
    "schema:ref-cycle": lambda: (
        '{"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": '
        '"#/definitions/a"}}, "$ref": "#/definitions/a"}'
    ),
    "schema:deep": lambda: _deep_schema_text(3000),
    "schema:deep-40": lambda: _deep_schema_text(40),
    "schema:enum-3000": lambda: json.dumps(
        {"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"a": i} for i in range(3000)]}
    ),
    "schema:nan": lambda: '{"type": "number", "minimum": NaN}',
    "schema:not-json": lambda: '{"type": ',
    "schema:not-object": lambda: '[{"type": "string"}]',
    "schema:bad-type": lambda: '{"type": "bogus"}',
    "schema:bad-dialect": lambda: '{"$schema": "http://example.com/unknown", "type": "string"}',
    "schema:large": lambda: json.dumps({"type": "string", "description": "x" * 70_000}),
    "schema:surrogate": lambda: '{"type": "string", "description": "\\ud800"}',
}
HOSTILE_SCHEMA_OBJECTS: dict[str, Callable[[], dict]] = {
    "schema:ref-url": lambda: {"$ref": "http://127.0.0.1:9/schema.json"},
    "schema:ref-file": lambda: {"$ref": "file:///etc/hostname"},
    "schema:ref-root": lambda: {"$ref": "#"},
    "schema:deep-40": lambda: _deep_dict(40),  # a Struct over protobuf's nesting limit on the wire
    "schema:deep-20": lambda: {"type": "object", "properties": _deep_dict(20, {"type": "string"})},
    "schema:enum-3000": lambda: {"enum": [{"a": i} for i in range(3000)]},
    "schema:bad-type": lambda: {"type": "bogus"},
    "schema:empty": lambda: {},
}

# a peer's metadata `name`: display names a person would give, then values no display name is (refused)
DISPLAY_NAMES = ["Maria Lopez", "ann", "O'Brien-Smith", "李小龙", "Zoë", "R2-D2", "x" * 200, "Ann & Bo", "u-7f3a"]
BAD_DISPLAY_NAMES = ["", " ", "--", "x" * 201, "\u200b", "!!!", 42, True, ["Ann"], {"first": "Ann"}]

TIMESTAMP_SECONDS = [
    -62_135_596_801,
    -62_135_596_800,
    253_402_300_799,
    253_402_300_800,
    2**63 - 1,
    -(2**63),
    0,
    -1,
    1_700_000_000,
    4_102_444_800,
]
TIMESTAMP_NANOS = [0, -1, 10**9, 999_999_999, 2**31 - 1, -(2**31)]
LONG_LENGTHS = [257, 513, 2_001, 10_001, 25_000, 25_001, 65_537, 1_000_001]
HUGE_LIST = [101, 1_000, 70_000]
HUGE_MESSAGES = [101, 1_000, 10_000]
MAX_COPIED_BYTES = 6_000_000


class Drawer:
    """Draws one request; `hostility` is the chance that a field gets a hostile value."""

    def __init__(self, draw, pools: Pools, hostility: int, excluded: Iterable[str]) -> None:
        self.draw, self.pools, self.hostility = draw, pools, hostility
        self.excluded = tuple(excluded)
        self.classes: list[str] = []

    # --- helpers
    def allowed(self, label: str) -> bool:
        return not any(label == e or label.startswith(e + ":") for e in self.excluded)

    def pick(self, options: dict[str, Callable[[], object]], where: str):
        """Call one of the allowed `options` (label -> maker) and record its class; None if none allowed."""
        labels = [label for label in options if self.allowed(label)]
        if not labels:
            return None
        label = self.draw(st.sampled_from(labels))
        self.classes.append(f"{label}@{where}")
        return options[label]()

    def hostile(self) -> bool:
        return self.hostility > 0 and self.draw(st.integers(0, 99)) < self.hostility

    def from_pool(self, kind: str) -> str:
        pool = self.pools.values[kind]
        return pool[self.draw(st.integers(0, 2**16)) % len(pool)]

    # --- strings
    def string(self, fd: FieldDescriptor, where: str) -> str:
        kind = KIND_BY_NAME.get(fd.name, "text")
        if not self.hostile():
            return self.from_pool(kind)
        special = {
            "consistency": self.consistency_hostiles,
            "page": self.page_hostiles,
            "schema": lambda: HOSTILE_SCHEMAS,
        }.get(kind)
        options = self.string_hostiles(kind)
        if special is not None and self.draw(st.booleans()):
            options = special()
        value = self.pick(options, where)
        return self.from_pool(kind) if value is None else value  # type: ignore[return-value]

    def string_hostiles(self, kind: str) -> dict[str, Callable[[], str]]:
        base = lambda: self.from_pool(kind if kind in self.pools.values else "text")  # noqa: E731
        draw = self.draw

        def with_nul() -> str:
            text = base()
            at = draw(st.integers(0, 2**16)) % (len(text) + 1)  # drawn alike whatever the pool holds
            return text[:at] + "\x00" + text[at:]

        def with_control() -> str:
            controls = draw(
                st.text(
                    st.characters(max_codepoint=0x1F, exclude_characters="\x00")
                    | st.sampled_from("\x7f\u200b\u200e\u202e\ufeff\ufffe\U0010ffff"),
                    min_size=1,
                    max_size=6,
                )
            )
            return base() + controls

        def long() -> str:
            n = draw(st.sampled_from(LONG_LENGTHS))
            return draw(st.sampled_from(["a", "é", "€", "🙂", "bees "])) * n

        rare = (
            {"huge-request": lambda: "x" * (GRPC_DEFAULT_MAX_MESSAGE + 300_000)} if not draw(st.integers(0, 15)) else {}
        )  # over gRPC's limit: refused by the transport, and slow to send
        return {
            **rare,
            "empty": lambda: "",
            "unicode": lambda: draw(st.text(max_size=40)),
            "nul": with_nul,
            "control": with_control,
            "long": long,
            "digits": lambda: draw(st.sampled_from(["²", "٣", "0", "-1", "9" * 20, "9" * 5000, "1e309"])),
            "odd-id": lambda: draw(
                st.sampled_from(
                    [
                        "a/b",
                        "../x",
                        " alice",
                        "alice ",
                        "ALICE",
                        "a" * 512,
                        "a" * 513,
                        "é",
                        "🙂",
                        "a b",
                        "%00",
                        "*",
                        "alice,bob",
                    ]
                )
            ),
        }

    def consistency_hostiles(self) -> dict[str, Callable[[], str]]:
        sessions, draw = self.pools.topic("sessions"), self.draw
        real = lambda: self.from_pool("consistency") or f"{sessions}:0:0"  # noqa: E731
        return {
            "token:unknown-topic": lambda: "peerlog.unknown:0:1",
            "token:other-prefix": lambda: "elsewhere.sessions:0:0",
            "token:partition": lambda: f"{sessions}:99:0",
            "token:future": lambda: f"{sessions}:0:{10**12}",
            "token:negative": lambda: f"{sessions}:0:-5",
            "token:superscript": lambda: f"{sessions}:0:²",
            "token:5000-digits": lambda: f"{sessions}:0:{'9' * 5000}",
            "token:nul": lambda: real() + "\x00",
            "token:50000-parts": lambda: ",".join([real().split(",")[0]] * 50_000),
            "token:1025-parts": lambda: ",".join(f"{sessions}:0:{i}" for i in range(1025)),
            "token:garbage": lambda: draw(st.text(max_size=30)),
            "token:truncated": lambda: real()[: max(1, len(real()) // 2)],
        }

    def page_hostiles(self) -> dict[str, Callable[[], str]]:
        draw = self.draw
        real = lambda: self.from_pool("page") or _unsigned("0") + "." + _unsigned("mac")  # noqa: E731

        def edited() -> str:
            token = real()
            at = draw(st.integers(0, 2**16)) % max(1, len(token))
            return token[:at] + ("A" if token[at : at + 1] != "A" else "B") + token[at + 1 :]

        return {
            "page:unsigned-digits": lambda: _unsigned(
                draw(st.sampled_from(["0", "5", "²", "٣", "9" * 20, "9" * 5000]))
            ),
            "page:nul": lambda: real() + "\x00",
            "page:edited": edited,
            "page:truncated": lambda: real()[: max(1, len(real()) // 2)],
            "page:garbage": lambda: draw(st.text(max_size=30)),
            "page:long": lambda: "A" * 5000,
        }

    # --- numbers, enums, bools
    def integer(self, fd: FieldDescriptor, where: str) -> int:
        lo, hi = {
            F.TYPE_UINT32: (0, 2**32 - 1),
            F.TYPE_FIXED32: (0, 2**32 - 1),
            F.TYPE_UINT64: (0, 2**64 - 1),
            F.TYPE_FIXED64: (0, 2**64 - 1),
            F.TYPE_INT64: (-(2**63), 2**63 - 1),
            F.TYPE_SINT64: (-(2**63), 2**63 - 1),
            F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
        }.get(fd.type, (-(2**31), 2**31 - 1))
        if not self.hostile():
            return self.draw(st.sampled_from([v for v in (0, 1, 3, 10, 50) if lo <= v <= hi]))
        boundaries = [
            v for v in (lo, hi, -1, 101, 1_000, 1_001, 10_001, 100_000, 2**31 - 1, 2**31, 2**32 - 1) if lo <= v <= hi
        ]
        self.classes.append(f"int:boundary@{where}")
        return self.draw(st.sampled_from(boundaries) | st.integers(lo, hi))

    def floating(self, fd: FieldDescriptor, where: str) -> float:
        if not self.hostile():
            return self.draw(st.sampled_from([0.0, 0.3, 0.5, 1.0]))
        width = 32 if fd.type == F.TYPE_FLOAT else 64
        nonfinite = {"float:nonfinite": lambda: self.draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))}
        odd = {
            "float:odd": lambda: self.draw(
                st.sampled_from(
                    [-0.0, -1.0, 2.0, 5e-324 if width == 64 else 1e-45, 3.4e38, 1e308 if width == 64 else 3.4e38]
                )
                | st.floats(width=width, allow_nan=False, allow_infinity=False)
            )
        }
        value = self.pick({**nonfinite, **odd}, where)
        return 0.0 if value is None else value  # type: ignore[return-value]

    def enum(self, fd: FieldDescriptor, where: str) -> int:
        valid = [v.number for v in fd.enum_type.values]
        if not self.hostile() or not self.allowed("enum:unknown"):
            return self.draw(st.sampled_from(valid))
        value = self.draw(st.sampled_from([-1, 99, 2**31 - 1, -(2**31)]) | st.integers(-(2**31), 2**31 - 1))
        if value not in valid:
            self.classes.append(f"enum:unknown@{where}")
        return value

    def scalar(self, fd: FieldDescriptor, where: str):
        if fd.type == F.TYPE_STRING:
            return self.string(fd, where)
        if fd.type == F.TYPE_BYTES:
            return self.draw(st.binary(max_size=64))
        if fd.type == F.TYPE_BOOL:
            return self.draw(st.booleans())
        if fd.type in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
            return self.floating(fd, where)
        if fd.type == F.TYPE_ENUM:
            return self.enum(fd, where)
        return self.integer(fd, where)

    # --- well-known messages
    def timestamp(self, ts: timestamp_pb2.Timestamp, where: str) -> None:
        if not self.hostile():
            ts.seconds = self.draw(st.integers(1_600_000_000, 1_780_000_000))
            ts.nanos = self.draw(st.sampled_from([0, 500_000_000, 999_999_999]))
            return
        seconds = self.draw(st.sampled_from(TIMESTAMP_SECONDS) | st.integers(-(2**63), 2**63 - 1))
        nanos = self.draw(st.sampled_from(TIMESTAMP_NANOS))
        in_range = -62_135_596_800 <= seconds <= 253_402_300_799 and 0 <= nanos <= 999_999_999
        label = "ts:edge" if in_range else "ts:out-of-range"
        if not self.allowed(label):
            ts.seconds, ts.nanos = 1_700_000_000, 0
            return
        self.classes.append(f"{label}@{where}")
        ts.seconds, ts.nanos = seconds, nanos

    def json_value(self, keys, leaves):
        return st.recursive(
            leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=12
        )

    def struct(self, target: struct_pb2.Struct, where: str, schema: bool = False) -> None:
        draw = self.draw
        if not self.hostile():
            if schema:
                target.update(json.loads(self.from_pool("schema")))
            else:
                target.update(
                    draw(
                        st.dictionaries(
                            st.sampled_from(["source", "n", "tags", "lang"]),
                            st.sampled_from([1, "x", True, None, [1, 2], {"k": "v"}]),
                            max_size=3,
                        )
                    )
                )
                if draw(st.integers(0, 3)) == 0:  # a peer's display name (messages carry it, search reads it)
                    target.update({"name": draw(st.sampled_from(DISPLAY_NAMES))})
            return
        plain_keys = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12)
        plain = st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | plain_keys

        def with_nul() -> dict:
            if draw(st.booleans()):
                return {"k\x00ey": 1}
            return {"k": draw(self.json_value(plain_keys, plain)), "v": "va\x00lue"}

        def nonfinite() -> dict:
            bad = draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
            return draw(st.sampled_from([{"n": bad}, {"n": [1, {"m": bad}]}]))

        options: dict[str, Callable[[], dict]] = {
            "struct:random": lambda: draw(st.dictionaries(plain_keys, self.json_value(plain_keys, plain), max_size=5)),
            "nul": with_nul,
            "float:nonfinite": nonfinite,
            "struct:deep": lambda: _deep_dict(draw(st.sampled_from([20, 31, 32, 33, 40, 100]))),
            "struct:big": lambda: {"blob": "m" * draw(st.sampled_from([65_000, 70_000, 1_000_000, 3_000_000]))},
            "struct:many-keys": lambda: {f"k{i}": i for i in range(10_000)},
            "struct:bad-name": lambda: {"name": draw(st.sampled_from(BAD_DISPLAY_NAMES))},
            "huge-request": lambda: {"blob": "m" * (GRPC_DEFAULT_MAX_MESSAGE + 300_000)},
        }
        if schema:
            options.update({k: v for k, v in HOSTILE_SCHEMA_OBJECTS.items()})
        value = self.pick(options, where)
        if value is not None:
            target.update(value)

    # --- messages and repeated fields
    def message(self, msg: Message, where: str = "", depth: int = 0) -> Message:
        desc: Descriptor = msg.DESCRIPTOR
        real_oneofs = [
            o for o in desc.oneofs if not (len(o.fields) == 1 and o.fields[0].has_presence and o.name.startswith("_"))
        ]
        chosen = {o.name: self.draw(st.sampled_from([None, *o.fields])) for o in real_oneofs}
        for fd in desc.fields:
            path = f"{where}.{fd.name}" if where else fd.name
            oneof = fd.containing_oneof
            if oneof is not None and oneof.name in chosen and chosen[oneof.name] is not fd:
                continue
            if fd.is_repeated:
                self.repeated(msg, fd, path, depth)
            elif fd.message_type is not None:
                if oneof is None and not self.draw(st.integers(0, 3)) and not self.hostile():
                    continue  # sometimes leave a message field unset
                self.sub_message(getattr(msg, fd.name), fd, path, depth)
            elif fd.has_presence and not self.draw(st.booleans()):
                continue  # proto3 optional left unset
            else:
                setattr(msg, fd.name, self.scalar(fd, path))
        return msg

    def sub_message(self, target: Message, fd: FieldDescriptor, path: str, depth: int) -> None:
        name = fd.message_type.full_name
        if name == "google.protobuf.Timestamp":
            self.timestamp(target, path)
        elif name == "google.protobuf.Struct":
            self.struct(target, path, schema=fd.name.startswith("json_schema"))
        else:
            target.SetInParent()
            if depth < 4:
                self.message(target, path, depth + 1)

    def repeated(self, msg: Message, fd: FieldDescriptor, path: str, depth: int) -> None:
        container = getattr(msg, fd.name)
        hostile = self.hostile()
        if hostile and self.allowed("repeated:huge") and self.draw(st.integers(0, 2)) == 0:
            if fd.message_type is None:
                n = self.draw(st.sampled_from(HUGE_LIST))
                self.classes.append(f"repeated:huge:{n}@{path}")
                if fd.type == F.TYPE_STRING:
                    kind = KIND_BY_NAME.get(fd.name, "text")
                    container.extend(f"{self.from_pool(kind)}-{i}" if i else self.from_pool(kind) for i in range(n))
                else:
                    container.extend([self.scalar(fd, path)] * n)
                return
            n = self.draw(st.sampled_from(HUGE_MESSAGES))
            item = container.add()
            self.message(item, path, depth + 1)
            n = max(2, min(n, MAX_COPIED_BYTES // max(1, item.ByteSize())))  # copies of a big item: fewer
            self.classes.append(f"repeated:huge:{n}@{path}")
            for _ in range(n - 1):
                container.add().CopyFrom(item)
            return
        if hostile and fd.name == "messages" and self.allowed("documented-max") and self.draw(st.integers(0, 3)) == 0:
            # the documented limits at their maximum: 100 messages of 25,000 three-byte characters (7.5 MB)
            self.classes.append(f"documented-max@{path}")
            for _ in range(100):
                container.add(peer_id=self.from_pool("peer"), content="€" * 25_000)
            return
        n = self.draw(st.integers(0, 3)) if hostile else self.draw(st.sampled_from([0, 1, 1, 2]))
        for _ in range(n):
            if fd.message_type is not None:
                self.sub_message(container.add(), fd, path, depth)
            else:
                container.append(self.scalar(fd, path))

    def raw_suffix(self, desc: Descriptor) -> bytes:
        """Bytes protobuf's Python API refuses to build: invalid UTF-8 or a lone surrogate in a string field."""
        strings = [fd for fd in desc.fields if fd.type == F.TYPE_STRING]
        if not strings or not self.hostile() or self.draw(st.integers(0, 3)):
            return b""
        fd = self.draw(st.sampled_from(strings))
        options = {
            "utf8:invalid": lambda: b"\xff\xfeab",
            "utf8:surrogate": lambda: "x\ud800y".encode("utf-8", "surrogatepass"),
            "utf8:overlong": lambda: b"\xc0\x80",
        }
        payload = self.pick(options, fd.name)
        if payload is None:
            return b""
        return _varint(fd.number << 3 | 2) + _varint(len(payload)) + payload  # type: ignore[arg-type]


def cases(rpc: Rpc, pools: Pools, excluded: Iterable[str] = ()) -> st.SearchStrategy[Case]:
    """Requests for `rpc`; `excluded` names input classes (or class prefixes) not to generate."""

    @st.composite
    def case(draw) -> Case:
        hostility = draw(st.sampled_from([0, 0, 10, 25, 100]))
        drawer = Drawer(draw, pools, hostility, excluded)
        message = drawer.message(rpc.request_class()())
        suffix = drawer.raw_suffix(rpc.request)
        return Case(rpc, message, suffix, drawer.classes)

    return case()
