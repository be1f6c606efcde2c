"""A session context as model input: OpenAI chat messages, or Anthropic's system text plus messages."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peerlog_client.models import Context, ContextMessage

_OPENAI_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI accepts as a message's `name`


def system_text(ctx: Context) -> str:
    """The memory part of a context as one text: representation, peer card, summary, relevant past
    messages, each under its own heading; "" when the context holds none of them."""
    relevant = _relevant_text(ctx.relevant_messages)
    sections = [
        ("What is known about the peer", ctx.representation),
        ("Peer card", "\n".join(f"- {entry}" for entry in ctx.peer_card)),
        (
            f"Summary of the conversation so far ({ctx.summary_kind})"
            if ctx.summary_kind
            else "Summary of the conversation so far",
            ctx.summary,
        ),
        ("Relevant messages from earlier conversations", relevant),
    ]
    return "\n\n".join(f"# {title}\n{body}" for title, body in sections if body.strip())


def _relevant_text(found) -> str:
    """Relevant messages as the server counted them: one "[session · day]" header per session and day,
    then "HH:MM author: text" lines, each message on one line (`one_line`), all in time order."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in sorted(found, key=lambda r: (r.created_at is None, r.created_at or 0, r.message_id)):
        day = r.created_at.date().isoformat() if r.created_at else ""  # "%Y" writes year 1 as "1"
        clock = f"{r.created_at:%H:%M} " if r.created_at else ""
        groups.setdefault((r.session_id, day), []).append(f"{clock}{author(r)}: {one_line(r.content)}")
    return "\n".join(
        "\n".join([f"[{session} · {day}]" if day else f"[{session}]", *lines])
        for (session, day), lines in groups.items()
    )


def openai_messages(ctx: Context, assistant: str) -> list[dict[str, Any]]:
    """A system message (when there is memory), then every turn in time order: `assistant`'s turns as
    "assistant", the rest as "user"; each named by its peer id (its display name, else its id, prefixed
    to the text instead where the id is not a valid OpenAI name)."""
    system = system_text(ctx)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for turn in ctx.messages:
        if _OPENAI_NAME.fullmatch(turn.peer_id):
            out.append({"role": _role(turn, assistant), "content": turn.content, "name": turn.peer_id})
        else:
            out.append({"role": _role(turn, assistant), "content": f"{author(turn)}: {turn.content}"})
    return out


def anthropic_messages(ctx: Context, assistant: str) -> tuple[str, list[dict[str, Any]]]:
    """(system text, messages) for the Messages API. Consecutive turns of one role merge (blank line
    between), so roles alternate; a conversation that opens with the assistant gets a short user turn
    first, since the list must start with a user turn. When several peers share the user role, each
    of their turns is prefixed with its display name or peer id, on one line (`one_line`), so the model
    can tell them apart."""
    speakers = {t.peer_id for t in ctx.messages if _role(t, assistant) == "user"}
    out: list[dict[str, Any]] = []
    for turn in ctx.messages:
        role = _role(turn, assistant)
        # a prefixed turn on one line: its own blank line and "carol: " passed for carol's turn in the merge
        text = f"{author(turn)}: {one_line(turn.content)}" if role == "user" and len(speakers) > 1 else turn.content
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n\n" + text
        else:
            out.append({"role": role, "content": text})
    if out and out[0]["role"] == "assistant":
        out.insert(0, {"role": "user", "content": "(earlier in this conversation)"})
    return system_text(ctx), out


def one_line(text: str) -> str:
    """`text` with every run of white space, line breaks included, as one space: the server's
    `services.events.text.one_line`, which the relevant messages' text and token count are made with. A
    message's line breaks forged a section ("\n\n# Peer card\n- ..."), a header or another's line."""
    return " ".join(text.split())


def author(turn) -> str:
    """How a line names its author, as the server counted it: its display name, else its peer id."""
    return turn.author_name or turn.peer_id


def _role(turn: ContextMessage, assistant: str) -> str:
    return "assistant" if assistant and turn.peer_id == assistant else "user"
