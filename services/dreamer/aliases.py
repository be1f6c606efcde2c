"""Short names (o1, o2, …) for the observations a dream specialist is shown, and tool specs that accept
only those names.

Small models copy 36-character ids badly, and every mangled id is a refused write. With each id argument
limited to the names shown so far, a grammar-constrained decoder cannot write one it was never shown.
Which observations may really be cited is still the provenance rule's decision (edits.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.dreamer.edits import bare_id

# the tool arguments that name observations: the actions' premises and targets, and the discovery tools'
ID_FIELDS = ("premise_ids", "outdated_id", "observation_id")


@dataclass
class Aliases:
    """The short names handed out in one dream, in order (o1 is the first observation shown)."""

    full_ids: dict[str, str] = field(default_factory=dict)  # short name → observation id

    def alias(self, observation_id: str) -> str:
        """The observation's short name, handing out the next one on first sight."""
        for short, full in self.full_ids.items():
            if full == observation_id:
                return short
        short = f"o{len(self.full_ids) + 1}"
        self.full_ids[short] = observation_id
        return short

    def in_text(self, text: str, observation_ids: Iterable[str] = ()) -> str:
        """`text` with observation ids shown as short names: those of `observation_ids` (named now if new)
        and any named before, as in a refusal that quotes a premise."""
        for observation_id in observation_ids:
            self.alias(observation_id)
        for short, full in self.full_ids.items():
            text = text.replace(full, short)
        return text

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
