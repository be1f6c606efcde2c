from __future__ import annotations

import time
from collections.abc import Callable


def eventually(check: Callable[[], object], timeout: float = 20.0, every: float = 0.05):
    """Poll `check` until it returns something truthy; fail with its last value after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")
        time.sleep(every)
