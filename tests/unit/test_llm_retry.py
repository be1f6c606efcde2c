"""Which server errors are retried, and what a caller finally sees."""

from __future__ import annotations

import httpx2
import openai
import pytest

from services.llm.errors import ModelRequestRejected, ModelUnavailable, shown
from services.llm.retry import as_model_error, call_sync, is_transient, retry_after_s
from services.llm.settings import ModelStageSettings

REQUEST = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")


def status_error(
    status: int, headers: dict[str, str] | None = None, body: str = '{"error": "x"}'
) -> openai.APIStatusError:
    response = httpx2.Response(status, headers=headers or {}, text=body, request=REQUEST)
    # the SDK words it so: the server's reply in the message
    return openai.APIStatusError(f"Error code: {status} - {body}", response=response, body=None)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_server_side_statuses_are_transient(status: int) -> None:
    assert is_transient(status_error(status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_client_side_statuses_are_not_retried(status: int) -> None:
    assert not is_transient(status_error(status))


def test_timeouts_and_connection_errors_are_transient() -> None:
    assert is_transient(openai.APITimeoutError(request=REQUEST))
    assert is_transient(openai.APIConnectionError(request=REQUEST))
    assert not is_transient(ValueError("a bug"))


def test_retry_after_header_is_read_in_seconds() -> None:
    assert retry_after_s(status_error(429, {"Retry-After": "1.5"})) == 1.5
    assert retry_after_s(status_error(429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
    assert retry_after_s(status_error(429)) == 0.0
    assert retry_after_s(None) == 0.0


def test_final_errors_become_domain_errors() -> None:
    rejected = as_model_error("deriver", 1, status_error(400))
    unavailable = as_model_error("deriver", 4, status_error(503))

    assert isinstance(rejected, ModelRequestRejected) and rejected.status_code == 400
    assert isinstance(unavailable, ModelUnavailable) and unavailable.attempts == 4


def test_what_a_caller_or_an_event_is_shown_of_a_model_error_leaves_out_the_servers_reply() -> None:
    body = '{"error": {"message": "Incorrect API key provided: sk-proj-AbCd****wXyZ, org-Q1w2E3r4"}}'
    rejected = as_model_error("deriver", 1, status_error(401, body=body))
    unavailable = as_model_error("deriver", 4, status_error(429, body=body))

    assert "sk-proj" in str(rejected) and "sk-proj" in str(unavailable)  # the server's log keeps it
    assert shown(rejected) == "[deriver] request rejected with HTTP 401; the server's log has its reply"
    assert shown(unavailable) == "[deriver] model unavailable after 4 attempt(s): APIStatusError (HTTP 429)"
    assert shown(ValueError("a store error")) == "a store error"


def test_transient_errors_are_retried_up_to_the_limit() -> None:
    settings = ModelStageSettings(max_retries=2, backoff_s=0, max_backoff_s=0)
    calls, retries = [], []

    def failing() -> None:
        calls.append(1)
        raise status_error(503)

    with pytest.raises(ModelUnavailable) as caught:
        call_sync("deriver", settings, failing, lambda: retries.append(1))

    assert (len(calls), len(retries), caught.value.attempts) == (3, 2, 3)
    assert isinstance(caught.value.__cause__, openai.APIStatusError)


def test_a_rejected_request_is_not_retried() -> None:
    settings = ModelStageSettings(max_retries=5, backoff_s=0, max_backoff_s=0)
    calls = []

    def rejected() -> None:
        calls.append(1)
        raise status_error(422)

    with pytest.raises(ModelRequestRejected):
        call_sync("deriver", settings, rejected, lambda: None)
    assert len(calls) == 1


def test_success_after_a_transient_error_returns_the_value() -> None:
    settings = ModelStageSettings(max_retries=1, backoff_s=0, max_backoff_s=0)
    outcomes = iter([status_error(429), "ok"])

    def flaky() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert call_sync("deriver", settings, flaky, lambda: None) == "ok"


def test_a_rate_limit_asking_for_longer_than_the_backoff_is_waited_out_up_to_a_minute() -> None:
    # cut to max_backoff_s (8 s), every retry of a "Retry-After: 30" came too early and was refused again
    from tenacity import RetryCallState

    from services.llm.retry import RETRY_AFTER_MOST_S, _wait
    from services.llm.settings import ModelStageSettings

    settings = ModelStageSettings()
    wait = _wait(settings)

    def after(error: Exception) -> float:
        state = RetryCallState(None, None, (), {})
        state.attempt_number = 1
        state.set_exception((type(error), error, None))
        return wait(state)

    assert after(status_error(429, {"Retry-After": "30"})) == 30
    assert after(status_error(429, {"Retry-After": "3600"})) == RETRY_AFTER_MOST_S
    assert after(status_error(503)) <= settings.max_backoff_s
