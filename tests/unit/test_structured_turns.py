"""Structured-mode turn schemas: one alternative per offered tool with that tool's own arguments, and the
dreamer's id arguments limited to the short names shown, so a grammar-constrained decoder writes only
well-formed calls."""

from __future__ import annotations

import json

import jsonschema
import pytest

from services.dreamer.aliases import Aliases
from services.dreamer.specialist import tool_specs
from services.llm import formats
from services.toolloop import memory
from services.toolloop.registry import function_spec
from services.toolloop.turns import step_schema, structured_turn_schema

SHOWN = [f"id-{n}" for n in range(1, 13)]  # the observations a specialist was shown, #1 … #12


def names() -> Aliases:
    aliases = Aliases()
    for observation_id in SHOWN:
        aliases.alias(observation_id)
    return aliases


def dream_step(specialist: str) -> dict:
    return step_schema([names().narrowed(s) for s in tool_specs(specialist)])


def valid(schema: dict, reply: dict) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(reply)


def pattern(premise_ids: list[str], pattern_type: str = "preference") -> dict:
    return {
        "tool": "add_pattern",
        "arguments": {
            "content": "Alice avoids meat and heights",
            "pattern_type": pattern_type,
            "premise_ids": premise_ids,
        },
    }


def test_a_turn_is_a_call_of_one_offered_tool_with_its_own_arguments_or_the_finish():
    schema = formats.tool_turn_schema(
        memory.specs(["grep_messages", "source_messages"]),
        {
            "type": "object",
            "properties": {"done": {"type": "string"}},
            "required": ["done"],
            "additionalProperties": False,
        },
    )
    assert valid(schema, {"tool": "grep_messages", "arguments": {"pattern": "bees"}})
    assert valid(schema, {"done": "nothing more"})
    assert not valid(schema, {"tool": "grep_messages", "arguments": {"observation_id": "x"}})  # another tool's
    assert not valid(schema, {"tool": "grep_messages", "arguments": {}})  # its required argument missing
    assert not valid(schema, {"tool": "search_messages", "arguments": {"query": "bees"}})  # not offered


def test_nested_definitions_move_to_the_root_where_their_refs_point():
    spec = {
        "function": {
            "name": "t",
            "parameters": {
                "type": "object",
                "properties": {"x": {"$ref": "#/$defs/X"}},
                "$defs": {"X": {"type": "integer"}},
            },
        }
    }
    schema = formats.tool_turn_schema([spec], {"type": "object", "required": ["done"]})
    assert schema["$defs"] == {"X": {"type": "integer"}}
    assert valid(schema, {"tool": "t", "arguments": {"x": 3}}) and not valid(
        schema, {"tool": "t", "arguments": {"x": "3"}}
    )


def test_a_pattern_must_cite_two_or_more_of_the_names_shown():
    schema = dream_step("induction")
    assert valid(schema, pattern(["#1", "#12"]))
    assert not valid(schema, pattern(["#1"]))  # the provenance rule's minimum for a pattern is 2
    assert not valid(schema, pattern(["#1", "#13"]))  # never shown
    assert not valid(schema, pattern(["#1", SHOWN[1]]))  # a full id is not a name it was shown
    assert not valid(schema, pattern(["#1", "#2"], pattern_type="habit"))


def test_a_deduction_cites_one_or_more_names_and_targets_are_names_too():
    schema = dream_step("deduction")
    assert valid(schema, {"tool": "add_deduction", "arguments": {"content": "c", "premise_ids": ["#3"]}})
    assert not valid(schema, {"tool": "add_deduction", "arguments": {"content": "c", "premise_ids": []}})
    assert not valid(schema, {"tool": "add_contradiction", "arguments": {"content": "c", "premise_ids": ["#3"]}})
    update = {"outdated_id": "#2", "content": "c", "premise_ids": ["#3"]}
    assert valid(schema, {"tool": "update_knowledge", "arguments": update})
    assert not valid(schema, {"tool": "update_knowledge", "arguments": {**update, "outdated_id": "#99"}})
    assert valid(schema, {"tool": "reasoning_chain", "arguments": {"observation_id": "#4"}})


def test_without_tools_the_only_turn_left_is_to_stop():
    assert not valid(step_schema(None), pattern(["#1", "#2"])) and valid(step_schema(None), {"done": "stop"})


def test_names_shown_map_back_to_ids_and_text_shows_names():
    aliases = names()
    args = aliases.unaliased({"premise_ids": ["#1", "[obs:#2]", "id-9"], "outdated_id": "obs:#3", "content": "#4"})
    assert args == {"premise_ids": ["id-1", "id-2", "id-9"], "outdated_id": "id-3", "content": "#4"}
    assert aliases.in_text("[obs:id-5] (explicit) x\n[obs:new] (deductive) y", ["id-5", "new"]) == (
        "[obs:#5] (explicit) x\n[obs:#13] (deductive) y"
    )
    assert aliases.in_reply("premise 'id-2' was superseded") == "premise '#2' was superseded"  # a refusal


def test_with_nothing_shown_id_arguments_stay_as_declared():
    # an empty enum would match nothing; the provenance rule still refuses what does not exist
    spec = function_spec("reasoning_chain", memory.ReasoningChain)
    assert Aliases().narrowed(spec) == spec


def test_chat_answers_are_text_unless_json_was_asked_for():
    text_only = structured_turn_schema(memory.specs(["grep_messages"]), free_text=True)
    any_json = structured_turn_schema(None, free_text=False)
    assert valid(text_only, {"answer": "Oslo", "cited_ids": ["o"]}) and not valid(text_only, {"answer": {"city": 1}})
    assert valid(any_json, {"answer": {"city": "Oslo"}}) and not valid(
        any_json, {"tool": "grep_messages", "arguments": {"pattern": "x"}}
    )


@pytest.fixture(scope="module")
def llama_grammar_parses():
    """Whether llama.cpp's own grammar parser (the one its server uses) accepts the grammar for a schema.

    Python's schema-to-grammar converter accepts grammars the C parser then refuses, so the check needs the
    library and a vocabulary: the cached local model, loaded vocabulary-only.
    """
    llama_cpp = pytest.importorskip("llama_cpp")
    from infra.models.qwen import MODEL_FILE, default_cache_dir

    model_path = default_cache_dir() / MODEL_FILE
    if not model_path.exists():
        pytest.skip(f"no local model at {model_path}")
    llm = llama_cpp.Llama(str(model_path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def parses(schema: dict) -> bool:
        grammar = llama_cpp.llama_grammar.json_schema_to_gbnf(json.dumps(schema))
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
        return bool(sampler)

    return parses


@pytest.mark.parametrize(
    "schema",
    [
        dream_step("deduction"),
        dream_step("induction"),
        step_schema(None),
        structured_turn_schema(memory.specs(list(memory.TOOLS)), free_text=True),
        structured_turn_schema(memory.specs(list(memory.TOOLS)), free_text=False),
    ],
    ids=["deduction", "induction", "stop", "chat", "chat-json"],
)
def test_llama_cpp_accepts_the_grammar_of_every_turn_schema_it_is_sent(schema, llama_grammar_parses):
    # for a schema it cannot compile, its server enforces plain JSON, or (parser refusal) dies mid-request
    sent = formats.response_format("json_object_schema", schema, "turn")["schema"]
    assert llama_grammar_parses(sent)
