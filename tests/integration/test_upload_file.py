"""UploadFile over real Kafka and Postgres: a streamed file becomes ordered messages with their place in
the file; a file that cannot be used is refused with its reason and writes nothing."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from google.protobuf import json_format

from peerlog.v1 import messages_pb2, messages_pb2_grpc
from services.api import uploads
from services.cli.client import Client
from services.errors import ResourceExhausted
from tests.support.rpc import rejected
from tests.unit.test_upload_file_text import pdf

PIECE = 1024 * 1024


def upload(
    channel,
    data: bytes,
    file_name: str,
    peer_id: str = "alice",
    key: str = "",
    piece: int = PIECE,
    workspace_id: str = "w",
):
    """The file in pieces of `piece` bytes; the first request names it and where it goes."""

    def requests():
        head = messages_pb2.UploadFileRequest(
            workspace_id=workspace_id, session_id="s", peer_id=peer_id, file_name=file_name, idempotency_key=key
        )
        for start in range(0, max(len(data), 1), piece):
            head.data = data[start : start + piece]
            yield head
            head = messages_pb2.UploadFileRequest()

    return messages_pb2_grpc.MessageServiceStub(channel).UploadFile(requests())


@pytest.fixture
async def session(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s", peers=("alice", "bob"))
    await c.peer("w", "carol")
    return c


async def test_a_markdown_file_becomes_messages_in_order_each_with_its_place_in_the_file(channel, session):
    paragraphs = [f"## Part {i}\n\n" + f"Line {i} of the notes. " * 600 for i in range(6)]  # ~14,000 chars each
    text = "\n\n".join(paragraphs)
    out = await upload(channel, text.encode(), "notes.md", piece=10_000)
    got = await session.all_messages("w", "s", out.consistency_token)
    assert [m.message_id for m in got] == list(out.message_ids)
    assert [json_format.MessageToDict(m.metadata) for m in got] == [
        {"file_name": "notes.md", "chunk": i, "of": len(got)} for i in range(1, len(got) + 1)
    ]
    assert len(got) == 6 and all(len(m.content) <= 25_000 and m.peer_id == "alice" for m in got)
    assert "\n\n".join(m.content for m in got).split() == text.split()


async def test_a_pdf_json_and_text_file_are_read_and_an_idempotent_repeat_writes_nothing(channel, session):
    from_pdf = await upload(channel, pdf(["Bob keeps bees.", "He lives in Oslo."]), "bob.pdf")
    from_json = await upload(channel, b'{"hives": 2}', "hives.json", key="hives-1")
    again = await upload(channel, b'{"hives": 2}', "hives.json", key="hives-1")
    assert again.message_ids == from_json.message_ids
    got = await session.all_messages("w", "s", again.consistency_token)
    assert [m.content for m in got] == ["Bob keeps bees.\n\nHe lives in Oslo.", '{"hives": 2}']
    assert list(from_pdf.message_ids) == [got[0].message_id]


async def test_a_pdf_with_a_nul_or_a_lone_surrogate_in_its_text_becomes_readable_messages(channel, session):
    # before: acknowledged, then quarantined by the projector (NUL) or INTERNAL (a surrogate has no UTF-8 form)
    data = pdf(["Bob keeps\\000 bees in A."], to_unicode={"A": "D800"})
    out = await upload(channel, data, "odd.pdf")
    got = await session.all_messages("w", "s", out.consistency_token)
    assert [(m.message_id, m.content) for m in got] == [(out.message_ids[0], "Bob keeps bees in \ufffd.")]


@pytest.mark.parametrize(
    "data,name,code,reason",
    [
        (pdf(["secret"], password="pw"), "locked.pdf", grpc.StatusCode.INVALID_ARGUMENT, "is an encrypted PDF"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "photo.png", grpc.StatusCode.INVALID_ARGUMENT, "is not text"),
        (b"", "empty.txt", grpc.StatusCode.INVALID_ARGUMENT, "is empty"),
        (b'{"hives": ', "bad.json", grpc.StatusCode.INVALID_ARGUMENT, "is not valid JSON"),
        (b"a" * (32 * 1024 * 1024 + 1), "huge.txt", grpc.StatusCode.INVALID_ARGUMENT, "too big: over 32 MiB"),
    ],
)
async def test_a_refused_file_says_why_and_writes_nothing(channel, session, data, name, code, reason):
    await rejected(upload(channel, data, name), code, reason)
    kept = await upload(channel, b"still here", "after.txt")  # the next upload is the session's first message
    got = await session.all_messages("w", "s", kept.consistency_token)
    assert [m.content for m in got] == ["still here"]


async def test_an_author_who_is_not_a_member_is_refused_as_add_messages_refuses_it(channel, session):
    await rejected(
        upload(channel, b"hello", "a.txt", peer_id="carol"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "not members of session 's'",
    )


@pytest.mark.parametrize(
    "later",
    [
        {"session_id": "other"},
        {"workspace_id": "w2"},
        {"peer_id": "bob"},
        {"file_name": "b.txt"},
        {"idempotency_key": "k"},
    ],
)
async def test_a_later_request_naming_another_file_or_place_is_refused_and_writes_nothing(channel, session, later):
    def requests():
        yield messages_pb2.UploadFileRequest(
            workspace_id="w", session_id="s", peer_id="alice", file_name="a.txt", data=b"one "
        )
        yield messages_pb2.UploadFileRequest(data=b"two ", workspace_id="w", session_id="s")  # the same: fine
        yield messages_pb2.UploadFileRequest(data=b"three", **later)

    field = next(iter(later))
    await rejected(
        messages_pb2_grpc.MessageServiceStub(channel).UploadFile(requests()),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"UploadFile's requests disagree on {field}",
    )
    kept = await upload(channel, b"still here", "after.txt")
    got = await session.all_messages("w", "s", kept.consistency_token)
    assert [m.content for m in got] == ["still here"]


async def test_a_request_of_the_stream_that_does_not_decode_ends_the_upload_and_writes_nothing(channel, session):
    first = messages_pb2.UploadFileRequest(
        workspace_id="w", session_id="s", peer_id="alice", file_name="a.txt", data=b"hello"
    ).SerializeToString()
    broken = b"\x22\x02\xff\xfe"  # file_name (a string) holding bytes that are not UTF-8
    call = channel.stream_unary(
        "/peerlog.v1.MessageService/UploadFile",
        request_serializer=lambda raw: raw,
        response_deserializer=messages_pb2.UploadFileResponse.FromString,
    )
    await rejected(call(iter([first, broken])), grpc.StatusCode.INVALID_ARGUMENT, "is not a valid message")
    await rejected(call(iter([broken])), grpc.StatusCode.INVALID_ARGUMENT, "is not a valid message")
    assert await session.all_messages("w", "s") == []


async def test_a_workspace_past_its_uploads_in_progress_is_resource_exhausted_and_another_workspace_still_uploads(
    channel, session, monkeypatch
):
    # before: one reader for every file of the process, its queue unbounded: a workspace's slow PDFs each held
    # 32 MiB, and another workspace's small text file waited behind them all until it timed out
    await session.setup_conversation("elsewhere", "s", peers=("alice",))
    texts = {"slow.pdf": "Bob keeps bees.", "slow.json": '{"hives": 2}'}
    reading, release = ({name: threading.Event() for name in texts} for _ in range(2))

    def held(data: bytes, file_name: str) -> str:  # a file the reader is held on until the test lets it go
        reading[file_name].set()
        release[file_name].wait(30)
        return texts[file_name]

    monkeypatch.setattr(uploads, "text_apart", held)
    uploading = [asyncio.ensure_future(upload(channel, pdf(["x"]), "slow.pdf"))]
    uploading.append(asyncio.ensure_future(upload(channel, texts["slow.json"].encode(), "slow.json")))
    try:
        for name in texts:  # each is being read
            assert await asyncio.to_thread(reading[name].wait, 20), f"{name} waits for the reader"
        await rejected(
            upload(channel, b"one more", "more.txt"),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "workspace 'w' already has 2 uploads in progress",
            "retry once one has finished",
        )
        release["slow.json"].set()
        async with asyncio.timeout(20):  # the PDF still holds its reader
            elsewhere = await upload(channel, b"notes", "notes.txt", workspace_id="elsewhere")
    finally:
        for event in release.values():
            event.set()
    for done in await asyncio.gather(*uploading):  # the last read is after both uploads are readable
        got = await session.all_messages("w", "s", done.consistency_token)
    assert sorted(m.content for m in got) == sorted(texts.values())
    got = await session.all_messages("elsewhere", "s", elsewhere.consistency_token)
    assert [m.content for m in got] == ["notes"]


def test_uploads_past_the_queue_of_a_reader_are_resource_exhausted_and_the_other_reader_still_takes_files():
    # before: the one reader's queue held every upload sent, each with its file
    bounds = uploads.Uploads(per_workspace=2, queued=2)
    with bounds.one("a", uploads.PDF_READER), bounds.one("b", uploads.PDF_READER):
        with pytest.raises(ResourceExhausted, match="already reading or holding 2 PDF uploads to read"):
            with bounds.one("c", uploads.PDF_READER):
                pass
        with bounds.one("c", uploads.TEXT_READER):  # a text file does not wait behind PDFs
            pass
    with bounds.one("c", uploads.PDF_READER):  # their places are free once they end
        pass
