"""Re-derivation: run the deriver again over recorded perceptions into a separate, named derivation.

The perceived topic is the record of what each pair saw; replaying it through the deriver with another
model or prompt yields a second store for the same pairs, stamped `derivation=<name>` on every event.
Reads follow each pair's current derivation (projections/derivations.py), so nothing existing changes;
a named one is read by name (ListObservations.derivation, `peerlog derivations compare`). Each batch is
one log transaction.

It resumes: a message already in a finished batch of the derivation is skipped, and so is one perceived
while the derivation was current (the live deriver writes those), so running it again, or to catch a
derivation up after `peerlog derivations promote`, neither repeats nor misses a message.

What someone deleted through the API stays deleted: the derivation's copy of a deleted fact (the same fact
from the same message, in any derivation of the pair) is deleted with it. A copy this run derives is written
deleted in its batch and counts as evidence for nothing (`withholding`), so another message stating the fact
still adds it; a copy an earlier run derived is deleted before the run derives more (`withheld`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from confluent_kafka import Message

from projections.db import async_engine
from projections.deriver_reads import CitedFact, ObservationStore
from projections.run_lock import Held, exclusive
from projections.status_reads import projected_offsets
from projections.workspace_reads import known
from services.bus.consistency import ConsistencyToken
from services.bus.producer import EventLog
from services.bus.streams import read, to_the_end, until_stable
from services.bus.topics import DEADLETTER, OBSERVATIONS, PERCEIVED, TopicSpec
from services.deriver.batching import Batching, add, next_window
from services.deriver.derive import Deriver
from services.deriver.judge import Withhold, cosine
from services.deriver.prompt import ExtractedFact
from services.events import (
    ORIGINAL,
    BatchDerived,
    DerivationDeadLettered,
    DerivationPromoted,
    Event,
    MessagePerceived,
    ObservationDeleted,
    ProducerInfo,
    stored_derivation,
)
from services.events.pairs import Pair
from services.events.perception import pair_of
from services.events.text import content_words, normalise
from services.llm.client import ModelClient
from services.llm.embeddings import make_embedder
from services.llm.errors import ModelOutputInvalid
from services.llm.settings import ModelStageSettings
from services.llm.tokens import count_tokens

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
Seen = MessagePerceived | DerivationPromoted
Positions = dict[tuple[str, int], int]  # (topic, partition) -> offset
PROBE = "Reply with the word OK."  # what any chat model answers: a run checks its model can be reached
PROJECTOR_WAIT_S = 300.0  # how long a run waits for the projector to apply the batches before it


class ProjectorBehind(RuntimeError):
    """The projections still lack batches the log holds, after PROJECTOR_WAIT_S: nothing was derived."""


@dataclass(frozen=True)
class DerivationScope:
    workspace_id: str
    observer_id: str = ""  # both or neither: one pair, or the whole workspace
    observed_id: str = ""

    def covers(self, e: Event) -> bool:
        return e.workspace_id == self.workspace_id and (
            not self.observer_id or (e.observer_id, e.observed_id) == (self.observer_id, self.observed_id)
        )


@dataclass(frozen=True)
class Report:
    name: str
    pairs: int
    messages: int
    batches: int
    events: int
    consistency_token: str  # pass to a read to see the whole derivation
    skipped: int = 0  # messages the derivation already had, or that the live deriver writes into it
    parked: int = 0  # messages whose batch the model kept failing on: dead-lettered, not derived


async def check_scope(settings, scope: DerivationScope) -> None:
    """ValueError unless the workspace exists and, for one pair, both its peers do (as projected). The
    commands check before a run: over a scope that does not exist it would find nothing and report success,
    and a promotion would append a DerivationPromoted for a pair that never was."""
    wanted = [p for p in (scope.observer_id, scope.observed_id) if p]
    engine = async_engine(settings.database)
    try:
        async with engine.connect() as conn:
            found = await known(conn, scope.workspace_id, wanted, [])
    finally:
        await engine.dispose()
    if not found.workspace:
        raise ValueError(f"workspace {scope.workspace_id!r} does not exist (or is not projected yet); check -w")
    absent = [p for p in dict.fromkeys(wanted) if p not in found.peers]
    if absent:
        raise ValueError(
            f"workspace {scope.workspace_id!r} has no peer {' or '.join(map(repr, absent))}; check --pair OBSERVER/OBSERVED"
        )


def check_name(name: str) -> None:
    """ValueError unless `name` can name a new derivation (ORIGINAL is the first live one's)."""
    if not NAME.fullmatch(name) or name == ORIGINAL:
        raise ValueError(f"derivation name {name!r} must match {NAME.pattern} and not be {ORIGINAL!r}")


def missing(
    history: Sequence[Seen], label: str, done: set[str], parked: set[str] = frozenset()
) -> list[MessagePerceived]:
    """The pair's perceptions that derivation `label` lacks and the live deriver will not write into it:
    those in no finished batch of `label` that were perceived while another derivation was current, or
    that the live deriver parked (dead-lettered) while `label` was current. The live deriver never tries a
    parked batch again, so deriving it here is the only way it gets done, and it is done once."""
    current, out = "", []
    for e in history:
        if isinstance(e, DerivationPromoted):
            current = e.derivation
        elif e.message_id not in done and (current != label or e.message_id in parked):
            out.append(e)
    return out


def restates(fact: CitedFact, deleted: CitedFact, threshold: float) -> bool:
    """Whether `fact` is `deleted` derived again: from a message `deleted` cites, the same text, or a near
    duplicate (vectors of one model at least `threshold` alike, and one text's content words all in the other's).
    Looser than the judge's rule (judge.nested), which another model's wording of the claim can miss ("would not
    eat meat" for "doesn't eat meat"): a fact the user withdrew must not come back. Another message saying it is
    new evidence, which the deletion never judged."""
    if not fact.message_ids & deleted.message_ids:
        return False
    if fact.normalised == deleted.normalised:
        return True
    ours, theirs = content_words(fact.normalised), content_words(deleted.normalised)
    return (
        fact.embedding_model == deleted.embedding_model
        and cosine(fact.embedding, deleted.embedding) >= threshold
        and (ours <= theirs or theirs <= ours)
    )


def withheld(
    pair: Pair,
    facts: Sequence[CitedFact],
    deleted: Sequence[CitedFact],
    threshold: float,
    producer: ProducerInfo,
    cause: str,
) -> list[ObservationDeleted]:
    """A deletion from `pair` of each of `facts` that restates one the API `deleted`, giving that deletion's
    reason: reads follow whichever derivation is promoted, and a fact someone withdrew must not come back."""
    out = []
    for fact in facts:
        why = _why(fact, deleted, threshold)
        if why is not None:
            out.append(
                ObservationDeleted(
                    **pair.fields(),
                    observation_id=fact.observation_id,
                    reason=why,
                    producer=producer,
                    causation_id=cause,
                )
            )
    return out


def withholding(deleted: Sequence[CitedFact], threshold: float, embedding_model: str) -> Withhold | None:
    """The judge's `withhold` for a derivation whose pair had `deleted` deleted through the API: the deletion
    reason for a proposed fact (embedded by `embedding_model`) that restates one of them; None if none was."""
    if not deleted:
        return None

    def why(fact: ExtractedFact, embedding: Sequence[float]) -> str | None:
        proposed = CitedFact(
            "", normalise(fact.content), frozenset({fact.message_id}), tuple(embedding), embedding_model
        )
        return _why(proposed, deleted, threshold)

    return why


def _why(fact: CitedFact, deleted: Sequence[CitedFact], threshold: float) -> str | None:
    """The reason to delete `fact`, naming the deleted one it restates and that one's reason; None if none."""
    original = next((d for d in deleted if restates(fact, d, threshold)), None)
    if original is None:
        return None
    why = f"as {original.observation_id} (the same fact, from the same message) was deleted"
    return f"{why}: {original.delete_reason}" if original.delete_reason else why


def _settled(settings, topic: TopicSpec) -> Iterator[Message]:
    """Every committed record of `topic`, read once every transaction open on it now has ended. A read that
    stops at an open one misses its records for good, though they sit before everything appended since."""
    name = topic.full_name(settings.kafka.topic_prefix)
    # by then the broker has aborted a transaction of a dead producer; past that, the read goes on as it is
    until_stable(settings.kafka, name, settings.kafka.transaction_timeout_ms / 1000 + 10)
    return to_the_end(settings.kafka, name, timeout=3600, must_exist=True)


def perceived(settings, scope: DerivationScope) -> dict[str, list[Seen]]:
    """Every committed perception and promotion in scope, by pair key in log order (up to the end as of now),
    once the router's open transactions have ended: a perception it commits just after a promotion is appended
    sits before it, so the live deriver writes it into the old derivation and the catch-up must see it."""
    by_pair: dict[str, list[Seen]] = {}
    for msg in _settled(settings, PERCEIVED):
        event = read(msg.value())
        if isinstance(event, Seen) and scope.covers(event):
            by_pair.setdefault(event.key, []).append(event)
    return by_pair


async def _unprojected(engine, through: Positions) -> Positions:
    """The positions of `through` the projections have not applied yet."""
    async with engine.connect() as conn:
        projected = await projected_offsets(conn)
    return {tp: offset for tp, offset in through.items() if projected.get(tp, 0) <= offset}


@dataclass(frozen=True)
class Finished:
    """Per (derivation label, pair key), the message ids in its finished batches and in its dead-lettered ones;
    and where each partition of the observations topic ended when they were read."""

    done: dict[tuple[str, str], set[str]]
    parked: dict[tuple[str, str], set[str]]
    through: Positions  # where the observations topic ended when read: the de-duplication reads all of it

    def of(self, label: str, key: str) -> tuple[set[str], set[str]]:
        return self.done.get((label, key), set()), self.parked.get((label, key), set())


def _batched(
    settings, topic: TopicSpec, kind: type, scope: DerivationScope
) -> tuple[dict[tuple[str, str], set[str]], Positions]:
    """Per (derivation label, pair key), the message ids of `kind` batch events in scope (read from the log
    itself, once its open transactions have ended, so a run right after another one, or while the live deriver
    commits a batch or a dead letter, sees all of it), and the offset of the last record read on each
    partition: where the committed log ends."""
    out: dict[tuple[str, str], set[str]] = {}
    through: Positions = {}
    for msg in _settled(settings, topic):
        event = read(msg.value())
        through[(msg.topic(), msg.partition())] = msg.offset()
        if isinstance(event, kind) and scope.covers(event):
            out.setdefault((event.derivation, event.key), set()).update(event.message_ids)
    return out, through


def finished(settings, scope: DerivationScope) -> Finished:
    """What every derivation in scope has finished, and what the deriver parked, as of now: once every
    transaction open on the observations and dead-letter topics has ended. A run that lost its lock may be
    appending a batch as this one starts; read before its transaction commits, the batch would be derived
    again. A dead letter the live deriver is committing, read before, would leave its messages underived."""
    done, through = _batched(settings, OBSERVATIONS, BatchDerived, scope)
    parked, _ = _batched(settings, DEADLETTER, DerivationDeadLettered, scope)
    return Finished(done, parked, through)


async def rederive(
    settings, name: str, scope: DerivationScope, model: str = "", progress: Callable[[str], None] = print
) -> Report:
    """Derive every perception in scope again into derivation `name`, with `model` (default: the deriver's),
    skipping what `name` already holds."""
    check_name(name)
    async with (
        exclusive(settings, scope.workspace_id) as lock,
        Rederivation(settings, lock, name, model, progress) as run,
    ):
        await run.catch_up(scope, f"rederive:{name}")
    return run.report()


class Rederivation:
    """One run deriving into derivation `name`, under the workspace's run `lock`: its deriver and log (each
    append checks the lock first), its counts and consistency token."""

    def __init__(
        self,
        settings,
        lock: Held,
        name: str,
        model: str = "",
        progress: Callable[[str], None] = print,
        reinforce_clients: bool = False,
    ) -> None:
        self.settings, self.label, self.model, self.progress = settings, stored_derivation(name), model, progress
        self.lock = lock
        # a staged derivation changes no current read: what clients wrote (in every one) stays as it is; a
        # retry derives into the current one what no deriver counted, as the live deriver would
        self.reinforce_clients = reinforce_clients
        self.pairs: set[str] = set()
        self.batches = self.messages = self.events = self.perceived = 0
        self.parked: set[str] = set()  # message ids this run dead-lettered: not tried again in a later pass
        self.written = ConsistencyToken.of([])
        self.probed = False  # whether the model answered this run's probe (_reachable)

    async def __aenter__(self) -> Rederivation:
        stage = self.settings.llm.stage("deriver")
        stage = ModelStageSettings(**{**stage.model_dump(), **({"model": self.model} if self.model else {})})
        self.log = EventLog(self.settings.kafka, client_id=f"peerlog-rederive-{self.label or ORIGINAL}")
        self.log.start()
        self._append = self.lock.guarded(self.log.append)
        self.store = ObservationStore.connect(self.settings, pool_size=2)
        self.deriver = Deriver(
            self.settings.deriver,
            ModelClient("deriver", stage),
            make_embedder(self.settings.embedding),
            self.store,
            self._append,
            self.reinforce_clients,
        )
        return self

    async def __aexit__(self, *exc) -> None:
        self.log.close()
        await self.store.close()

    async def append(self, events: Sequence[Event]) -> None:
        self.written = self.written.merge(await self._append(events))

    async def catch_up(
        self,
        scope: DerivationScope,
        cause: str,
        history: dict[str, list[Seen]] | None = None,
        logs: Finished | None = None,
    ) -> None:
        """Derive what the derivation lacks in scope (see `missing`), batch by batch, pair by pair. `history`
        (perceptions by pair key) narrows it to those pairs; `history` and `logs` are read now if not given."""
        history = perceived(self.settings, scope) if history is None else history
        logs = finished(self.settings, scope) if logs is None else logs
        await self._projected(logs.through)
        self.pairs |= set(history)
        self.perceived = sum(isinstance(e, MessagePerceived) for seen in history.values() for e in seen)
        for key, seen in history.items():
            todo = [e for e in missing(seen, self.label, *logs.of(self.label, key)) if e.message_id not in self.parked]
            pair, before = Pair(**pair_of(key), derivation=self.label), len(self.parked)
            deleted = await self.store.deleted_by_api(pair)
            followed = await self._follow(pair, deleted, cause)
            await self._derive(pair, todo, cause, deleted)
            parked = len(self.parked) - before
            self.progress(
                f"{key}: {len(todo) - parked} messages derived into {self.label or ORIGINAL!r}"
                + (f", {followed} earlier copies of deleted facts deleted" if followed else "")
                + (f", {parked} parked (the model kept failing: GetProcessingStatus lists them)" if parked else "")
            )

    async def _follow(self, pair: Pair, deleted: Sequence[CitedFact], cause: str) -> int:
        """Delete the derivation's live copies of facts the API `deleted` (a copy derived before its original
        was deleted, or in a derivation the deletion was not made in); how many."""
        if not deleted:
            return 0
        cited = {m for d in deleted for m in d.message_ids}
        live = await self.store.live_citing(pair, sorted(cited))
        gone = self._withheld(pair, live, deleted, cause)
        if gone:
            written = await self._append(gone)
            self.written, self.events = self.written.merge(written), self.events + len(gone)
            # the batches below look for duplicates in the projections: a copy deleted on the log but not
            # projected yet would still read live, and another message's fact reinforce it
            await self._projected(dict(written.offsets))
        return len(gone)

    def _withheld(
        self, pair: Pair, facts: Sequence[CitedFact], deleted: Sequence[CitedFact], cause: str
    ) -> list[ObservationDeleted]:
        return withheld(pair, facts, deleted, self.deriver.near_duplicate, self.deriver.producer(), cause)

    async def _projected(self, through: Positions) -> None:
        """Wait until the projections hold the observations topic as far as it was read, or raise
        ProjectorBehind. The deriver looks for a fact's duplicates in the projections (`recent` covers only
        this pass's own batches), so a fact on the log not projected yet (a batch an earlier run or pass
        appended, what a client wrote, a deletion, a dream's edit) would be missed, and added twice."""
        if not through:
            return
        engine, deadline, said = async_engine(self.settings.database), time.monotonic() + PROJECTOR_WAIT_S, False
        try:
            while behind := await _unprojected(engine, through):
                if time.monotonic() >= deadline:
                    raise ProjectorBehind(
                        f"after {PROJECTOR_WAIT_S:g} s the projector has still not applied observations already "
                        f"on the log ({len(behind)} partitions of the observations topic), and deriving before it "
                        "has could add their facts twice: nothing more was derived. Check that the projector "
                        "runs (`peerlog projector run`), then run this again"
                    )
                if not said:
                    self.progress("waiting for the projector to apply the observations already on the log…")
                    said = True
                await asyncio.sleep(0.2)
        finally:
            await engine.dispose()

    async def _reachable(self) -> None:
        """Raise ModelUnavailable / ModelRequestRejected unless the chat model answers a plain request: out of
        reach (a wrong URL, model name or key), each batch was parked in turn, dead letters on the log for a
        workspace's every batch and hours of retries, where the run should stop at once and say why."""
        if self.probed:
            return
        try:
            await self.deriver.model.text([{"role": "user", "content": PROBE}])
        except ModelOutputInvalid:
            pass  # it answered: what it says is the batches' business
        self.probed = True

    async def _derive(
        self, pair: Pair, todo: Sequence[MessagePerceived], cause: str, deleted: Sequence[CitedFact]
    ) -> None:
        """Derive `todo` batch by batch; a fact the API `deleted` is written deleted again, in its batch."""
        if todo:
            await self._reachable()
        state, recent = Batching(), []
        withhold = withholding(deleted, self.deriver.near_duplicate, self.deriver.embedder.model_name)
        for e in todo:
            state = add(state, e, count_tokens(e.content))
        while state.pending:
            window, state = next_window(state, self.settings.deriver.window_tokens)
            outcome = await self.deriver.derive(pair, window, recent, cause, withhold)
            recent = outcome.recent
            await self.append(outcome.events)
            self.events += len(outcome.events)
            if any(isinstance(e, DerivationDeadLettered) for e in outcome.events):
                self.parked |= {m.message_id for m in window}
            else:
                self.batches, self.messages = self.batches + 1, self.messages + len(window)

    def report(self) -> Report:
        # what this run did not try: the derivation had it already, or the live deriver writes it
        skipped = self.perceived - self.messages - len(self.parked)
        return Report(
            self.label or ORIGINAL,
            len(self.pairs),
            self.messages,
            self.batches,
            self.events,
            self.written.encode(),
            skipped,
            len(self.parked),
        )
