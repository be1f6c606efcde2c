"""A write holding its entity waits out the projector, whatever its waits fail with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.api.freshness import until_projected
from services.api.settings import ApiSettings
from services.bus.consistency import InvalidConsistencyToken


class FlakyFreshness:
    """A wait that fails as a pool timeout or a dropped connection would, then sees the token projected."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures, self.waits = failures, 0

    async def wait(self, token: str) -> None:
        self.waits += 1
        if self.failures:
            raise self.failures.pop(0)


async def test_a_lock_holder_waits_out_any_failure_of_its_wait_until_the_write_is_readable():
    freshness = FlakyFreshness([TimeoutError("pool timeout"), ConnectionResetError("dropped"), RuntimeError("?")])
    await until_projected(freshness, "t")
    assert freshness.waits == 4  # given up at the first, the lock let a second write of the entity in


async def test_a_token_that_can_never_be_projected_ends_the_wait():
    with pytest.raises(InvalidConsistencyToken):
        await until_projected(FlakyFreshness([InvalidConsistencyToken("beyond the log's end")]), "t")


def test_a_consistency_wait_of_zero_is_refused():
    # at 0 every wait ended at once, and a lock holder's loop never let the event loop turn
    with pytest.raises(ValidationError, match="consistency_wait_s"):
        ApiSettings(consistency_wait_s=0)
