"""The offline cl100k_base build: rank expansion, parsing, and constants that match tiktoken's."""

from __future__ import annotations

import ast
import base64
import importlib.util
import json
from pathlib import Path

from services.llm import tokens


def b64(token: bytes) -> str:
    return base64.b64encode(token).decode()


def test_ranks_expand_to_tiktoken_lines_sorted_by_rank() -> None:
    ranks = "\n".join([f"! 3 {b64(b'ab')} {b64(b'cd')}", f"! 0 {b64(b'a')} {b64(b'b')} {b64(b'c')}", ""])
    module = "module.exports = " + json.dumps({"pat_str": "x", "special_tokens": {}, "bpe_ranks": ranks}) + ";"

    expanded = tokens.expand_ranks(module)

    assert expanded.decode().splitlines() == [
        f"{b64(b'a')} 0",
        f"{b64(b'b')} 1",
        f"{b64(b'c')} 2",
        f"{b64(b'ab')} 3",
        f"{b64(b'cd')} 4",
    ]
    assert tokens.parse_ranks(expanded) == {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"cd": 4}


def _tiktoken_cl100k_declaration() -> tuple[str, dict[str, int]]:
    """The pattern and special tokens tiktoken's own cl100k_base() declares (read, not run)."""
    path = Path(importlib.util.find_spec("tiktoken_ext.openai_public").origin)
    tree = ast.parse(path.read_text())
    names = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "cl100k_base")
    special = next(
        n.value for n in ast.walk(function) if isinstance(n, ast.Assign) and n.targets[0].id == "special_tokens"
    )
    returned = next(n.value for n in ast.walk(function) if isinstance(n, ast.Return))
    pat_str = next(v.value for k, v in zip(returned.keys, returned.values) if k.value == "pat_str")
    return pat_str, {names[k.id]: v.value for k, v in zip(special.keys, special.values)}


def test_pattern_and_special_tokens_match_the_installed_tiktoken() -> None:
    pat_str, special_tokens = _tiktoken_cl100k_declaration()

    assert tokens.CL100K_PAT_STR == pat_str
    assert tokens.CL100K_SPECIAL_TOKENS == special_tokens


def test_expected_hash_matches_the_installed_tiktoken() -> None:
    source = Path(importlib.util.find_spec("tiktoken_ext.openai_public").origin).read_text()
    assert f'expected_hash="{tokens.CL100K_SHA256}"' in source
