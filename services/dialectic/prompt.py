"""The dialectic prompt (versioned) and how evidence is rendered for the model."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any

from services.events.times import in_zone, minute
from services.toolloop.memory import Row, message_line, observation_line
from services.toolloop.turns import tool_catalogue

PROMPT_VERSION = "dialectic-3"  # 3: the time the question is asked at, in the asker's zone

SYSTEM = """You answer questions about a peer, using only the memory of what {observer} knows about {target}.
Memory holds observations (explicit: stated in a message; deductive, inductive: derived from premises;
contradiction: flags conflicting observations) and the messages {observer} could see. Use only this memory.

Rules:
- Cite every observation and message your answer relies on with its marker exactly as shown, e.g. [obs:ID]
  or [msg:ID]. Never cite an id you have not been shown.
- A derived belief is only as good as its premises: follow it to its explicit premises (reasoning_chain,
  source_messages) and cite those.
- When something changed over time, prefer the most recent value that the evidence supports, and say so.
- When the evidence genuinely conflicts, present both sides with their citations instead of choosing.
- When the evidence is thin or missing, say that you do not know. Do not guess.
{tools}"""

TOOLS_NATIVE = "You may call the tools offered to look for more evidence; answer in plain text when done."
TOOLS_NONE = "Answer now from the evidence given."

STRUCTURED = """Reply with one JSON object only, no prose and no code fences: either
{{"tool": "<name>", "arguments": {{...}}}} to call one tool, or {{"answer": ..., "cited_ids": ["<id>", ...]}}
to finish (cited_ids: the ids you rely on, without the obs:/msg: prefix). Tools:
{catalogue}"""

JSON_ANSWER = """The final answer must be JSON matching this schema (no prose, no code fences):
{schema}
Put citations in cited_ids (structured mode) or leave them out; the answer itself must fit the schema."""

FORCE = {
    "round_cap": "You have used all your tool rounds. Answer now from the evidence above.",
    "token_budget": "There is no room for more tool results. Answer now from the evidence above.",
}

CALLS_DROPPED = (
    "\n[{dropped} more tool calls of that turn were not run: at most {most} run at once. Call again if needed.]"
)
NO_ROOM = "not run: the results above fill this round's room; call it again in a later turn if still needed"

REPAIR = """Your answer did not match the required JSON schema:
{error}
Reply again with only the corrected JSON, nothing else."""


def system_prompt(observer: str, target: str, tools: str) -> str:
    return SYSTEM.format(observer=observer, target="itself" if target == observer else target, tools=tools)


def structured_instruction(specs: Sequence[dict[str, Any]]) -> str:
    return STRUCTURED.format(catalogue=tool_catalogue(specs) or "(none: answer now)")


def json_answer_instruction(schema: Mapping[str, Any]) -> str:
    return JSON_ANSWER.format(schema=json.dumps(schema, separators=(",", ":")))


def asked_at(now: datetime, zone: tzinfo, as_of: datetime | None = None) -> str:
    """When the question is asked, in the asker's zone: without it, "yesterday" or "how long ago" has no
    anchor. As of a past time, memory's time is that one."""
    at = in_zone(as_of or now, zone)
    what = "Memory as it stood at" if as_of else "Asked at"
    return f"{what}: {minute(at)} ({at.tzinfo}, {minute(at.astimezone(UTC))} UTC)."


def user_prompt(
    query: str, explicit: Sequence[Row], derived: Sequence[Row], history: Sequence[Row], when: str = ""
) -> str:
    """The question with the prefetched evidence (history in time order) and `when` it is asked (asked_at)."""
    parts = []
    if explicit:
        parts.append(
            "Explicit observations most related to the question:\n" + "\n".join(map(observation_line, explicit))
        )
    if derived:
        parts.append("Derived observations most related to the question:\n" + "\n".join(map(observation_line, derived)))
    if history:
        parts.append("Recent messages of this session:\n" + "\n".join(map(message_line, history)))
    if not parts:
        parts.append("No observations matched the question.")
    return "\n\n".join([*parts, *([when] if when else []), f"Question: {query}"])
