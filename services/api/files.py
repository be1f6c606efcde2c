"""UploadFile's pure part: a file's bytes to its text (text, Markdown, JSON or PDF), refused with a clear
reason when it is not usable, then split into message-sized chunks on paragraph and sentence boundaries."""

from __future__ import annotations

import io
import json
import re
import resource
import sys
import time
from collections.abc import Callable
from enum import StrEnum

from pypdf import PdfReader

from services.errors import InvalidArgument

MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_CHUNK_CHARS = 25_000  # a message's limit (AddMessages)
# for a PDF's text: a book of 500 pages of 2,500 characters took 2.3 s here
MAX_PDF_SECONDS = 30
_PARAGRAPHS = re.compile(r"\n[ \t]*\n+")
# after a sentence's closing mark (and any closing quote or bracket), before the next one's start
_SENTENCES = re.compile(r"(?<=[.!?…])[\"')\]]*\s+")


class FileKind(StrEnum):
    TEXT = "text"
    MARKDOWN = "markdown"
    JSON = "json"
    PDF = "pdf"


_BY_SUFFIX = {
    ".txt": FileKind.TEXT,
    ".text": FileKind.TEXT,
    ".md": FileKind.MARKDOWN,
    ".markdown": FileKind.MARKDOWN,
    ".json": FileKind.JSON,
    ".pdf": FileKind.PDF,
}


def kind_of(file_name: str, head: bytes) -> FileKind:
    """By the name's suffix; a name without a known one is a PDF if it starts like one, else text."""
    suffix = file_name[file_name.rfind(".") :].lower() if "." in file_name else ""
    if suffix in _BY_SUFFIX:
        return _BY_SUFFIX[suffix]
    return FileKind.PDF if head.startswith(b"%PDF-") else FileKind.TEXT


def check_size(size: int) -> None:
    if size > MAX_FILE_BYTES:
        raise InvalidArgument(f"the file is too big: over {MAX_FILE_BYTES // (1024 * 1024)} MiB")


def _utf16(data: bytes) -> bool:
    """Whether the bytes look like UTF-16 text: a byte order mark, or a NUL in every other byte of the
    start (the high byte of each Latin character)."""
    head = data[:512]
    return head[:2] in (b"\xff\xfe", b"\xfe\xff") or (
        len(head) >= 8 and (head[1::2].count(0) == len(head[1::2]) or head[0::2].count(0) == len(head[0::2]))
    )


def _decoded(data: bytes, file_name: str) -> str:
    if _utf16(data):
        raise InvalidArgument(f"{file_name!r} is UTF-16 text; send it encoded as UTF-8")
    # a NUL never occurs in text; a binary file (an image, an archive) almost always has one
    if b"\x00" in data:
        raise InvalidArgument(f"{file_name!r} is not text (it holds binary data); send text, Markdown, JSON or PDF")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{file_name!r} is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


def _storable(pdf_text: str) -> str:
    """A PDF's extracted text without what Postgres and JSON cannot hold. A NUL there comes from a font's
    encoding (a glyph mapped to code 0), not from the document's words: dropped, so one stray glyph does not
    refuse a whole file (in a text file's bytes a NUL means binary data, and is refused). A surrogate a
    ToUnicode map names alone has no UTF-8 form: U+FFFD, as a decoder shows a character it cannot read."""
    return pdf_text.replace("\x00", "").encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def pdf_text(data: bytes, file_name: str, limit_s: float | None = None) -> str:
    """The PDF's text; InvalidArgument for one encrypted, damaged, too long to read (`limit_s`, default
    MAX_PDF_SECONDS) or holding too much."""
    limit_s = MAX_PDF_SECONDS if limit_s is None else limit_s
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise InvalidArgument(f"{file_name!r} is an encrypted PDF; send it without a password")
        return _storable("\n\n".join(_pages_text(reader, file_name, limit_s)))
    except InvalidArgument:
        raise
    except Exception as exc:  # noqa: BLE001 - pypdf fails on a damaged file with any kind of error (its
        # own, ValueError, KeyError, but also AssertionError, AttributeError, RecursionError, zlib.error)
        raise InvalidArgument(f"{file_name!r} is not a readable PDF: {type(exc).__name__}: {exc}"[:500]) from None


PDF_MEMORY_BYTES = 4 << 30  # what a PDF's reader may map: a decompression bomb ends it, not the API


def too_slow(file_name: str, limit_s: float) -> InvalidArgument:
    return InvalidArgument(f"{file_name!r} took more than {limit_s:g} s to read; split it into smaller files")


def _pages_text(reader: PdfReader, file_name: str, limit_s: float) -> list[str]:
    """Each page's text, refused past MAX_FILE_BYTES characters in all: compressed streams let a 32 MiB
    PDF hold far more text than a 32 MiB text file, all of it to be held, split and appended at once. Refused
    too past MAX_PDF_SECONDS of reading: every page may draw one shared stream of 400,000 operators (5 kB
    of file, 6 s of CPU a page), and pypdf reads them in Python."""
    texts, total = [], 0
    deadline = time.monotonic() + limit_s

    def in_time(*_: object) -> None:  # before each operator of a page's content
        if time.monotonic() > deadline:
            raise too_slow(file_name, limit_s)

    for page in reader.pages:
        in_time()  # a page without content has no operator; what pypdf reads before the first is uncounted:
        # only a process of its own, stopped at the limit, bounds that (uploads.py)
        texts.append((page.extract_text(visitor_operand_before=in_time) or "").strip())
        total += len(texts[-1])
        if total > MAX_FILE_BYTES:
            raise InvalidArgument(
                f"{file_name!r} holds more than {MAX_FILE_BYTES:,} characters of text; split it into smaller files"
            )
    return texts


def text_of(data: bytes, file_name: str, read_pdf: Callable[[bytes, str], str] = pdf_text) -> str:
    """The file's text; InvalidArgument when it is not text, not valid JSON, an encrypted or broken PDF,
    or holds no text."""
    kind = kind_of(file_name, data[:5])
    text = read_pdf(data, file_name) if kind is FileKind.PDF else _decoded(data, file_name)
    if kind is FileKind.JSON:
        try:
            # checked, not kept: numbers stay text (an integer past 4,300 digits is valid JSON, and refused
            # by int()) and objects are built as nothing (31 MiB of [{},{},…] took 880 MB to build)
            json.loads(text, parse_int=len, parse_float=len, object_pairs_hook=_nothing)
        except ValueError as exc:
            raise InvalidArgument(f"{file_name!r} is not valid JSON: {exc}") from None
        except RecursionError:
            raise InvalidArgument(f"{file_name!r} is JSON nested too deeply to read") from None
    if not text.strip():
        raise InvalidArgument(f"{file_name!r} is empty: it holds no text")
    return text


def _nothing(_pairs: object) -> None:
    return None


def _pieces(text: str, limit: int) -> list[str]:
    """A paragraph too long for one chunk: its sentences, and a sentence still too long cut at the last
    space before the limit (or at the limit, for text without spaces)."""
    out = []
    for sentence in _SENTENCES.split(text):
        sentence, start = sentence.strip(), 0  # cut by position: slicing off the rest each time was quadratic
        while len(sentence) - start > limit:
            cut = sentence.rfind(" ", start, start + limit + 1)
            cut = cut if cut > start else start + limit
            out.append(sentence[start:cut].strip())
            start = cut
            while start < len(sentence) and sentence[start].isspace():
                start += 1
        if sentence[start:]:
            out.append(sentence[start:])
    return out


def _packed(pieces: list[str], joiner: str, limit: int) -> list[str]:
    """Consecutive pieces joined into chunks of at most `limit` characters, greedily, in order. A chunk is
    joined once it is complete: joining it again at every piece made a 32 MiB file of short lines cost
    seconds of CPU."""
    chunks, current, length = [], [], 0
    for piece in pieces:
        grown = length + len(joiner) + len(piece) if current else len(piece)
        if current and grown > limit:
            chunks.append(joiner.join(current))
            current, grown = [], len(piece)
        current.append(piece)
        length = grown
    return [*chunks, joiner.join(current)] if current else chunks


def split(text: str, limit: int = MAX_CHUNK_CHARS) -> list[str]:
    """The text as chunks of at most `limit` characters, in order: whole paragraphs where they fit,
    else whole sentences."""
    pieces = []
    for paragraph in _PARAGRAPHS.split(text.replace("\r\n", "\n")):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= limit:
            pieces.append(paragraph)
        else:  # its sentences are packed on their own, so a chunk never mixes two paragraphs' halves
            pieces += _packed(_pieces(paragraph, limit), " ", limit)
    return _packed(pieces, "\n\n", limit)


READ_APART = (FileKind.PDF, FileKind.JSON)  # what a process of its own reads: a file that costs time or memory


def _read_apart() -> None:
    """`python -m services.api.files NAME LIMIT_S`: a file on stdin, its text (or the refusal) as JSON on
    stdout. The process uploads.text_apart runs, and stops at the time limit, within PDF_MEMORY_BYTES."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    # the soft limit only, and never above an inherited hard one: raising that is refused (systemd LimitAS=)
    soft = PDF_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(PDF_MEMORY_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    file_name, limit_s = sys.argv[1], float(sys.argv[2])
    try:
        said = {"text": text_of(sys.stdin.buffer.read(), file_name, lambda d, n: pdf_text(d, n, limit_s))}
    except InvalidArgument as refused:
        said = {"refused": str(refused)}
    sys.stdout.buffer.write(json.dumps(said).encode())


if __name__ == "__main__":
    _read_apart()
