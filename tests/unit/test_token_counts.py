"""Token counts: remembered for short texts (GetContext counts the same lines call after call), exact always."""

from __future__ import annotations

from services.llm import tokens


def fresh(text: str) -> int:
    return len(tokens.encoding().encode_ordinary(text))


def test_a_remembered_count_equals_a_fresh_one_for_short_and_long_texts() -> None:
    texts = ["alice: the pond froze over", "<|endoftext|> counts as text", "y " * tokens.CACHED_TEXT_CHARS]
    for text in texts * 2:  # the second round reads the remembered counts
        assert tokens.count_tokens(text) == fresh(text)


def test_only_short_texts_are_remembered() -> None:
    tokens._count_short.cache_clear()
    tokens.count_tokens("a short line")
    tokens.count_tokens("z" * (tokens.CACHED_TEXT_CHARS + 1))
    assert tokens._count_short.cache_info().currsize == 1
