"""A Faust exactly-once app that re-keys its output, with faults, for tests/integration/test_faust_exactly_once.py.

Run as `python -m tests.support.faust_rekey_app worker`. The environment chooses:
- APP_ID, BOOTSTRAP, DATADIR, SOURCE, SINK, SINK_PARTITIONS: where it runs;
- FIXED=1: peerlog's source-partition transaction manager (tests/support/faust_eos.py), else stock Faust;
- DOWNSTREAM=1: a second agent consumes the sink (so the sink is in the consumer's metadata and groups);
- KILL=after_output: SIGKILL right after sending the output of input KILL_AT (once per DATADIR);
  KILL=between_commits: SIGKILL right after the first transaction commit that carried offsets, once
  KILL_AFTER inputs are handled (so some transactions are committed and others are not);
- PACE_S: how long the agent pauses after each input (default 0.02 s).
Each input's value is its id; the agent sends it to the sink under a new key (another partition) and
counts inputs per key in a table.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiokafka
import faust

FIXED = os.environ.get("FIXED") == "1"
if FIXED:
    from tests.support import faust_eos

    faust_eos.register()

SCHEME = faust_eos.SCHEME if FIXED else "kafka"
KILL = os.environ.get("KILL", "")
MARKER = Path(os.environ["DATADIR"]) / "killed-once"

app = faust.App(
    os.environ["APP_ID"],
    broker=f"{SCHEME}://{os.environ['BOOTSTRAP']}",
    store="memory://",
    topic_replication_factor=1,
    processing_guarantee="exactly_once",
    datadir=os.environ["DATADIR"],
    web_enabled=False,
    broker_commit_interval=1.0,
    # a restarted worker gets the partitions of its SIGKILLed incarnation once this expires
    broker_session_timeout=8.0,
    broker_heartbeat_interval=1.0,
)
source = app.topic(os.environ["SOURCE"], key_type=str, value_type=str, partitions=4)
sink = app.topic(os.environ["SINK"], key_type=str, value_type=str, partitions=int(os.environ["SINK_PARTITIONS"]))
seen = app.Table("seen", default=int, partitions=4)
handled = 0


def die_once() -> None:
    """SIGKILL this worker, unless an earlier incarnation already died here."""
    if not MARKER.exists():
        MARKER.parent.mkdir(parents=True, exist_ok=True)
        MARKER.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)


@app.agent(source)
async def rekey(stream):
    global handled
    async for key, value in stream.items():
        seen[key] += 1
        await sink.send(key=f"out-{value}", value=value)
        handled += 1
        event = faust.current_event()
        print(f"handled {value} from {event.message.partition}@{event.message.offset}")  # the trace a failure shows
        if KILL == "after_output" and value == os.environ["KILL_AT"]:
            await asyncio.sleep(1.5)  # the producer ships the record; a commit round passes meanwhile
            die_once()
        await asyncio.sleep(float(os.environ.get("PACE_S", "0.02")))  # a stream over several commit rounds


if os.environ.get("DOWNSTREAM") == "1":
    counted = app.Table("counted", default=int, partitions=int(os.environ["SINK_PARTITIONS"]))

    @app.agent(sink)
    async def downstream(stream):
        async for key, _value in stream.items():
            counted[key] += 1


if KILL == "between_commits":
    _commit = aiokafka.AIOKafkaProducer.commit_transaction
    _send_offsets = aiokafka.AIOKafkaProducer.send_offsets_to_transaction

    async def send_offsets(self, offsets, group_id):
        self._peerlog_carries_offsets = True
        return await _send_offsets(self, offsets, group_id)

    async def commit_then_die(self):
        await _commit(self)
        if getattr(self, "_peerlog_carries_offsets", False) and handled >= int(os.environ["KILL_AFTER"]):
            die_once()

    aiokafka.AIOKafkaProducer.send_offsets_to_transaction = send_offsets
    aiokafka.AIOKafkaProducer.commit_transaction = commit_then_die


if __name__ == "__main__":
    app.main()
