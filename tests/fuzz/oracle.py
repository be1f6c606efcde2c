"""What every fuzzed call must satisfy, and the tally of a run.

Per call: never INTERNAL or UNKNOWN, but for Chat's model output still invalid after its repair (the test
model server cannot satisfy every response_format); a refusal uses a known code and says why; UNAVAILABLE
only from Chat's model, never while the stack is up;
RESOURCE_EXHAUSTED only for a request over gRPC's default 4 MiB limit that is not within peerlog's own
documented limits (anything else is a reply or status a default client cannot read), or past a documented
quota, which names its setting; no stall. The
harness adds what it checks around the call: a refused call appended nothing committed to the log, the
projector quarantined nothing, the server is still up.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import grpc
from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from tests.fuzz.strategies import GRPC_DEFAULT_MAX_MESSAGE, Case

KNOWN_REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
MODEL_OUTPUT_INVALID = "model output invalid"  # ModelOutputInvalid's message
# the quotas a caller can reach with valid requests (a workspace's webhooks, Subscribe streams): the refusal
# names the setting. A run that creates webhooks faster than it deletes them reaches the first
QUOTA_SETTINGS = ("PEERLOG_WEBHOOK_MAX_PER_WORKSPACE", "PEERLOG_API_MAX_SUBSCRIPTIONS")
EXAMPLES_PER_KIND = 3  # examples kept per (violation, RPC, code); every occurrence is counted


@dataclass(frozen=True)
class Outcome:
    code: grpc.StatusCode
    details: str
    elapsed_s: float
    items: int = 0  # stream items read
    reply: Message | None = None


def _brief_text(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}…({len(text):,} chars)"


def brief(value, depth: int = 0):
    """A short, JSON-able picture of a request: long strings and lists abbreviated."""
    if isinstance(value, struct_pb2.Struct):
        size = value.ByteSize()
        if size > 400 or depth > 6:
            return f"Struct({len(value.fields)} keys, {size:,} bytes)"
        return {k: brief(v, depth + 1) for k, v in value.fields.items()}
    if isinstance(value, struct_pb2.Value):
        kind = value.WhichOneof("kind")
        if kind == "struct_value":
            return brief(value.struct_value, depth + 1)
        if kind == "list_value":
            return brief(list(value.list_value.values), depth + 1)
        if kind == "number_value" and not math.isfinite(value.number_value):
            return str(value.number_value)
        return brief(getattr(value, kind), depth + 1) if kind else None
    if isinstance(value, timestamp_pb2.Timestamp):
        return f"Timestamp(seconds={value.seconds}, nanos={value.nanos})"
    if isinstance(value, Message):
        return {fd.name: brief(v, depth + 1) for fd, v in value.ListFields()}
    if isinstance(value, str):
        return _brief_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)) or hasattr(value, "__len__") and not isinstance(value, (bytes, dict)):
        items = list(value)
        shown = [brief(v, depth + 1) for v in items[:3]]
        return shown + ([f"…({len(items):,} items)"] if len(items) > 3 else [])
    return value


def judge(case: Case, outcome: Outcome, request_bytes: int) -> list[str]:
    """The per-call violations (empty when the call is fine)."""
    code, found = outcome.code, []
    if code == grpc.StatusCode.OK:
        return found
    chat = case.rpc.service.endswith("DialecticService")
    if code == grpc.StatusCode.INTERNAL and chat and MODEL_OUTPUT_INVALID in outcome.details:
        pass  # the test model's answer did not fit a fuzzed response_format after the repair
    elif code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        found.append(code.name)
    elif code == grpc.StatusCode.UNAVAILABLE:
        if not (chat and "model" in outcome.details.lower()):
            found.append("UNAVAILABLE while the stack is up")
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        found.append("stalled until the client's deadline")
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if any(setting in outcome.details for setting in QUOTA_SETTINGS):
            pass  # a documented quota, reached by valid requests
        elif request_bytes <= GRPC_DEFAULT_MAX_MESSAGE or "documented-max" in case.class_names():
            found.append("RESOURCE_EXHAUSTED for a request within the limits (reply or status too large?)")
    elif code not in KNOWN_REFUSALS:
        found.append(f"unexpected code {code.name}")
    if not outcome.details.strip():
        found.append("refusal without a message")
    return found


@dataclass
class Tally:
    """Counts and examples of one run, as the bench's JSON result."""

    requests: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    outcomes_by_rpc: dict = field(default_factory=lambda: defaultdict(Counter))
    classes: Counter = field(default_factory=Counter)
    latencies: dict = field(default_factory=lambda: defaultdict(list))
    violations: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=lambda: defaultdict(list))
    skipped: Counter = field(default_factory=Counter)

    def record(self, case: Case, outcome: Outcome) -> None:
        name = case.rpc.name
        self.requests[name] += 1
        self.outcomes[outcome.code.name] += 1
        self.outcomes_by_rpc[name][outcome.code.name] += 1
        self.classes.update(case.class_names())
        self.latencies[name].append(outcome.elapsed_s)

    def violation(self, kind: str, case: Case | None, outcome: Outcome | None, extra: dict | None = None) -> None:
        rpc = case.rpc.name if case else "-"
        key = f"{kind} | {rpc} | {outcome.code.name if outcome else '-'}"
        self.violations[key] += 1
        if len(self.examples[key]) < EXAMPLES_PER_KIND:
            example = {"rpc": rpc}
            if case is not None:
                example |= {"classes": sorted(set(case.classes)), "request": brief(case.message)}
                if case.raw_suffix:
                    example["raw_suffix"] = repr(case.raw_suffix[:40])
            if outcome is not None:
                example |= {
                    "status": outcome.code.name,
                    "message": outcome.details[:500],
                    "elapsed_s": round(outcome.elapsed_s, 3),
                }
            self.examples[key].append(example | (extra or {}))

    def result(self) -> dict:
        def ms(values: list[float]) -> dict:
            return {"p50_ms": round(statistics.median(values) * 1000, 1), "max_ms": round(max(values) * 1000, 1)}

        return {
            "requests": sum(self.requests.values()),
            "requests_by_rpc": dict(sorted(self.requests.items())),
            "outcomes": dict(self.outcomes.most_common()),
            "outcomes_by_rpc": {k: dict(v.most_common()) for k, v in sorted(self.outcomes_by_rpc.items())},
            "latency_by_rpc": {k: ms(v) for k, v in sorted(self.latencies.items())},
            "input_classes": dict(sorted(self.classes.items())),
            "not_sent": dict(self.skipped),
            "violations": sum(self.violations.values()),
            "violations_by_kind": dict(self.violations.most_common()),
            "violation_examples": dict(self.examples),
        }
