"""A worker's event loop that stops writes every thread's stack to stderr; one that runs writes nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import asyncio, time
    from services.worker.stalled_loop import report_stalls

    def held_up_for(seconds):  # a call that never yields to the loop, as one stuck in C would
        time.sleep(seconds)

    async def main(block):
        watch = asyncio.create_task(report_stalls({stall_s}))
        await asyncio.sleep(0.1)
        if block:
            held_up_for(1.8)
        else:
            await asyncio.sleep(4)
        watch.cancel()

    asyncio.run(main({block}))
    """
)


def run(block: bool, stall_s: float) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(block=block, stall_s=stall_s)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_stalled_loop_writes_where_every_thread_stopped() -> None:
    stderr = run(block=True, stall_s=0.5)
    assert "Timeout (0:00:00.500000)!" in stderr
    assert "in held_up_for" in stderr  # the frame that held the loop


def test_a_loop_that_keeps_running_writes_nothing() -> None:
    # four times the stall: a timer never re-armed would have fired; re-armed every 0.25 s it does not
    assert run(block=False, stall_s=1.0) == ""
