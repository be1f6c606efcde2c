"""Prometheus metrics for model calls, per stage. Recorded by the client, never inside prompt logic."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

TOKENS = Counter("peerlog_llm_tokens_total", "Tokens the model server reported", ["stage", "kind"])
CALLS = Counter(
    "peerlog_llm_calls_total",
    "Model calls by outcome (ok, repaired, invalid_output, unavailable, rejected)",
    ["stage", "outcome"],
)
RETRIES = Counter("peerlog_llm_retries_total", "HTTP requests retried after a transient error", ["stage"])
QUERY_VECTORS = Counter(
    "peerlog_query_vectors_total", "Query embeddings asked of the API's cache, by outcome (hit, miss)", ["outcome"]
)
LATENCY = Histogram(
    "peerlog_llm_request_seconds",
    "Duration of one HTTP request to the model server",
    ["stage"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160),
)


def record_tokens(stage: str, prompt_tokens: int, completion_tokens: int) -> None:
    """Add one reply's token usage."""
    TOKENS.labels(stage=stage, kind="prompt").inc(prompt_tokens)
    TOKENS.labels(stage=stage, kind="completion").inc(completion_tokens)


def record_call(stage: str, outcome: str) -> None:
    """Count one finished call (after its retries and repair)."""
    CALLS.labels(stage=stage, outcome=outcome).inc()


def record_retry(stage: str) -> None:
    """Count one retried HTTP request."""
    RETRIES.labels(stage=stage).inc()
