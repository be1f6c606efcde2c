"""Pure GetContext packing: fit a representation, a card, a summary and recent messages into a budget.

Every part is counted with the same tokenizer and returned separately, so the total is exact and
never exceeds the budget. When the representation and card alone are too big they are trimmed
deterministically: the lowest-ranked observations first, then the card's last entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.events import Level

Count = Callable[[str], int]


@dataclass(frozen=True)
class Premise:
    observation_id: str
    level: str
    content: str


@dataclass(frozen=True)
class Obs:
    observation_id: str
    content: str
    level: str
    created_key: tuple  # (created_at, observation_id): sorts in time order
    session_id: str = ""
    times_derived: int = 1
    premises: tuple[Premise, ...] = ()  # derived levels: what it follows from
    confidence: str = ""  # inductive only
    pattern_type: str = ""  # inductive only


@dataclass(frozen=True)
class Line:
    message_id: str
    peer_id: str
    content: str


@dataclass(frozen=True)
class Packed:
    observations: tuple[Obs, ...]  # in time order
    representation: str
    card: tuple[str, ...]
    summary_kind: str  # "long", "short" or ""
    summary: str
    messages: tuple[Line, ...]  # in time order
    tokens: dict[str, int]


LEVELS = tuple(level.value for level in Level)  # the order of the markdown's sections
# how each derived level names what it rests on
_PREMISE_LABEL = {"deductive": "premise", "inductive": "source", "contradiction": "conflicts with"}


def _render_item(o: Obs) -> str:
    details = [d for d in (o.pattern_type, f"confidence {o.confidence}" if o.confidence else "") if d]
    head = f"- {o.content}" + (f" ({'; '.join(details)})" if details else "")
    label = _PREMISE_LABEL.get(o.level)
    return "\n".join([head, *(f"  - {label}: {p.content}" for p in o.premises if label)])


def render_representation(kept: Sequence[Obs]) -> str:
    """Markdown, one section per level that has observations, each in time order. Deductive ones list
    their premises, inductive ones their pattern type, confidence and sources, contradictions what clashes."""
    ordered = sorted(kept, key=lambda o: o.created_key)
    sections = []
    for level in LEVELS:
        items = [_render_item(o) for o in ordered if o.level == level]
        if items:
            sections.append(f"## {level.capitalize()}\n" + "\n".join(items))
    return "\n\n".join(sections)


def render_line(line: Line) -> str:
    return f"{line.peer_id}: {line.content}"


def _fit_representation(ranked: Sequence[Obs], card: Sequence[str], budget: int, count: Count):
    kept, entries = list(ranked), list(card)
    rep, card_text = render_representation(kept), "\n".join(entries)
    while count(rep) + count(card_text) > budget and kept:
        kept.pop()  # ranked best first: the last is the lowest-ranked
        rep = render_representation(kept)
    while count(card_text) > budget and entries:
        entries.pop()
        card_text = "\n".join(entries)
    return kept, rep, entries, card_text


def _pick_summary(short: str, long: str, cap: float, count: Count) -> tuple[str, str]:
    if long and count(long) <= cap and count(long) > count(short or ""):
        return "long", long
    if short and count(short) <= cap:
        return "short", short
    return "", ""


def pack(budget: int, ranked: Sequence[Obs], card: Sequence[str], short: str, long: str,
         newest_first: Sequence[Line], count: Count, include_summary: bool = True) -> Packed:
    """Fill `budget` tokens: representation and card first, summary ≤ 0.4 of the rest, then messages."""
    kept, rep, entries, card_text = _fit_representation(ranked, card, budget, count)
    rest = budget - count(rep) - count(card_text)
    kind, summary = _pick_summary(short, long, 0.4 * rest, count) if include_summary else ("", "")
    room = rest - count(summary)
    lines: list[Line] = []
    for line in newest_first:
        cost = count(render_line(line))
        if cost > room:
            break  # keep the recent window contiguous
        lines.append(line)
        room -= cost
    tokens = {"representation": count(rep), "card": count(card_text), "summary": count(summary),
              "messages": sum(count(render_line(x)) for x in lines)}
    tokens["total"] = sum(tokens.values())
    ordered = tuple(sorted(kept, key=lambda o: o.created_key))
    return Packed(ordered, rep, tuple(entries), kind, summary, tuple(reversed(lines)), tokens)
