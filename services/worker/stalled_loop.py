"""A worker whose event loop stops says where it stopped.

Every runner of a worker shares one event loop. If a call never returns while it holds the interpreter
lock (confluent-kafka calls librdkafka's begin_transaction and consumer_group_metadata, for two, without
releasing it), no runner, timeout or log line can run again, and the process goes silent: seen once,
for 3 minutes after a broker restart, in a loaded test run (test_broker_restart). faulthandler's timer
runs on a C thread that needs neither the loop nor the lock. The loop re-arms it well within `stall_s`,
so it fires only once the loop has not run for `stall_s`; it then writes every thread's stack to
stderr, again each `stall_s` for as long as the stall lasts.
"""

from __future__ import annotations

import asyncio
import faulthandler
import sys

REARM_EVERY_S = 1.0  # at most; a quarter of `stall_s` when that is shorter


async def report_stalls(stall_s: float) -> None:
    """Until cancelled: every thread's stack on stderr whenever this loop stalls for `stall_s` (0: off)."""
    if stall_s <= 0:
        return
    rearm_s = min(REARM_EVERY_S, stall_s / 4)
    try:
        while True:
            faulthandler.dump_traceback_later(stall_s, repeat=True, file=sys.stderr)
            await asyncio.sleep(rearm_s)
    finally:
        faulthandler.cancel_dump_traceback_later()
