"""Write the sync client from the asyncio one: `python unasync.py _async.py _sync.py`.

The client's I/O layer (transport, retries, handles) is written once, as asyncio code; the sync twin is
the same text with the asyncio words replaced, so the two can never drift (`make client-check`).
The rules are word-level and few on purpose: code in _async.py that they cannot turn into correct sync
code does not belong there (put it in the shared core instead).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RULES: list[tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\basync for\b", "for"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsync(?=[A-Z])", ""),  # AsyncPeerlog -> Peerlog, AsyncSession -> Session, ...
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"^import asyncio$", "import time"),
    (r"\bgrpc\.aio\.", "grpc."),
    (r"\basyncio\b", "sync"),  # prose: "the asyncio client" -> "the sync client"
]
HEADER = "# Generated from _async.py by clients/python/tools/unasync.py (make client-gen). Do not edit.\n"


def unasync(text: str) -> str:
    for pattern, replacement in RULES:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    return HEADER + text


def main(source: str, target: str) -> None:
    Path(target).write_text(unasync(Path(source).read_text()))


if __name__ == "__main__":
    main(*sys.argv[1:])
