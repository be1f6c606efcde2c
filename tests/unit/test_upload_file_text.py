"""UploadFile's pure part: which files are refused and why, the text of each kind, and how it is split."""

from __future__ import annotations

import base64
import io
import json
import time
import zlib

import pytest
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from services.api import files
from services.api.files import MAX_FILE_BYTES, check_size, split, text_of
from services.errors import InvalidArgument


def pdf(pages: list[str], password: str | None = None, to_unicode: dict[str, str] | None = None) -> bytes:
    """A PDF with one page per text (each line drawn in Helvetica), encrypted with AES when given a password;
    `to_unicode` (a character drawn -> UTF-16BE hex of the text it stands for) gives the font a ToUnicode map."""
    writer = PdfWriter()
    font_dict = DictionaryObject(
        {  # pypdf has no public call for a bare font object
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    if to_unicode:
        font_dict[NameObject("/ToUnicode")] = writer._add_object(_cmap(to_unicode))
    font = writer._add_object(font_dict)
    for text in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        stream = DecodedStreamObject()
        lines = "".join(f"({line}) Tj 0 -14 Td " for line in text.split("\n"))
        stream.set_data(f"BT /F1 12 Tf 72 720 Td {lines}ET".encode())
        page[NameObject("/Contents")] = writer._add_object(stream)
    if password:
        writer.encrypt(password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _cmap(to_unicode: dict[str, str]) -> DecodedStreamObject:
    pairs = " ".join(f"<{ord(drawn):02X}> <{hex_text}>" for drawn, hex_text in to_unicode.items())
    stream = DecodedStreamObject()
    stream.set_data(
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /T def "
        f"1 begincodespacerange <00> <FF> endcodespacerange {len(to_unicode)} beginbfchar {pairs} endbfchar "
        "endcmap CMapName currentdict /CMap defineresource pop end end".encode()
    )
    return stream


def test_text_markdown_json_and_pdf_give_their_text():
    assert text_of("# Notes\n\nBob keeps bees.".encode(), "notes.md") == "# Notes\n\nBob keeps bees."
    assert text_of(b"\xef\xbb\xbfplain", "a.txt") == "plain"  # a byte-order mark is not text
    assert json.loads(text_of(b'{"bees": 2}', "hives.json")) == {"bees": 2}
    text = text_of(pdf(["Bob keeps bees.", "He lives in Oslo."]), "bob.pdf")
    assert "Bob keeps bees." in text and "He lives in Oslo." in text
    assert "Bob" in text_of(pdf(["Bob"]), "no-suffix")  # told by its first bytes


@pytest.mark.parametrize(
    "data,name,reason",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "photo.png", "is not text"),
        (b"caf\xe9", "latin1.txt", "is not UTF-8 text"),
        (b'{"bees": ', "broken.json", "is not valid JSON"),
        (pdf(["secret"], password="pw"), "locked.pdf", "is an encrypted PDF"),
        (b"%PDF-1.7 nothing else", "broken.pdf", "is not a readable PDF"),
        (b"  \n\n \t", "blank.txt", "is empty"),
        (pdf([""]), "blank.pdf", "is empty"),
    ],
)
def test_an_unusable_file_is_refused_with_its_reason(data, name, reason):
    with pytest.raises(InvalidArgument, match=reason):
        text_of(data, name)


def test_a_nul_in_a_pdf_s_text_is_dropped_rather_than_refusing_the_file():
    assert text_of(pdf(["Hello\\000World"]), "nul.pdf") == "HelloWorld"  # \\000: a NUL in a PDF string


def test_a_lone_surrogate_in_a_pdf_s_text_becomes_a_replacement_character_and_a_pair_its_character():
    # A stands for half a surrogate pair alone; B and C for the two halves of one (U+1F600)
    data = pdf(["xAyBCz"], to_unicode={"A": "D800", "B": "D83D", "C": "DE00"})
    assert text_of(data, "odd-font.pdf") == "x\ufffdy\U0001f600z"


def test_a_pdf_whose_text_is_only_nul_is_empty():
    with pytest.raises(InvalidArgument, match="is empty"):
        text_of(pdf(["\\000\\000"]), "nuls.pdf")


def test_a_file_over_32_mib_is_too_big():
    check_size(MAX_FILE_BYTES)
    with pytest.raises(InvalidArgument, match="too big: over 32 MiB"):
        check_size(MAX_FILE_BYTES + 1)


def test_paragraphs_are_packed_whole_into_chunks_up_to_the_limit():
    text = "one one.\n\ntwo two.\r\n\r\nthree three."
    assert split(text, limit=20) == ["one one.\n\ntwo two.", "three three."]
    assert split(text) == ["one one.\n\ntwo two.\n\nthree three."]


def test_a_paragraph_over_the_limit_is_split_between_sentences_and_a_sentence_over_it_between_words():
    long = "First sentence here. Second one is here! Third? " + "word " * 12
    chunks = split(long, limit=45)
    assert chunks[:2] == ["First sentence here. Second one is here!", "Third?"]
    assert all(len(c) <= 45 for c in chunks) and " ".join(chunks).split() == long.split()
    assert split("x" * 50, limit=20) == ["x" * 20, "x" * 20, "x" * 10]


def test_chunks_never_exceed_25000_characters_and_keep_every_word_in_order():
    text = "\n\n".join(f"Paragraph {i}. " + "A sentence of some length. " * 400 for i in range(20))
    chunks = split(text)
    assert all(len(c) <= 25_000 for c in chunks) and len(chunks) > 1
    assert " ".join(chunks).split() == text.split()


def test_a_pdf_whose_text_runs_past_the_file_limit_is_refused_however_small_the_file(monkeypatch):
    # compressed streams let a PDF of a few MiB hold gigabytes of text; the bound is the text file's
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 60)
    assert files.text_of(pdf(["x" * 50]), "a.pdf") == "x" * 50
    with pytest.raises(InvalidArgument, match="more than 60 characters of text"):
        files.text_of(pdf(["x" * 50, "y" * 50]), "b.pdf")


def test_a_pdf_that_takes_too_long_to_read_is_refused_however_small_the_file(monkeypatch):
    # 40 pages drawing 20,000 operators each, a few kB compressed; an attacker's 5 kB file with 400,000 took
    # 23 s for 4 pages, holding a thread and the interpreter's lock
    monkeypatch.setattr(files, "MAX_PDF_SECONDS", 0.3)
    started = time.monotonic()
    with pytest.raises(InvalidArgument, match="took more than 0.3 s to read; split it into smaller files"):
        files.text_of(pdf(["a\n" * 20_000] * 40), "slow.pdf")
    assert time.monotonic() - started < 3


# two PDFs a mutation of a valid one damaged so that pypdf fails with AssertionError and AttributeError,
# errors outside its own: zlib-compressed, base64
DAMAGED_PDFS = {
    "AssertionError": (
        "eNrFUktu2zAQ3c8pZmMgWcQUJetjIPDCaYwUbVFD1q7ogrFGtgJFNEi6TXqu3qOL3qC5SEjGToQwKLqrSBHim5n35g00Wr5bnPFx"
        "AqM/D79+A8cI5fUNnJ8DWypZ79ek8GR3v6ubU5jNgPraheNBWnW/I2RLsSEN7ELue4MxsA9trfELpjaxxNyfXwcESUBwIYzo5Aae"
        "mNAplD9fCiZBwUL2Bthqf2381YEc2FxochFkV9R9I9OuxUA2fbNvYCVpuVdrq+sivt5/cHS6pWOwm32iuhVzeWeNRePIvxmPMZ/G"
        "1pylUuTM+wo7id7Yq8bsyHDoIRv08JH6jdliVri4NorELcwrdMKWt2owt+xxhFWNJ9ZPJ/G7VF09xmrbarRboCFtxqdY3VjaMz5x"
        "qZeV0zrQHVTz/+C8eOW8CJ2n+T84X9Fa9jXubMO4JUVHu26Vf/F8p6iBCKcQPT+YpWmSYoPPGLf/hI/0L1g6CTDOpyGWFQEWJyGW"
        "5FGATYowL4sHeUaJtiPlh7Vqf5C1wUo5m0mDydOc3/eNRH6csTZCGe84j3MYjS4/L+ARjcwAUw=="
    ),
    "AttributeError": (
        "eNrFkEtu20AMhve8RLkxkCzi0UjWw0CQhdMYKdKghq1d0cXEomwFisaYGTdJr5GDZZEbtBcpR35AiIqiuwojQfOT/MmPg9nH6Zkc"
        "RjD4+ev1DSQGqO/u4fwcxMzoYrskgyeb501RnsLFBVBT+HDYScufN4RiplZkQVzqbeMwBHFTFRa/YsyJc0zb77eOQdQzuFRO1XoF"
        "Oyf0HeadglGvYKobB2KxvXPt1YsSxERZ8hEU11R/J1ctVccl/uPcIOZk9dYsua+PtPXtj8TRYQ4+4paKSk30E4MFw6B9ExliOg4Z"
        "jq0Mefi2gjfROL5aTN6RJJ0ZPlOzcmtMMh+3zpB6gEmOvjH75iWm7B4GmBd4wjy1xkdt6mKI+bqyyEehI+uGp5jfs+2ZHPnUq9z3"
        "2tvtu6b/gTx7R571yeN0T/7hL+QLWuqmwA0PjGsy9A+4T4ZKCHAMwfHBJI6jGEs8ajJ+2UUatjqqMYPv1YMm5bivJVlPC6O+FqVB"
        "Txtl/bwk7OQ5o6qaDAi/qkX1g5hEzLV2GO12/KkpNcrDfq1TxrXIaZjCYHD1ZQq/AYqO/uY="
    ),
}


@pytest.mark.parametrize("error", sorted(DAMAGED_PDFS))
def test_a_pdf_pypdf_fails_on_with_any_error_is_refused_as_unreadable(error):
    data = zlib.decompress(base64.b64decode(DAMAGED_PDFS[error]))
    with pytest.raises(InvalidArgument, match=f"is not a readable PDF: {error}"):
        text_of(data, "damaged.pdf")


def test_json_nested_too_deeply_is_refused_as_such():
    with pytest.raises(InvalidArgument, match="nested too deeply"):
        text_of(b"[" * 100_000 + b"]" * 100_000, "deep.json")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_text_is_refused_with_a_reason_a_person_can_act_on(encoding):
    with pytest.raises(InvalidArgument, match="is UTF-16 text; send it encoded as UTF-8"):
        text_of("Bob keeps bees in Oslo.".encode(encoding), "notes.txt")


def test_splitting_32_mib_of_short_lines_or_of_one_endless_sentence_loses_no_word():
    for text in ("short line.\n\n" * 2_000_000, "word " * 6_000_000, "x" * 30_000_000):
        chunks = split(text)
        assert max(map(len, chunks)) <= 25_000 and "".join(chunks).replace("\n", "").replace(" ", "") == text.replace(
            "\n", ""
        ).replace(" ", "")


def _pdf_bytes(objects: dict[int, bytes]) -> bytes:
    """A PDF of these numbered objects (1 is the catalog), with its cross-reference table."""
    out, offsets = bytearray(b"%PDF-1.7\n"), {}
    for n in sorted(objects):
        offsets[n] = len(out)
        out += b"%d 0 obj\n" % n + objects[n] + b"\nendobj\n"
    xref, size = len(out), max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in range(1, size))
    return bytes(out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref))


def slow_fonts_pdf(names: int = 12, map_lines: int = 6_000_000) -> bytes:
    """One page naming one font `names` times, the font's character map millions of (comment) lines long:
    pypdf parses the map once per name before the page's first operator, where no time limit is checked."""
    cmap = zlib.compress(b"beginbfrange <00> <FF> <0041> endbfrange\n" + b"%\n" * map_lines, 9)
    fonts = b" ".join(b"/F%d 3 0 R" % i for i in range(names))
    return _pdf_bytes(
        {
            1: b"<< /Type /Catalog /Pages 2 0 R >>",
            2: b"<< /Type /Pages /Count 1 /Kids [5 0 R] >>",
            3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 4 0 R >>",
            4: b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(cmap) + cmap + b"\nendstream",
            5: b"<< /Type /Page /Parent 2 0 R /Resources << /Font << " + fonts + b" >> >> >>",
        }
    )


def test_a_pdf_slow_before_its_first_operator_is_refused_at_the_time_limit(monkeypatch):
    # a 70 kB file like this one held the reading thread, and every upload of the process behind it, 80 s
    from services.api import uploads

    monkeypatch.setattr(files, "MAX_PDF_SECONDS", 1)
    monkeypatch.setattr(uploads, "_STARTUP_S", 2.0)
    started = time.monotonic()
    with pytest.raises(InvalidArgument, match="took more than 1 s to read; split it into smaller files"):
        uploads.text_apart(slow_fonts_pdf(), "fonts.pdf")
    assert time.monotonic() - started < 6


def test_a_pdf_read_in_its_own_process_gives_the_same_text_and_refusals():
    from services.api import uploads

    assert uploads.text_apart(pdf(["Hello there"]), "a.pdf") == files.pdf_text(pdf(["Hello there"]), "a.pdf")
    with pytest.raises(InvalidArgument, match="is not a readable PDF"):
        uploads.text_apart(b"%PDF-1.7\nnot really", "broken.pdf")


def test_valid_json_with_a_huge_integer_is_accepted():
    # int() refuses past 4,300 digits: the file was called "not valid JSON", naming Python's setting
    text = '{"n": ' + "7" * 5_000 + "}"
    assert files.text_of(text.encode(), "big.json") == text


def test_json_is_checked_in_the_reading_process_not_in_the_api(monkeypatch):
    # 31 MiB of [[],[],…] took 780 MB and 6.5 s on the API's one reading thread
    from services.api import uploads

    assert uploads.text_apart(b"[" + b"[]," * 1000 + b"[]]", "arrays.json").startswith("[[],")
    with pytest.raises(InvalidArgument, match="is not valid JSON"):
        uploads.text_apart(b"[1,", "broken.json")
    read_apart = []
    monkeypatch.setattr(uploads, "text_apart", lambda data, name: read_apart.append(name) or data.decode())
    uploads._chunks(b'{"a": 1}', "a.json")
    uploads._chunks(b"plain words", "a.txt")
    assert read_apart == ["a.json"]


def test_a_file_is_read_under_a_lower_inherited_memory_limit():
    # raising the hard limit to 4 GiB is refused under systemd's LimitAS= (3 GiB here): every PDF was refused
    import subprocess
    import sys

    script = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30));"
        "from services.api import uploads;"
        "from tests.unit.test_upload_file_text import pdf;"
        "print(uploads.text_apart(pdf(['Hello there']), 'a.pdf'))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Hello there"
