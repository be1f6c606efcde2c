"""UploadFile: a file's text (files.py) as messages of one author, appended in order in one transaction."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from services.api import files
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.writes import NewMessage, append_checked

MAX_FILE_NAME_CHARS = 255


@dataclass(frozen=True)
class Upload:
    workspace_id: str
    session_id: str
    peer_id: str
    file_name: str
    idempotency_key: str = ""


def _check(u: Upload) -> None:
    v.check_id("workspace_id", u.workspace_id)
    v.check_id("session_id", u.session_id)
    v.check_id("peer_id", u.peer_id)
    v.check_text("file_name", u.file_name, MAX_FILE_NAME_CHARS)


def messages(u: Upload, chunks: list[str]) -> list[NewMessage]:
    """One message per chunk, in order, each saying which part of which file it is."""
    return [
        NewMessage(peer_id=u.peer_id, content=chunk, metadata={"file_name": u.file_name, "chunk": i, "of": len(chunks)})
        for i, chunk in enumerate(chunks, 1)
    ]


_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="file-reader")


def _chunks(data: bytes, file_name: str) -> list[str]:
    chunks = files.split(files.text_of(data, file_name))
    # AddMessages' checks of each message's content (append_checked runs none): a chunk Postgres cannot
    # store would be acknowledged, then quarantined by the projector, its message id never readable
    for i, chunk in enumerate(chunks):
        v.check_content(i, chunk)
    return chunks


async def upload_file(ctx: ApiDeps, u: Upload, data: bytes) -> tuple[list[str], str]:
    """The messages' ids and the consistency token; InvalidArgument, with nothing written, for a file
    that cannot be used."""
    _check(u)
    files.check_size(len(data))
    # reading a PDF of up to 32 MiB is CPU work: off the event loop, one file at a time on a thread of its
    # own (the default executor embeds queries), so uploads wait for each other, not searches for uploads
    chunks = await asyncio.get_running_loop().run_in_executor(_READER, _chunks, data, u.file_name)
    return await append_checked(ctx, u.workspace_id, u.session_id, messages(u, chunks), u.idempotency_key)
