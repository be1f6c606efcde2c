"""The dreamer's pure core: turn one action a specialist asks for into events, or into a refusal it can read.

`decide_edit(pending, known, action, dream) -> ActionResult`. `known` describes the observations the action
names, as the store holds them; `pending` overlays what this dream already wrote, so a later action
may cite an earlier one and nothing is superseded twice. Every refusal that concerns an observation
write is an ObservationRejected event too, so the audit trail shows what the dream tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from services.events import (
    PAIR_WIDE,
    Event,
    Level,
    ObservationAdded,
    ObservationDeleted,
    ObservationRejected,
    ObservationSuperseded,
    PackedVector,
    PeerCardUpdated,
    ProducerInfo,
    new_id,
)
from services.events.cards import card_problems
from services.events.provenance import MIN_PREMISES, PremiseState, confidence_for, premise_problems
from services.events.text import normalise

PatternType = Literal["preference", "behaviour", "personality", "tendency", "correlation"]


def bare_id(value):
    """The id inside a copied marker: models often copy what they were shown ("[obs:ID]", "obs:ID")."""
    # ids themselves never hold ":"
    return value.strip().strip("[]").removeprefix("obs:") if isinstance(value, str) else value


ObsId = Annotated[str, BeforeValidator(bare_id), Field(min_length=1, max_length=512)]


def _premises(level: Level, what: str):
    # the schema states the rule's minimum so that a constrained decoder cannot cite too few; pydantic does
    # not check it: the provenance rule does, so a refusal is recorded
    least = MIN_PREMISES[level]
    return Field(max_length=20, description=f"{what} (at least {least})", json_schema_extra={"minItems": least})


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _says_something(text: str) -> str:
    if not text.strip():  # "  \n " passed min_length and was stored: the API refuses blank observations
        raise ValueError("is blank: say the observation in words")
    return text


Statement = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_says_something)]


class AddDeduction(_Action):
    """Record a conclusion that follows logically from observations already in memory."""

    # premises first: a constrained decoder writes fields in this order, and the content should follow from them
    premise_ids: list[ObsId] = _premises(Level.DEDUCTIVE, "ids of the observations it follows from")
    content: Statement = Field(description="the conclusion, one proposition")


class UpdateKnowledge(_Action):
    """Something changed: record the new belief (citing the evidence) and retire the outdated observation."""

    outdated_id: ObsId = Field(description="the observation that is no longer true")
    content: Statement = Field(description="the belief that replaces it")
    premise_ids: list[ObsId] = _premises(Level.DEDUCTIVE, "the newer evidence it rests on")
    reason: str = Field("", max_length=500)


class AddContradiction(_Action):
    """Flag observations that cannot all be true, without choosing between them."""

    content: Statement = Field(description="what conflicts with what")
    premise_ids: list[ObsId] = _premises(Level.CONTRADICTION, "the conflicting observations")


class RemoveDeduction(_Action):
    """Withdraw a deductive observation that no longer holds (its premises changed or it was wrong)."""

    observation_id: ObsId
    reason: str = Field(min_length=1, max_length=500)


class SetPeerCard(_Action):
    """Replace the peer card: stable facts only, each starting IDENTITY:, ATTRIBUTE:, RELATIONSHIP: or INSTRUCTION:."""

    entries: list[str] = Field(max_length=40)


class AddPattern(_Action):
    """Record a pattern seen across two or more observations; confidence follows from how many support it."""

    premise_ids: list[ObsId] = _premises(Level.INDUCTIVE, "the observations that show it")  # first, as above
    pattern_type: PatternType
    content: Statement = Field(description="what the cited observations have in common")


Action = AddDeduction | UpdateKnowledge | AddContradiction | RemoveDeduction | SetPeerCard | AddPattern


@dataclass(frozen=True)
class NamedObservation:
    """An observation an action names, as the store (or this dream) holds it."""

    observer_id: str
    observed_id: str
    level: str
    live: bool
    content: str = ""
    derivation: str = ""  # the derivation of the pair's store it belongs to ("" the original)
    deleted: bool = False  # withdrawn (by a client or a dream), not merely superseded
    premise_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dream:
    """Who is dreaming: the pair, the dream, the specialist and who to credit events to."""

    workspace_id: str
    observer_id: str
    observed_id: str
    dream_id: str
    producer: ProducerInfo
    causation_id: str
    derivation: str = ""  # the pair's current derivation when the dream began: its edits go there
    peer_card: bool = True  # whether the peer card is on for the pair (DreamRequested.peer_card)


@dataclass(frozen=True)
class DreamWrites:
    """What this dream wrote so far: new observations (by id, with level) and the ones it retired."""

    added: dict[str, str] = field(default_factory=dict)
    retired: frozenset[str] = frozenset()
    contents: dict[str, str] = field(default_factory=dict)  # normalised content → id, to refuse repeats
    premises: dict[str, tuple[str, ...]] = field(default_factory=dict)  # what each new one rests on
    # each new one's derivation: the dream's, or every derivation's for one replacing a client's write
    derivations: dict[str, str] = field(default_factory=dict)

    def rests_on(self, premise_ids: Sequence[str]) -> set[str]:
        """`premise_ids` and, through this dream's new observations among them, everything they rest on."""
        seen: set[str] = set()
        todo = list(premise_ids)
        while todo:
            i = todo.pop()
            if i not in seen:
                seen.add(i)
                todo += self.premises.get(i, ())
        return seen

    def overlay(self, dream: Dream, known: dict[str, NamedObservation]) -> dict[str, NamedObservation]:
        texts = {i: text for text, i in self.contents.items()}
        view = {
            **known,
            **{
                i: NamedObservation(
                    dream.observer_id,
                    dream.observed_id,
                    level,
                    True,
                    texts.get(i, ""),
                    self.derivations.get(i, dream.derivation),
                )
                for i, level in self.added.items()
            },
        }
        return {i: replace(k, live=False) if i in self.retired else k for i, k in view.items()}


@dataclass(frozen=True)
class ActionResult:
    events: list[Event]
    reply: str  # what the specialist is told
    pending: DreamWrites
    accepted: bool


def _pair(d: Dream) -> dict:
    return dict(
        workspace_id=d.workspace_id,
        observer_id=d.observer_id,
        observed_id=d.observed_id,
        producer=d.producer,
        causation_id=d.causation_id,
    )


def _in_store(d: Dream) -> dict:
    """The fields of an event about the pair's store: the pair, in the dream's derivation."""
    return {**_pair(d), "derivation": d.derivation}


def _refuse(d: Dream, pending: DreamWrites, level: Level, content: str, premises, problems: list[str]) -> ActionResult:
    event = ObservationRejected(
        **_in_store(d),
        rejection_id=new_id(),
        level=level,
        content=content,
        reason="; ".join(problems),
        premise_ids=tuple(premises),
        dream_id=d.dream_id,
    )
    return ActionResult([event], "rejected: " + "; ".join(problems), pending, False)


def _add(
    d: Dream,
    pending: DreamWrites,
    view: dict[str, NamedObservation],
    level: Level,
    content: str,
    premises: list[str],
    vector,
    **extra,
) -> tuple[ObservationAdded | None, ActionResult | None]:
    states = {i: PremiseState(k.observer_id, k.observed_id, k.live) for i, k in view.items()}
    problems = premise_problems(level, d.observer_id, d.observed_id, premises, states)
    if normalise(content) in pending.contents:
        problems.append(f"this dream already wrote that as {pending.contents[normalise(content)]}")
    problems.extend(_restated(view, content, premises, d))
    if problems:
        return None, _refuse(d, pending, level, content, premises, problems)
    return ObservationAdded(
        **{**_in_store(d), **extra},
        observation_id=new_id(),
        level=level,
        content=content,
        premise_ids=tuple(dict.fromkeys(premises)),
        embedding=PackedVector.of(vector),
        dream_id=d.dream_id,
    ), None


def _restated(view: dict[str, NamedObservation], content: str, premises: list[str], d: Dream) -> list[str]:
    # a conclusion that repeats one of its premises, or a belief the pair's store already holds, adds
    # nothing; small models write them often. `view` holds the live and deleted observations with this content too
    key = normalise(content)
    copied = next((p for p in premises if p in view and normalise(view[p].content) == key), None)
    if copied:
        return [f"it only restates its premise {copied}: write what the premises show together, in new words"]
    same = {
        i: k
        for i, k in view.items()
        if (k.observer_id, k.observed_id) == (d.observer_id, d.observed_id) and normalise(k.content) == key
    }
    held = sorted(i for i, k in same.items() if k.live)
    if held:
        return [f"observation {held[0]} already says that: cite it, or write only what is new"]
    # a deletion judges that conclusion from those premises: citing them again (with or without more) does
    # not make it true, and each dream would otherwise restore it (a deleted fact without premises: always)
    withdrawn = sorted(i for i, k in same.items() if k.deleted and set(k.premise_ids) <= set(premises))
    return [f"observation {withdrawn[0]} said that and was deleted: do not write it again"] if withdrawn else []


def _written(pending: DreamWrites, event: ObservationAdded, more: list[Event] = (), retired: str = "") -> ActionResult:
    new = DreamWrites(
        {**pending.added, event.observation_id: event.level.value},
        pending.retired | ({retired} if retired else set()),
        {**pending.contents, normalise(event.content): event.observation_id},
        {**pending.premises, event.observation_id: tuple(event.premise_ids)},
        {**pending.derivations, event.observation_id: event.derivation},
    )
    return ActionResult([event, *more], f"ok: written as {event.observation_id}", new, True)


def _retirable(d: Dream, view: dict[str, NamedObservation], obs_id: str, levels: tuple[str, ...]) -> str | None:
    k = view.get(obs_id)
    if k is None or (k.observer_id, k.observed_id) != (d.observer_id, d.observed_id):
        return f"observation {obs_id!r} is not in this memory"
    if not k.live:
        return f"observation {obs_id!r} was already superseded or deleted"
    # a staged re-derivation changes only when promoted, never by a dream; a client's write is in every one
    if k.derivation not in (d.derivation, PAIR_WIDE):
        return f"observation {obs_id!r} is in another derivation of this memory; only its current one can change"
    if k.level not in levels:
        return f"observation {obs_id!r} is {k.level}; only {' or '.join(levels)} observations can be changed this way"
    return None


def decide_edit(
    pending: DreamWrites,
    known: dict[str, NamedObservation],
    action: Action,
    d: Dream,
    vector=(),
    embedding_model: str = "",
    card: Sequence[str] = (),
) -> ActionResult:
    """The events for `action` (or its refusal) and the dream's new pending state; `card` is the peer card
    as the dream read it."""
    view = pending.overlay(d, known)
    model = dict(embedding_model=embedding_model)
    if isinstance(action, SetPeerCard):
        problems = card_problems(action.entries)
        if not action.entries and card:  # a garbage reply must not erase what a client curated
            problems.append(f"an empty card would erase all {len(card)} entries; set the entries that still hold")
        if problems:
            return ActionResult([], "rejected: " + "; ".join(problems), pending, False)
        return ActionResult(
            [PeerCardUpdated(**_pair(d), entries=tuple(action.entries), replaces=tuple(card))],
            "ok: card replaced",
            pending,
            True,
        )
    if isinstance(action, RemoveDeduction):
        problem = _retirable(d, view, action.observation_id, ("deductive",))
        if problem:
            return ActionResult([], "rejected: " + problem, pending, False)
        event = ObservationDeleted(**_in_store(d), observation_id=action.observation_id, reason=action.reason)
        return ActionResult(
            [event], "ok: removed", replace(pending, retired=pending.retired | {action.observation_id}), True
        )
    if isinstance(action, UpdateKnowledge):
        problems = [p for p in [_retirable(d, view, action.outdated_id, ("explicit", "deductive"))] if p]
        if action.outdated_id in pending.rests_on(action.premise_ids):
            # the write supersedes that premise (or one a deduction of this dream it cites rests on), so the
            # new belief would be born premise-superseded, retired on evidence made from itself
            problems.append(
                f"it rests on the observation it replaces ({action.outdated_id}), directly or through a "
                "deduction of this dream: cite the newer evidence instead"
            )
        if problems:
            return _refuse(d, pending, Level.DEDUCTIVE, action.content, action.premise_ids, problems)
        # what replaces a client's observation lives where it did, in every derivation: in the dream's
        # alone, a promotion would leave the pair's store without the fact at all
        wide = {"derivation": PAIR_WIDE} if view[action.outdated_id].derivation == PAIR_WIDE else {}
        added, refused = _add(
            d, pending, view, Level.DEDUCTIVE, action.content, action.premise_ids, vector, **model, **wide
        )
        if refused:
            return refused
        retire = ObservationSuperseded(
            **_in_store(d),
            observation_id=action.outdated_id,
            superseded_by=added.observation_id,
            reason=action.reason or "knowledge update",
        )
        return _written(pending, added, [retire], retired=action.outdated_id)
    if isinstance(action, AddPattern):
        added, refused = _add(
            d,
            pending,
            view,
            Level.INDUCTIVE,
            action.content,
            action.premise_ids,
            vector,
            pattern_type=action.pattern_type,
            confidence=confidence_for(len(set(action.premise_ids))),
            **model,
        )
    else:
        level = Level.CONTRADICTION if isinstance(action, AddContradiction) else Level.DEDUCTIVE
        added, refused = _add(d, pending, view, level, action.content, action.premise_ids, vector, **model)
    return refused or _written(pending, added)


def named_ids(action: Action) -> list[str]:
    """The observation ids an action refers to (the shell looks these up before deciding)."""
    ids = list(getattr(action, "premise_ids", []))
    for name in ("outdated_id", "observation_id"):
        if getattr(action, name, None):
            ids.append(getattr(action, name))
    return ids
