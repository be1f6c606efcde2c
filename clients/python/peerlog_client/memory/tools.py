"""The five memory tools, each declared once: a pydantic input (its JSON schema), a description, a
handler. `schemas(config, "openai" | "anthropic")` for the model, `dispatch(provider, name, args)` to run one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from peerlog_client.errors import DeadlineExceeded, PeerlogError, Unavailable
from peerlog_client.memory import policy
from peerlog_client.memory.config import Level, MemoryConfig
from peerlog_client.memory.provider import MemoryUnavailable
from peerlog_client.models import Observation

if TYPE_CHECKING:
    from peerlog_client.memory.provider import MemoryProvider


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProfileArgs(_Args):
    peer: str = Field(
        "user", description='Whose card: "user" (the person you talk to) or "ai" (yourself).', pattern="^(user|ai)$"
    )
    card: list[str] | None = Field(
        None,
        min_length=1,  # [] from a model filling in an optional field wiped the card
        description=(
            "To replace the card: every entry, each starting with IDENTITY:, ATTRIBUTE:, RELATIONSHIP: or "
            "INSTRUCTION:. Leave out to read the card."
        ),
    )


class SearchArgs(_Args):
    query: str = Field(description="What to look for, in words.", min_length=1)
    limit: int = Field(8, ge=1, le=50, description="How many excerpts at most.")


class ContextArgs(_Args):
    search_query: str = Field("", description="Optional: also bring up the past messages most relevant to this.")
    tokens: int = Field(2000, ge=100, le=50_000, description="The most tokens the context may take.")


class ReasoningArgs(_Args):
    query: str = Field(description="A question about the person, in natural language.", min_length=1)


class DynamicReasoningArgs(ReasoningArgs):
    reasoning_level: Level | None = Field(
        None, description=("How hard to think: minimal, low, medium, high or max (default: the configured level).")
    )


class ConcludeArgs(_Args):
    conclusion: str | None = Field(None, description="A fact about the person to remember.", min_length=1)
    delete_id: str | None = Field(
        None,
        description=("The id of a conclusion to delete (for personal data that must go); deletes only that one."),
        pattern="^[A-Za-z0-9_-]{1,512}$",
    )

    @model_validator(mode="after")
    def _one(self) -> ConcludeArgs:
        if (self.conclusion is None) == (self.delete_id is None):
            raise ValueError("give exactly one of conclusion (to create) or delete_id (to delete)")
        return self


# what a tool result may take of the model's context: a message may hold 25,000 characters, and 50 of them
# in one result (1.25 MB) overflowed the model's next call. Each message's text is cut to an excerpt, and a
# search stops adding hits once their excerpts take RESULT_CHARS
EXCERPT_CHARS = 2_000
RESULT_CHARS = 24_000


def excerpt(text: str) -> str:
    """`text`, or its first EXCERPT_CHARS characters and how many more there were."""
    if len(text) <= EXCERPT_CHARS:
        return text
    return f"{text[:EXCERPT_CHARS]}… [{len(text) - EXCERPT_CHARS} more characters]"


class Refused(Exception):
    """What the tools do not do: write about the human during a turn from another bot, or show or change
    the AI's own card where someone other than the one user it serves would be told it."""


# --- handlers: (provider, args) -> a JSON-able result ---------------------------------------------


def _profile(p: MemoryProvider, a: ProfileArgs) -> Any:
    user = p.current_user()
    observer, target = (p.observer_of(user), user) if a.peer == "user" else (p.config.ai_peer, None)
    if target is None and not p.ai_card_is_users(user):
        # a dream writes the AI's card from every chat it was in: read here, it tells this user what another
        # said; written here, one user would write what all the others are told
        raise Refused(
            "peerlog_profile does not show or change your own card in a chat of many users or during a turn "
            "from another bot; it holds what you learned in every chat"
        )
    if a.card is None:
        return {"peer": target or p.config.ai_peer, "card": list(p.peer(observer).card(target=target).entries)}
    if p.bot_turn:
        raise Refused("peerlog_profile does not change cards during a turn from another bot")
    card = p.peer(observer).set_card(a.card, target=target)
    return {"peer": target or p.config.ai_peer, "card": list(card.entries), "updated": True}


def _search(p: MemoryProvider, a: SearchArgs) -> Any:
    # the user's perspective, not the AI's: the AI was in every user's sessions, this user only in their own
    hits = p.workspace().search(
        a.query,
        perspective=p.current_user(),
        limit=a.limit,
        rerank=p.config.rerank_search,
        time_zone=p.config.time_zone,
    )
    found, room = [], RESULT_CHARS
    for h in hits:
        content = excerpt(h.message.content)
        if found and len(content) > room:
            break  # the best hits come first: the rest would not fit the model's context either
        room -= len(content)
        found.append(
            {
                "session": h.message.session_id,
                **_author(h.message),
                "content": content,
                "created_at": h.message.created_at.isoformat() if h.message.created_at else None,
                "score": round(h.score, 4),
            }
        )
    return found


def _context(p: MemoryProvider, a: ContextArgs) -> Any:
    user = p.current_user()
    ctx = p.current_session().context(
        tokens=a.tokens,
        search_query=a.search_query,
        observer=p.observer_of(user),
        target=user,
        assistant=p.config.ai_peer,
        perspective=user,  # the AI is in every user's sessions: pack only what this user saw
        time_zone=p.config.time_zone,
    )
    return {
        "summary": ctx.summary,
        "representation": ctx.representation,
        "card": list(ctx.peer_card),
        "relevant_messages": [
            {**_author(m), "session": m.session_id, "content": excerpt(m.content)} for m in ctx.relevant_messages
        ],
        "recent_messages": [{**_author(m), "content": excerpt(m.content)} for m in ctx.messages],
    }


def _author(message: Any) -> dict[str, str]:
    """Who wrote a message, for the model: its peer, and the display name it was sent under, if any."""
    return {"peer": message.peer_id, **({"name": message.author_name} if message.author_name else {})}


def _reasoning(p: MemoryProvider, a: ReasoningArgs) -> Any:
    level = getattr(a, "reasoning_level", None) or p.config.dialectic_reasoning_level
    user = p.current_user()
    query = policy.chat_query(a.query, p.config.dialectic_max_input_chars)
    # the AI's knowledge of the user answers, but only from turns the user was there for: the AI is in every
    # user's sessions, and one user must not be quoted what another said
    answer = p.peer(p.observer_of(user)).chat(
        query,
        target=user,
        session=p.current_session(),
        level=level,
        timeout=p.config.timeout,
        perspective=user,
        time_zone=p.config.time_zone,
    )
    return {"answer": answer.answer, "level": level}


def _conclude(p: MemoryProvider, a: ConcludeArgs) -> Any:
    if p.bot_turn:
        raise Refused("peerlog_conclude does not write during a turn from another bot")
    user = p.current_user()
    observer = p.observer_of(user)
    if a.delete_id is not None:
        found = p.workspace().observation(a.delete_id)
        if (found.observer_id, found.observed_id) != (observer, user):
            raise ValueError(f"{a.delete_id} is not a conclusion about {user}; nothing deleted")
        p.workspace().delete_observation(a.delete_id, "deleted through peerlog_conclude")
        return {"deleted": a.delete_id}
    text = " ".join(policy.storable(a.conclusion).split())
    key = conclusion_key(observer, user, text)
    while True:
        # the same conclusion is the same write: a retry of one whose reply was lost does not store it twice
        created = p.peer(observer).create_observations([text], target=user, idempotency_key=key)
        first = created.observation_ids[0]
        if not _retired(p.workspace().observation(first)):
            return {"created": list(created.observation_ids)}
        key = conclusion_key(observer, user, text, retired=first)  # concluded again after it was retired


def _retired(observation: Observation) -> bool:
    """Deleted, or superseded (a dream replaces a client's conclusion too): no longer in force, so the
    conclusion stated again must be stored anew rather than answered with the retired one's reply."""
    return observation.deleted_at is not None or observation.superseded_at is not None


def conclusion_key(observer: str, target: str, text: str, retired: str = "") -> str:
    """The idempotency key of concluding `text` about `target`: one per conclusion, and a new one once the
    observation it last stored (`retired`) was deleted or superseded."""
    raw = "\x1f".join((observer, target, text, retired))
    return "conclude-" + hashlib.sha256(raw.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[_Args]
    handler: Callable[[MemoryProvider, Any], Any]
    writes: bool = False  # a call may change memory: an unanswered one may have done so


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "peerlog_profile",
            "Read the card of stable facts about the person (or about yourself), or replace "
            "it by passing every entry in `card`.",
            ProfileArgs,
            _profile,
            writes=True,
        ),
        Tool(
            "peerlog_search",
            "Search past conversations for raw excerpts about something, by meaning and words; no synthesis.",
            SearchArgs,
            _search,
        ),
        Tool(
            "peerlog_context",
            "The full memory context of this session: summary, what is known about the "
            "person, their card, and recent messages.",
            ContextArgs,
            _context,
        ),
        Tool(
            "peerlog_reasoning",
            "Ask peerlog's memory a question about the person and get a synthesized "
            "answer from everything it has learned.",
            ReasoningArgs,
            _reasoning,
        ),
        Tool(
            "peerlog_conclude",
            "Remember a conclusion about the person (`conclusion`), or delete one by its "
            "id (`delete_id`), e.g. personal data the person asked to forget.",
            ConcludeArgs,
            _conclude,
            writes=True,
        ),
    )
}
TOOL_NAMES = tuple(TOOLS)


def _args_model(tool: Tool, config: MemoryConfig) -> type[_Args]:
    """With dialecticDynamic the model may pick the reasoning level; without it the parameter is absent."""
    return DynamicReasoningArgs if tool.args is ReasoningArgs and config.dialectic_dynamic else tool.args


def input_schema(tool: Tool, config: MemoryConfig) -> dict[str, Any]:
    schema = _args_model(tool, config).model_json_schema()
    schema.pop("title", None)
    return schema


def schemas(config: MemoryConfig, fmt: str = "openai") -> list[dict[str, Any]]:
    """Every tool in OpenAI's function-tool format or Anthropic's tool format."""
    if fmt == "openai":
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": input_schema(t, config)},
            }
            for t in TOOLS.values()
        ]
    if fmt == "anthropic":
        return [
            {"name": t.name, "description": t.description, "input_schema": input_schema(t, config)}
            for t in TOOLS.values()
        ]
    raise ValueError(f"unknown tool format {fmt!r}: openai or anthropic")


def run(provider: MemoryProvider, name: str, args: dict[str, Any] | str | None) -> Any:
    """Run a tool; raises ValueError for a bad name or arguments, PeerlogError and the like for the rest."""
    if name not in TOOLS:
        raise ValueError(f"no tool {name!r} (tools: {', '.join(TOOLS)})")
    if provider.config.recall_mode == "context":
        raise ValueError("memory tools are off in context mode")
    tool = TOOLS[name]
    if isinstance(args, str):  # "" is what some models send for a tool without arguments
        args = json.loads(args) if args.strip() else None
    parsed = _args_model(tool, provider.config).model_validate({} if args is None else args)

    def work() -> Any:
        provider.current_session()  # created on the first tool call unless initOnSessionStart made it
        return tool.handler(provider, parsed)

    return provider.call(name, work)


def dispatch(provider: MemoryProvider, name: str, args: dict[str, Any] | str | None) -> str:
    """Run a tool call and answer in text for the model: its result as JSON, or an error line. It never
    raises for what the model or the server did wrong."""
    try:
        return json.dumps(run(provider, name, args), ensure_ascii=False)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors())
        return f"error: invalid arguments for {name}: {problems}"
    except (ValueError, Refused) as error:
        return f"error: {error}{_maybe_written(name, error)}"
    except PeerlogError as error:  # the server's answer: counted and logged, as every failure is
        provider._failed(name, error)
        return f"error: {error}{_maybe_written(name, error)}"
    except Exception as error:  # noqa: BLE001 - MemoryUnavailable, and whatever else: the turn goes on
        provider.stats.failures[name] += 1
        return f"error: peerlog memory is unavailable ({error}){_maybe_written(name, error)}"


def _maybe_written(name: str, error: Exception) -> str:
    """For a write left unanswered (it may have landed all the same): what the model should know."""
    if name in TOOLS and TOOLS[name].writes and isinstance(error, MemoryUnavailable | DeadlineExceeded | Unavailable):
        return "; it may have been saved all the same: calling again with the same arguments does not save it twice"
    return ""
