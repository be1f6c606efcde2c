"""Short names (#1, #2, …) for the observations a dream specialist is shown, and tool specs that accept
only those names.

Small models copy 36-character ids badly, and every mangled id is a refused write. With each id argument
limited to the names shown so far, a grammar-constrained decoder cannot write one it was never shown.
A name holds "#", which no id can (ids match ^[A-Za-z0-9_-]{1,512}$), so a client's own id such as "o2" or
"0" is never mistaken for a name. Which observations may really be cited is still the provenance rule's
decision (edits.py).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.dreamer.edits import bare_id

# the tool arguments that name observations: the actions' premises and targets, and the discovery tools'
ID_FIELDS = ("premise_ids", "outdated_id", "observation_id")
# a whole observation marker, and a whole id-like token (a run no id character borders)
MARKER = re.compile(r"\[obs:([A-Za-z0-9_-]+)\]")
TOKEN = re.compile(r"[A-Za-z0-9_-]+")


@dataclass
class Aliases:
    """The short names handed out in one dream, in order (#1 is the first observation shown)."""

    full_ids: dict[str, str] = field(default_factory=dict)  # short name → observation id
    short_names: dict[str, str] = field(default_factory=dict)  # observation id → short name

    def alias(self, observation_id: str) -> str:
        """The observation's short name, handing out the next one on first sight."""
        short = self.short_names.get(observation_id)
        if short is None:
            short = f"#{len(self.full_ids) + 1}"
            self.full_ids[short] = observation_id
            self.short_names[observation_id] = short
        return short

    def in_text(self, text: str, observation_ids: Iterable[str] = ()) -> str:
        """A tool result's `text` with its [obs:ID] markers showing short names: those of `observation_ids`
        (named now if new) and any named before. Only whole markers change: the observations' and messages'
        own text may hold an id's characters."""
        for observation_id in observation_ids:
            self.alias(observation_id)
        return MARKER.sub(lambda m: f"[obs:{self.short_names.get(m[1], m[1])}]", text)

    def in_reply(self, text: str) -> str:
        """A refusal's `text` (which quotes ids bare, never an observation's text) with every whole id named
        before shown as its short name."""
        return TOKEN.sub(lambda m: self.short_names.get(m[0], m[0]), text)

    def unaliased(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Tool arguments with short names replaced by the ids they stand for (full ids pass unchanged)."""
        out = dict(arguments)
        for key in ID_FIELDS:
            value = out.get(key)
            if isinstance(value, str):
                out[key] = self._full(value)
            elif isinstance(value, list):
                out[key] = [self._full(v) if isinstance(v, str) else v for v in value]
        return out

    def narrowed(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a function-tool spec whose id arguments accept only the short names handed out so far."""
        spec = copy.deepcopy(dict(spec))
        if not self.full_ids:  # an empty enum matches nothing; leave the field as declared
            return spec
        properties = spec["function"]["parameters"].get("properties", {})
        for key in ID_FIELDS:
            if key in properties:
                properties[key] = _choosing(properties[key], list(self.full_ids))
        return spec

    def _full(self, name: str) -> str:
        name = bare_id(name)
        return self.full_ids.get(name, name)


def _choosing(schema: dict[str, Any], names: list[str]) -> dict[str, Any]:
    if schema.get("type") == "array":
        return {**schema, "items": {"type": "string", "enum": names}}
    kept = {k: v for k, v in schema.items() if k in ("title", "description")}
    return {**kept, "type": "string", "enum": names}
