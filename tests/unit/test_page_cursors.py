"""Page tokens are signed for the list that issued them: nothing else, edited or forged, passes."""

from __future__ import annotations

import base64

import pytest

from services.api.cursors import PageCursors
from services.errors import InvalidArgument

cursors = PageCursors.from_setting("test key")


def test_a_token_round_trips_for_the_list_and_scope_that_issued_it():
    token = cursors.encode(("ListPeers", "acme"), "bob")
    assert cursors.decode_id(("ListPeers", "acme"), token) == "bob"
    assert (
        cursors.decode_seq(
            ("ListMessages", "acme", "s1", "False"), cursors.encode(("ListMessages", "acme", "s1", "False"), "41")
        )
        == 41
    )
    assert cursors.decode(("ListPeers", "acme"), "") == ""


def test_a_token_of_another_list_or_workspace_is_refused():
    token = cursors.encode(("ListMessages", "acme", "s1", "False"), "7")
    for scope in (("ListWorkspaces",), ("ListMessages", "acme", "s2", "False"), ("ListMessages", "acme", "s1", "True")):
        with pytest.raises(InvalidArgument, match="page_token"):
            cursors.decode(scope, token)


def test_scopes_cannot_run_together_into_the_same_signature():
    token = cursors.encode(("ListPeers", "ab"), "c")
    with pytest.raises(InvalidArgument):
        cursors.decode(("ListPeers", "a", "b"), token)


def test_a_token_signed_with_another_key_is_refused():
    token = PageCursors.from_setting("other key").encode(("ListWorkspaces",), "acme")
    with pytest.raises(InvalidArgument):
        cursors.decode(("ListWorkspaces",), token)


def _unsigned(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "forged",
    [
        _unsigned("²"),
        _unsigned("9" * 20),
        _unsigned("9" * 5000),
        _unsigned("acme\x00"),
        "%%%",
        "a.b.c",
        "x" * 5000,
        "YWNtZQ.AAAAAAAAAAAAAAAAAAAAAA",
        # found by the long fuzz (seed 99): a character outside ASCII made base64 raise ValueError, not
        # binascii.Error, and the caller got INTERNAL
        "cy1taXNzaW5n.aGBamySxhl6v0e6SLeRKkA\u200e",
        "\x1dh2n\x97=Q\x96`.\xab%",
    ],
)
def test_unsigned_garbled_or_oversized_tokens_are_invalid_argument(forged):
    with pytest.raises(InvalidArgument, match="page_token"):
        cursors.decode_seq(("ListMessages", "acme", "s1", "False"), forged)
    with pytest.raises(InvalidArgument, match="page_token"):
        cursors.decode_id(("ListWorkspaces",), forged)


def test_even_a_signed_position_that_is_not_a_seq_or_an_id_is_refused():
    # only a leaked key could produce these; they must still not reach SQL as "bigint out of range" or NUL
    for position, decode in (("9" * 20, cursors.decode_seq), ("²", cursors.decode_seq), ("a\x00b", cursors.decode_id)):
        with pytest.raises(InvalidArgument):
            decode(("L",), cursors.encode(("L",), position))
