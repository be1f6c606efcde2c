"""How every peerlog process sets Python's garbage collector: what startup made is frozen out of it, and
its youngest generation is collected every 50,000 new objects instead of every 700.

By default CPython collects its youngest generation every 700 new container objects and, every 100 of
those, may walk every object alive, including the modules, SQLAlchemy's tables and pydantic's validators
made at startup. A process that decodes a batch of 2,000 events makes tens of thousands of such objects in
milliseconds, most of them alive until the batch is written, and kept walking a heap it could not free:
it took about a third of decoding an event, and a rebuild's replay ran 20 % faster without it
(tests/bench/README.md, Rebuild). What startup made lives as long as the process, so freezing it loses
nothing; reference cycles made later are still collected, a few milliseconds of work later.

Outside the import layers, like services.logs: every process's entry point calls it once it has imported
what it runs.
"""

from __future__ import annotations

import gc

YOUNG_OBJECTS = 50_000  # new container objects between collections of the youngest generation
# the middle generation is collected every 20 young collections (CPython: 10), the oldest every 10 of those
OLDER_EVERY = (20, 10)


def tune() -> None:
    """Freeze everything alive now out of every collection, and make young collections rarer."""
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, *OLDER_EVERY)
