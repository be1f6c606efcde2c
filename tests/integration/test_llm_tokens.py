"""cl100k_base token counts, offline, from the js-tiktoken ranks (npm) checked against tiktoken's hash."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from services.llm import tokens


@pytest.mark.parametrize(
    ("text", "expected_ids"),
    [
        # reference encodings published with tiktoken / the OpenAI cookbook
        ("hello world", [15339, 1917]),
        ("tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
        ("antidisestablishmentarianism", [519, 85342, 34500, 479, 8997, 2191]),
        ("2 + 2 = 4", [17, 489, 220, 17, 284, 220, 19]),
        ("お誕生日おめでとう", [33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699]),
    ],
)
def test_encoding_matches_known_cl100k_ids(text: str, expected_ids: list[int]) -> None:
    assert tokens.encoding().encode_ordinary(text) == expected_ids
    assert tokens.count_tokens(text) == len(expected_ids)


def test_hello_world_is_two_tokens() -> None:
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("") == 0


def test_special_token_text_is_counted_as_plain_text() -> None:
    # user text must never be able to inject <|endoftext|>; it is just characters
    assert tokens.count_tokens("<|endoftext|>") > 1


def test_truncation_keeps_a_prefix_within_the_budget() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 20

    cut = tokens.truncate_to_tokens(text, 10)

    assert text.startswith(cut) and tokens.count_tokens(cut) == 10
    assert tokens.truncate_to_tokens(text, 10_000) == text
    assert tokens.truncate_to_tokens(text, 0) == ""


def test_truncation_never_splits_a_character() -> None:
    # 誕 takes two tokens; cutting after the first would leave half a UTF-8 sequence
    assert tokens.truncate_to_tokens("お誕生日おめでとう", 2) == "お"
    assert tokens.truncate_to_tokens("お誕生日おめでとう", 3) == "お誕"


def test_negative_budgets_are_refused() -> None:
    with pytest.raises(ValueError):
        tokens.truncate_to_tokens("hello", -1)


def test_ranks_are_built_from_npm_and_a_tampered_cache_is_rebuilt(tmp_path: Path) -> None:
    built = tokens.ensure_ranks(tmp_path)
    assert hashlib.sha256(built.read_bytes()).hexdigest() == tokens.CL100K_SHA256

    tampered = bytearray(built.read_bytes())
    tampered[-2] ^= 1  # the last rank's last digit
    built.write_bytes(bytes(tampered))
    assert hashlib.sha256(built.read_bytes()).hexdigest() != tokens.CL100K_SHA256
    rebuilt = tokens.ensure_ranks(tmp_path)

    assert rebuilt == built
    assert hashlib.sha256(rebuilt.read_bytes()).hexdigest() == tokens.CL100K_SHA256
    assert not list(tmp_path.glob("*.tmp"))
