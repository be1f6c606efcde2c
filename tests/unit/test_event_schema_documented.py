"""The README's event schema table (for outside consumers of Subscribe) names every event type on every
log topic at its current schema version, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from services.bus.topics import ALL_TOPICS

README = Path(__file__).resolve().parents[2] / "README.md"


def documented() -> dict[str, tuple[str, set[str]]]:
    text = README.read_text().split("**The event schema.**", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in text.splitlines()[2:]:
        topic, _, events = (cell.strip() for cell in line.strip("|").split("|"))
        rows[topic.strip("`")] = set(re.findall(r"`(\w+)` (v\d+)", events))
    return rows


def test_the_readme_documents_every_event_type_at_its_current_schema_version():
    code = {t.name: {(e.__name__, f"v{e.schema_version_current}") for e in t.events} for t in ALL_TOPICS}
    assert documented() == code
