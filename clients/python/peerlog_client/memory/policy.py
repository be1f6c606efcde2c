"""The provider's decisions, free of I/O: when a layer is due, at which level each dialectic pass runs,
which prompt it gets, when a pass may stop the run, how context is cut to budget and messages to size."""

from __future__ import annotations

from dataclasses import dataclass

from peerlog_client.memory.config import LEVELS, MemoryConfig

CHARS_PER_TOKEN = 4  # the client has no tokenizer; ~4 characters a token for English text
LONG_QUERY, VERY_LONG_QUERY = 120, 400  # characters: +1 and +2 levels
STRONG_CHARS, STRONG_LINES = 400, 3  # a pass this long and this structured ends the run early

COLD_PROMPT = (
    "Who is this person? Describe what is known of their preferences, goals, habits and "
    "working style, and anything the assistant should keep in mind when talking to them."
)
WARM_PROMPT = (
    "Given what has been discussed in this session so far, what context about this person is most relevant right now?"
)
AUDIT_PROMPT = (
    "Here is an assessment of this person:\n{previous}\n\nAudit it: what does it miss or get "
    "wrong? Add the evidence from recent sessions that fills those gaps, and restate the "
    "assessment with them."
)
RECONCILE_PROMPT = (
    "Two assessments of this person follow.\n\nFirst:\n{first}\n\nSecond:\n{second}\n\n"
    "Find any contradictions between them, decide each from the evidence, and give one "
    "final synthesis."
)


def is_due(turn: int, last: int | None, cadence: int) -> bool:
    """A layer refreshed at turn `last` (None: never) is refreshed again at `turn` once `cadence` turns passed."""
    return last is None or turn - last >= cadence


def query_level(base: str, query: str, cap: str, heuristic: bool = True) -> str:
    """The level for an automatic dialectic call: +1 at ≥ 120 characters, +2 at ≥ 400, never above `cap`
    (nor lowered to it when the base is already above)."""
    if not heuristic:
        return base
    step = 2 if len(query) >= VERY_LONG_QUERY else 1 if len(query) >= LONG_QUERY else 0
    index = LEVELS.index(base)
    return LEVELS[max(index, min(index + step, LEVELS.index(cap)))]


def pass_levels(depth: int, base: str, given: list[str] | None = None) -> list[str]:
    """The level of each of `depth` passes: `given` when set (its last entry repeated if short), else
    lighter early passes rising one step a pass to `base` for the last."""
    if given:
        return [given[min(i, len(given) - 1)] for i in range(depth)]
    index = LEVELS.index(base)
    return [LEVELS[max(index - (depth - 1 - i), 0)] for i in range(depth)]


def first_prompt(warm: bool, query: str = "") -> str:
    """Pass 0: the cold prompt when no base context exists yet, else the warm one (with the user's turn)."""
    if not warm:
        return COLD_PROMPT
    return f"{WARM_PROMPT}\nThe person just said: {query}" if query else WARM_PROMPT


def next_prompt(answers: list[str]) -> str:
    """Pass 1 audits pass 0; pass 2 reconciles the two."""
    if len(answers) == 1:
        return AUDIT_PROMPT.format(previous=answers[0])
    return RECONCILE_PROMPT.format(first=answers[0], second=answers[1])


def strong_signal(answer: str) -> bool:
    """Long and structured: enough that a further pass would add little."""
    lines = [line for line in answer.splitlines() if line.strip()]
    return len(answer) >= STRONG_CHARS and len(lines) >= STRONG_LINES


def truncate_words(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` at a word boundary."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars + 1]
    space = cut.rfind(" ", 0, max_chars + 1)
    return (cut[:space] if space > 0 else text[:max_chars]).rstrip()


# what the server's Chat takes of a query: 8,000 tokens, and a cl100k token is at least one UTF-8 byte. Cut at
# dialecticMaxInputChars alone, a 6,300-character Chinese turn was 8,428 tokens: refused, and that turn
# went without its dialectic layer
CHAT_QUERY_BYTES = 8_000


def chat_query(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars` and to what Chat takes whatever the script, at a word boundary."""
    text = truncate_words(text, max_chars)
    data = text.encode()
    if len(data) <= CHAT_QUERY_BYTES:
        return text
    cut = data[:CHAT_QUERY_BYTES].decode(errors="ignore")
    space = cut.rfind(" ")
    return (cut[:space] if space > len(cut) // 2 else cut).rstrip()


def assemble(base: str, dialectic: str, config: MemoryConfig) -> str:
    """The injected context: the base layer, then the dialectic layer cut to dialecticMaxChars, the
    whole cut to contextTokens at a word boundary."""
    supplement = truncate_words(dialectic.strip(), config.dialectic_max_chars)
    parts = [p for p in (base.strip(), f"# What matters right now\n{supplement}" if supplement else "") if p]
    text = "\n\n".join(parts)
    if config.context_tokens is not None:
        text = truncate_words(text, config.context_tokens * CHARS_PER_TOKEN)
    return text


def storable(text: str) -> str:
    """`text` as the server can store it: NUL removed, a lone surrogate (text cut mid-emoji) made U+FFFD."""
    # a NUL is refused, and a lone surrogate cannot be encoded at all: either would cost the whole batch
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # through UTF-16, a surrogate pair joins back into its character and a lone half becomes U+FFFD
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def chunks(text: str, max_chars: int) -> list[str]:
    """`text` split into ordered pieces of at most `max_chars` that join back to it exactly; a piece
    ends after whitespace where there is any in its second half."""
    out: list[str] = []
    while len(text) > max_chars:
        cut = max(text.rfind(" ", max_chars // 2, max_chars), text.rfind("\n", max_chars // 2, max_chars))
        cut = cut + 1 if cut > 0 else max_chars
        out.append(text[:cut])
        text = text[cut:]
    return [*out, text] if text or not out else out


@dataclass(frozen=True)
class Due:
    """What one turn refreshes."""

    base: bool
    dialectic: bool


def due(config: MemoryConfig, turn: int, last_base: int | None, last_dialectic: int | None) -> Due:
    """Which layers turn `turn` refreshes; nothing in tools mode (no injection)."""
    if config.recall_mode == "tools":
        return Due(False, False)
    return Due(is_due(turn, last_base, config.context_cadence), is_due(turn, last_dialectic, config.dialectic_cadence))
