"""UploadFile: a file's text (files.py) as messages of one author, appended in order in one transaction."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass

import orjson

from services.api import files, slots
from services.api import validation as v
from services.api.deps import ApiDeps
from services.api.settings import ApiSettings
from services.api.slots import Slots, holding
from services.api.writes import NewMessage, append_checked
from services.errors import InvalidArgument

MAX_FILE_NAME_CHARS = 255
log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Reader:
    """A thread reading uploaded files one at a time, and what it reads (for the caller told it is full)."""

    reads: str
    thread: ThreadPoolExecutor


# reading a file of up to 32 MiB is CPU work: off the event loop, on threads of their own (the default executor
# embeds queries). Two, so a text file waits for others like it (seconds at worst), never behind a PDF (the
# time limit and more)
PDF_READER = Reader("PDF", ThreadPoolExecutor(max_workers=1, thread_name_prefix="pdf-reader"))
TEXT_READER = Reader("text and JSON", ThreadPoolExecutor(max_workers=1, thread_name_prefix="file-reader"))


def reader_of(data: bytes, file_name: str) -> Reader:
    """The reader a file waits for: the PDFs' own, else the one of text and JSON."""
    return PDF_READER if files.kind_of(file_name, data[:5]) is files.FileKind.PDF else TEXT_READER


class Uploads:
    """The uploads this process reads or holds to read, at most `per_workspace` of one workspace and at most
    `queued` for each reader. Each holds its file: unbounded, one caller queueing slow PDFs held 32 MiB for
    each, and every other workspace's upload waited behind them until it timed out."""

    def __init__(self, per_workspace: int, queued: int) -> None:
        self.of_workspace = slots.per_workspace(
            per_workspace,
            "uploads in progress",
            "PEERLOG_API_UPLOADS_PER_WORKSPACE",
            "retry once one has finished",
        )
        self.of_reader = Slots(
            queued,
            lambda reads, held: (
                f"this API process is already reading or holding {held} {reads} uploads to read "
                "(PEERLOG_API_UPLOADS_QUEUED): retry later"
            ),
        )

    def one(self, workspace_id: str, reader: Reader) -> AbstractContextManager[None]:
        return holding((self.of_workspace, workspace_id), (self.of_reader, reader.reads))


_DEFAULTS = ApiSettings.model_construct()  # the settings' defaults, not the environment's
# of the process, as its readers are: two servers in one process (tests) share the readers, so the bounds too
UPLOADS = Uploads(_DEFAULTS.uploads_per_workspace, _DEFAULTS.uploads_queued)


def bound(api: ApiSettings) -> None:
    """Bound this process's uploads as a server's settings say (at its start)."""
    UPLOADS.of_workspace.most, UPLOADS.of_reader.most = api.uploads_per_workspace, api.uploads_queued


_STARTUP_S = 5.0  # a fresh interpreter importing pypdf (0.2 s here), on a loaded machine


def _chunks(data: bytes, file_name: str) -> list[str]:
    apart = files.kind_of(file_name, data[:5]) in files.READ_APART
    chunks = files.split(text_apart(data, file_name) if apart else files.text_of(data, file_name))
    # AddMessages' checks of each message's content (append_checked runs none): a chunk Postgres cannot
    # store would be acknowledged, then quarantined by the projector, its message id never readable
    for i, chunk in enumerate(chunks):
        v.check_content(i, chunk)
    return chunks


def text_apart(data: bytes, file_name: str) -> str:
    """files.text_of in a process of its own, stopped at the time limit, its memory bounded. pypdf checks the
    limit only between a page's drawing operators: a 70 kB file whose pages name one font a dozen times, its
    character map millions of lines long, took 80 s before its first, and every upload of the process waited
    behind it (a thread cannot be stopped). Checking 31 MiB of JSON arrays took 780 MB."""
    limit_s = files.MAX_PDF_SECONDS
    command = [sys.executable, "-m", "services.api.files", file_name, str(limit_s)]
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=limit_s + _STARTUP_S, check=False)
    except subprocess.TimeoutExpired:  # killed by run()
        raise files.too_slow(file_name, limit_s) from None
    if done.returncode != 0 or not done.stdout:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        if said and said[-1].startswith("MemoryError"):
            raise InvalidArgument(f"{file_name!r} takes more memory to read than a file may; split it")
        # the reader itself failed (not the file's fault): INTERNAL, with its last words in the log
        log.error("the file reader for %r ended %d: %s", file_name, done.returncode, "\n".join(said[-20:]))
        raise RuntimeError(f"the file reader ended with status {done.returncode}")
    said = orjson.loads(done.stdout)
    if "refused" in said:
        raise InvalidArgument(said["refused"])
    return said["text"]


async def upload_file(ctx: ApiDeps, u: Upload, data: bytes) -> tuple[list[str], str]:
    """The messages' ids and the consistency token; InvalidArgument, with nothing written, for a file
    that cannot be used."""
    _check(u)
    files.check_size(len(data))
    reader = reader_of(data, u.file_name)
    with UPLOADS.one(u.workspace_id, reader):
        chunks = await asyncio.get_running_loop().run_in_executor(reader.thread, _chunks, data, u.file_name)
        return await append_checked(ctx, u.workspace_id, u.session_id, messages(u, chunks), u.idempotency_key)
