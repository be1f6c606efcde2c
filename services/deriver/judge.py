"""Pure judgement of a model's proposed facts: grounding, de-duplication, and the events that follow."""

from __future__ import annotations

import hashlib
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from services.deriver.batching import PendingMessage
from services.deriver.grounding import locate
from services.deriver.prompt import ExtractedFact
from services.events import (
    Event,
    Level,
    ObservationAdded,
    ObservationDeleted,
    ObservationReinforced,
    ObservationRejected,
    ObservationSuperseded,
    PackedVector,
    ProducerInfo,
    Source,
)
from services.events.pairs import Pair
from services.events.text import ClaimWord, claim_words, normalise, span_support, words

# the share of a fact's content words its span must contain: "Great." does not ground a fact about a job, while
# a short span that leans on earlier turns ("she is my pet" for "Alice has a pet cat named Miso") still does
MIN_SPAN_SUPPORT = 0.25
# the most facts judged from one window's reply; the rest are rejected unjudged. A window is at most
# `window_tokens` (1,024) of turns and a reply `max_tokens` (1,024), some 50 facts of 20 tokens: 100 cuts no
# honest reply, and bounds the work a model that ignores max_tokens (or one 25,000-character message) can cause
MAX_FACTS_PER_WINDOW = 100


def batch_id(workspace: str, observer: str, observed: str, message_ids: Sequence[str], derivation: str = "") -> str:
    """Deterministic, so a batch retried after a crash keeps its id; each derivation has its own ids."""
    raw = "/".join([workspace, observer, observed, *message_ids])
    bid = hashlib.sha256(raw.encode()).hexdigest()[:24]
    return hashlib.sha256(f"{derivation}/{bid}".encode()).hexdigest()[:24] if derivation else bid


@dataclass(frozen=True)
class KnownObservation:
    """An observation already in the pair's store, as dedup needs it."""

    observation_id: str
    level: Level
    normalised: str
    session_id: str | None
    embedding: tuple[float, ...]
    # a client wrote it (CreateObservations): a derived fact may reinforce it, never retire it
    client: bool = False


@dataclass
class Verdicts:
    events: list[Event] = field(default_factory=list)
    added: int = 0
    reinforced: int = 0
    superseded: int = 0
    rejected: int = 0
    new_known: list[KnownObservation] = field(default_factory=list)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    # embeddings are L2-normalised, so the dot product is the cosine
    return sum(x * y for x, y in zip(a, b, strict=True)) if a and b and len(a) == len(b) else 0.0


def _cited(fact: ExtractedFact, window: Sequence[PendingMessage]) -> PendingMessage | None:
    return next((p for p in window if p.message_id == fact.message_id), None)


def unescaped(fact: ExtractedFact, window: Sequence[PendingMessage]) -> ExtractedFact:
    """The fact with its span as its message has it: a model that copied the span from the turn as the prompt
    showed it (`&amp;`, `&lt;`) copied the escaping too, and the span was not found in the message."""
    plain = html.unescape(fact.span)
    if plain == fact.span:
        return fact
    cited = _cited(fact, window)
    missing = cited is not None and locate(fact.span, cited.content) is None
    return fact.model_copy(update={"span": plain}) if missing else fact


def quoted(fact: ExtractedFact, window: Sequence[PendingMessage]) -> ExtractedFact:
    """The grounded fact with its span as its message's own text: a model's copy may differ in case, quotes or
    accents' encoding, and a source shows what the message said."""
    return fact.model_copy(update={"span": locate(fact.span, _cited(fact, window).content)})


def ground(fact: ExtractedFact, window: Sequence[PendingMessage], observed_id: str = "") -> str | None:
    """None if the fact's span is in the cited target message (`locate`) and supports the fact; else why not.
    The target's name (`observed_id`: its id and display name) is no content a span must hold."""
    cited = _cited(fact, window)
    if cited is None:
        return f"cites message {fact.message_id!r}, which is not one of the target's messages in this batch"
    if not words(fact.content) - words(observed_id):
        return "states nothing: its content has no words beyond the target's name"
    if not normalise(fact.span):
        return "has an empty span"
    if locate(fact.span, cited.content) is None:
        return f"span {fact.span!r} is not in message {fact.message_id!r}"
    found, wanted = span_support(fact.content, fact.span, subject=observed_id)
    if wanted and len(found) < MIN_SPAN_SUPPORT * len(wanted):
        return (
            f"span {fact.span!r} does not support the fact: it has {len(found)} of its {len(wanted)} content "
            f"words, fewer than {MIN_SPAN_SUPPORT:.0%}"
        )
    return None


class _Pool:
    """The observations a fact may match, in order: the known ones, then those this batch added before it (a
    superseded one dropped). Their vectors are the rows of one matrix, so a fact's cosines with all of them
    are one product: a cosine per pair in Python took 130 s for a reply of 1,600 facts, on the worker's loop."""

    def __init__(self, known: Sequence[KnownObservation], width: int, room: int):
        self.items: list[KnownObservation] = []
        self.live: list[bool] = []
        self.vectors = np.zeros((len(known) + room, width))
        # a row whose vector has another length (another model's) is as far as `cosine` makes it: 0
        self.fits = np.zeros(len(known) + room, dtype=bool)
        for k in known:
            self.append(k)

    def append(self, k: KnownObservation) -> None:
        i = len(self.items)
        self.items.append(k)
        self.live.append(True)
        if len(k.embedding) == self.vectors.shape[1]:
            self.vectors[i], self.fits[i] = k.embedding, True

    def drop(self, observation_id: str) -> None:
        for i, k in enumerate(self.items):
            if k.observation_id == observation_id:
                self.live[i] = False

    def cosines(self, emb: Sequence[float]) -> np.ndarray:
        n = len(self.items)
        if len(emb) != self.vectors.shape[1]:  # a vector of another length than the batch's first: as `cosine`
            return np.array([cosine(k.embedding, emb) for k in self.items])
        return np.where(self.fits[:n], self.vectors[:n] @ np.asarray(emb, dtype=float), 0.0)

    def match(self, norm: str, session: str, emb: Sequence[float], threshold: float):
        """("exact" | "near" | None, the observation): the same text in the same session; else the nearest
        (the first of equals) of the session's (and clients' written for no session) that the text restates,
        says less than or extends. A client's written for another session is that session's: reinforced from
        here, it would cite a message its own session's reads cannot see, and this session's reads would never
        find the fact."""
        explicit = [
            i
            for i, k in enumerate(self.items)
            if self.live[i]
            and k.level == Level.EXPLICIT
            and (k.session_id == session or (k.client and k.session_id is None))
        ]
        for i in explicit:
            if self.items[i].normalised == norm and self.items[i].session_id == session:
                return "exact", self.items[i]
        scores = self.cosines(emb)
        close = [i for i in explicit if scores[i] >= threshold and nested(norm, self.items[i].normalised)]
        best = max(close, key=lambda i: scores[i], default=None)
        return ("near", self.items[best]) if best is not None else (None, None)


def nested(new: str, old: str) -> bool:
    """Whether `new` is a near duplicate of `old` in its words: it says the same or less (`_says_no_more`), or the
    same and more (`_extends`). A changed date or number ("12 May" -> "14 May", cosine 0.997) is a new fact, not
    another count of the old one; a fact restated in another session belongs to that session's reads too."""
    return _says_no_more(new, old) or _extends(new, old)


def _says_no_more(new: str, old: str) -> bool:
    """Whether `new` restates `old` or says less: its words (`claim_words`, function words aside) all in `old`'s,
    in `old`'s order, with the same negation, tense and direction words. A statement in the past tense, reversed
    or with roles swapped ("Ann moved from Berlin to Oslo") is another fact, not support for the old one."""
    n, o = claim_words(new), claim_words(old)
    said = ("content", "marker")
    return _keys(n, "marker") == _keys(o, "marker") and _in_order(_keys(n, *said), _keys(o, *said))


def _extends(new: str, old: str) -> bool:
    """Whether `new` says what `old` says and more: it opens with `old`'s words in their order, with only content
    words added among them ("has a pet cat" for "has a cat") and anything after them ("lives in Oslo, Norway").
    A function word added among them makes another relation ("likes the sister of Bob"), a marker another claim
    ("no longer lives in"), and another opening word another subject ("Ann's wife works as a nurse")."""
    wanted = claim_words(old)
    matched = 0
    for word in claim_words(new):
        if matched == len(wanted):
            return True
        if word.key == wanted[matched].key:
            matched += 1
        elif word.kind != "content" or matched == 0:
            return False
    return matched == len(wanted)


def _keys(words: Sequence[ClaimWord], *kinds: str) -> list[str]:
    return [w.key for w in words if w.kind in kinds]


def _in_order(few: Sequence[str], many: Sequence[str]) -> bool:
    """Whether `few` is `many` with some words left out."""
    rest = iter(many)
    return all(word in rest for word in few)


# why a re-derivation withholds a proposed fact (with its vector): it restates one deleted through the API
Withhold = Callable[[ExtractedFact, Sequence[float]], str | None]


def judge(
    pair: Pair,
    facts: Sequence[ExtractedFact],
    embeddings: Sequence[Sequence[float]],
    window: Sequence[PendingMessage],
    known: Sequence[KnownObservation],
    *,
    batch: str,
    threshold: float,
    embedding_model: str,
    producer: ProducerInfo,
    cause: str | None,
    new_id: Callable[[], str],
    reinforce_clients: bool = True,
    withhold: Withhold | None = None,
) -> Verdicts:
    """The events for the model's proposed facts of one batch. Without `reinforce_clients` (a re-derivation),
    a fact a client already wrote is left as it is: the live deriver counts each message once for it. A fact
    `withhold` gives a reason for (a re-derivation's copy of one deleted through the API) is no evidence: it
    reinforces nothing, and is added and deleted at once, so another message's fact matches nothing of it.
    Past the first `MAX_FACTS_PER_WINDOW` facts, each is rejected unjudged."""
    out = Verdicts()
    proposed = list(zip(facts, embeddings, strict=True))
    judged = proposed[:MAX_FACTS_PER_WINDOW]
    pool = _Pool(known, width=len(embeddings[0]) if embeddings else 0, room=len(judged))
    common = {**pair.fields(), "producer": producer, "causation_id": cause}

    def reject(fact: ExtractedFact, reason: str) -> None:
        out.events.append(
            ObservationRejected(
                rejection_id=new_id(),
                level=Level.EXPLICIT,
                content=fact.content,
                reason=reason,
                sources=(Source(message_id=fact.message_id, span=fact.span),),
                batch_id=batch,
                **common,
            )
        )
        out.rejected += 1

    # (observation, message) pairs this batch already wrote: one message is one piece of evidence for a
    # fact, however many times the model repeats it (each repeat counted would lift it into the most
    # reinforced slice of every representation)
    evidenced: set[tuple[str, str]] = set()
    for fact, emb in judged:
        fact = unescaped(fact, window)
        problem = ground(fact, window, f"{pair.observed_id} {window[-1].observed_name}")
        if problem:
            reject(fact, f"not grounded: {problem}")
            continue
        fact = quoted(fact, window)
        source = Source(message_id=fact.message_id, span=fact.span)
        session = _cited(fact, window).session_id
        norm = normalise(fact.content)
        kind, match = pool.match(norm, session, emb, threshold)
        # a withheld fact reinforcing another message's copy would count the evidence its deletion withdrew
        why = withhold(fact, emb) if withhold else None
        if kind == "exact" or (kind == "near" and _says_no_more(norm, match.normalised)):
            if (
                why is not None
                or (match.observation_id, fact.message_id) in evidenced
                or (match.client and not reinforce_clients)
            ):
                continue
            evidenced.add((match.observation_id, fact.message_id))
            out.events.append(
                ObservationReinforced(observation_id=match.observation_id, sources=(source,), batch_id=batch, **common)
            )
            out.reinforced += 1
            continue
        added = ObservationAdded(
            observation_id=new_id(),
            level=Level.EXPLICIT,
            content=fact.content,
            session_id=session,
            sources=(source,),
            embedding=PackedVector.of(emb),
            embedding_model=embedding_model,
            batch_id=batch,
            **common,
        )
        out.events.append(added)
        out.added += 1
        if why is not None:
            # deleted in its batch, it never joins the pool: a later fact from another message is new evidence
            out.events.append(ObservationDeleted(observation_id=added.observation_id, reason=why, **common))
            continue
        evidenced.add((added.observation_id, fact.message_id))
        new = KnownObservation(added.observation_id, Level.EXPLICIT, norm, session, tuple(emb))
        if kind == "near" and not match.client:  # the new text extends the old one: it replaces it
            out.events.append(
                ObservationSuperseded(
                    observation_id=match.observation_id,
                    superseded_by=added.observation_id,
                    reason="near-duplicate with less information",
                    **common,
                )
            )
            out.superseded += 1
            pool.drop(match.observation_id)
        pool.append(new)
        out.new_known.append(new)
    for fact, _ in proposed[MAX_FACTS_PER_WINDOW:]:
        reject(fact, f"not judged: more than {MAX_FACTS_PER_WINDOW} facts from one window")
    return out
