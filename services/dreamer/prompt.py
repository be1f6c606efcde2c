"""The dream specialists' prompts (versioned): deduction, then induction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.toolloop.turns import tool_catalogue

PROMPT_VERSIONS = {"deduction": "deduction-3", "induction": "induction-3"}

COMMON = """You are consolidating the memory that {observer} holds about {target}: observations (explicit: stated
in a message; deductive, inductive: derived from premises; contradiction: flags conflicts), each shown as
[obs:ID]. Work from the observations listed; the discovery tools find more when you need them. Every write cites premise ids you were
shown, such as #3 (without the obs: prefix); a write whose premises do not exist, belong elsewhere or were retired is
refused and you are told why. Write only what the memory supports: no guesses, no restating an observation
that already exists. When you can make no more supported edits, stop: reply with one short sentence and no tool call."""

CARD_DUTY = """
- the peer card: set_peer_card with stable facts only, each entry starting IDENTITY:, ATTRIBUTE:,
  RELATIONSHIP: or INSTRUCTION:, at most 40 entries of at most 200 characters (it replaces the whole card)."""

DEDUCTION = (
    COMMON
    + """

Your job is deduction:
- knowledge updates: when a newer observation shows an older one is no longer true, use update_knowledge
  (the new belief cites the newer evidence; the outdated observation is retired);
- logical implications: add_deduction for what follows necessarily from the premises;
- contradictions: add_contradiction citing observations that cannot all be true (do not choose between them);
- stale deductions: remove_deduction for a deduction whose basis no longer holds;"""
    + CARD_DUTY
)

INDUCTION = (
    COMMON
    + """

Your job is induction: patterns that show across two or more observations — a preference, behaviour,
personality trait, tendency or correlation — with add_pattern. A pattern is a new, more general sentence in
your own words about what the cited observations have in common; it never copies one observation's text.
Patterns are additive: never retire anything. Confidence follows from the number of different supporting
observations (2: low, 3–4: medium, 5+: high), so cite each one that supports the pattern, once."""
)

SYSTEMS = {"deduction": DEDUCTION, "induction": INDUCTION}

STRUCTURED = """Reply with one JSON object only, no prose and no code fences: either
{{"tool": "<name>", "arguments": {{...}}}} to call one tool, or {{"done": "<one sentence>"}} when you can make
no more supported edits. For example {example}. Tools:
{catalogue}"""

# worked examples about someone else, so that a model copying one is plain to see
EXAMPLES = {
    "deduction": 'given [obs:#1] "Bob lives in Oslo": {"tool": "add_deduction", "arguments": {"premise_ids": '
    '["#1"], "content": "Bob lives in Norway"}}',
    "induction": 'given [obs:#1] "Bob runs every morning" and [obs:#2] "Bob cycles to work": {"tool": '
    '"add_pattern", "arguments": {"premise_ids": ["#1", "#2"], "pattern_type": "behaviour", '
    '"content": "Bob exercises as part of his daily routine"}}',
}

FORCE_STOP = "You have used all your tool rounds. Stop now: reply with one short sentence and no tool call."
NOT_RUN = "not run: at most {most} tool calls of one turn run; call it again in a later turn if still needed"


def system_prompt(
    specialist: str, observer: str, target: str, structured_tools: Sequence[dict[str, Any]] = (), peer_card: bool = True
) -> str:
    """The specialist's instructions; without the peer-card duty where the configuration turns the card off."""
    text = SYSTEMS[specialist].format(observer=observer, target="itself" if target == observer else target)
    if not peer_card:
        text = text.replace(CARD_DUTY, "")
    if structured_tools:
        text += "\n\n" + STRUCTURED.format(catalogue=tool_catalogue(structured_tools), example=EXAMPLES[specialist])
    return text


# the opening ends with the specialist's question: small models act on the last thing they read
QUESTIONS = {
    "deduction": "What follows from these observations that none of them says, what has changed, and what "
    "conflicts? Act with one tool call, or stop.",
    "induction": "Which two or more of these observations show the same preference, behaviour, trait, tendency "
    "or correlation? Record it with add_pattern, or stop.",
}


def opening(specialist: str, observation_lines: Sequence[str], card: Sequence[str], written: Sequence[str]) -> str:
    parts = [
        "Recent observations:\n" + ("\n".join(observation_lines) or "(none)"),
        "Current peer card:\n" + ("\n".join(card) or "(empty)"),
    ]
    if written:
        parts.append("Written earlier in this dream:\n" + "\n".join(written))
    return "\n\n".join([*parts, QUESTIONS[specialist]])
