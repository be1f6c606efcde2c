"""Probe a running (or freshly started) local model server with the real openai client.

``python -m infra.models.probe [--base-url URL --model NAME --pid PID] [--runs N]`` prints one JSON
report: which ``response_format`` forms work and whether the schema is enforced, how tool calls and
``content: None`` behave, seconds per "extract facts from 5 messages" call, generation tokens/s and
the server's RSS. Without --base-url it starts its own server (model and llama-cpp-python must be
installable). The numbers in infra/models/README.md come from this script.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MESSAGES_5 = [
    "Hi, I'm Dana. I just moved from Berlin to Porto for a new job.",
    "My daughter Mia starts school next week, she's six.",
    "I'm vegetarian, so please don't suggest meat dishes.",
    "Work-wise I'm a backend engineer, mostly Go and Postgres.",
    "Oh and I'm allergic to cats, which is sad because Mia wants one.",
]


class Fact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str
    predicate: str
    object: str


class Facts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    facts: list[Fact] = Field(max_length=10)


class Marker(BaseModel):
    """A schema the model would never follow unprompted: proves the grammar is enforced."""

    model_config = ConfigDict(extra="forbid")
    zq_code: int = Field(ge=700, le=799)
    colour: str = Field(pattern="^(teal|mauve)$")


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _try(fn) -> dict[str, Any]:
    import openai

    t0 = time.perf_counter()
    try:
        out = fn()
        return {"ok": True, "seconds": round(time.perf_counter() - t0, 2), **out}
    except openai.APIStatusError as err:
        return {"ok": False, "status": err.status_code, "error": str(err)[:300]}
    except Exception as err:  # noqa: BLE001 (a probe reports, it does not fail)
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:300]}


def _eval_rates(log: Path | None, since: int) -> list[float]:
    """tokens/s of llama.cpp's 'eval time' lines (generation only) written after byte offset ``since``."""
    if log is None or not log.is_file():
        return []
    text = log.read_bytes()[since:].decode(errors="replace")
    pat = r"^\S*\s+eval time =.*?\(\s*[\d.]+ ms per token,\s*([\d.]+) tokens per second\)"
    return [float(m) for m in re.findall(pat, text, re.M)]


def probe(base_url: str, model: str, pid: int | None, log: Path | None, runs: int) -> dict[str, Any]:
    """Try each request form peerlog relies on, then time fact extraction and free text; return the report."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="local", timeout=300, max_retries=0)
    chat = client.chat.completions.create
    report: dict[str, Any] = {"base_url": base_url, "model": model}
    if pid:
        report["rss_mb_idle"] = _rss_mb(pid)
    report |= _response_format_checks(client, model)
    report |= _message_and_tool_checks(chat, model)
    report["extract_5_messages"] = _time_extraction(chat, model, log, runs)
    report["free_text_200"] = _time_free_text(chat, model, log)
    if pid:
        report["rss_mb_after"] = _rss_mb(pid)
    return report


def _response_format_checks(client, model: str) -> dict[str, Any]:
    """Which ways of asking for JSON (schema, parse, json_object with and without a schema) this server honours."""
    chat = client.chat.completions.create
    report: dict[str, Any] = {}
    report["plain_chat"] = _try(
        lambda: {
            "content": chat(
                model=model,
                messages=[{"role": "user", "content": "Name the capital of France in one word."}],
                max_tokens=16,
                temperature=0,
            )
            .choices[0]
            .message.content
        }
    )

    def json_schema_form():
        c = (
            chat(
                model=model,
                messages=[{"role": "user", "content": "Give a code and a colour."}],
                max_tokens=60,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "Marker", "schema": Marker.model_json_schema(), "strict": True},
                },
            )
            .choices[0]
            .message.content
        )
        return {"content": c}

    report["response_format_json_schema"] = _try(json_schema_form)

    def parse_form():
        r = client.chat.completions.parse(
            model=model,
            messages=[{"role": "user", "content": "Give a code and a colour."}],
            response_format=Marker,
            max_tokens=60,
        )
        return {"parsed": r.choices[0].message.parsed.model_dump()}

    report["chat_completions_parse"] = _try(parse_form)

    def json_object_schema(schema_model: type[BaseModel], prompt: str):
        def run():
            c = (
                chat(
                    model=model,
                    messages=[{"role": "user", "content": prompt}],
                    max_tokens=80,
                    temperature=0,
                    response_format={"type": "json_object", "schema": schema_model.model_json_schema()},
                )
                .choices[0]
                .message.content
            )
            try:
                schema_model.model_validate_json(c)
                valid = True
            except ValidationError:
                valid = False
            return {"content": c, "schema_valid": valid}

        return run

    # a prompt that does not mention the schema: only an enforced grammar yields zq_code/colour
    report["response_format_json_object_schema"] = _try(
        json_object_schema(Marker, "Describe the weather in Paris as JSON.")
    )

    def json_object_plain():
        c = (
            chat(
                model=model,
                messages=[{"role": "user", "content": "Describe the weather in Paris as JSON."}],
                max_tokens=80,
                temperature=0,
                response_format={"type": "json_object"},
            )
            .choices[0]
            .message.content
        )
        json.loads(c)
        return {"content": c}

    report["response_format_json_object"] = _try(json_object_plain)
    return report


def _message_and_tool_checks(chat, model: str) -> dict[str, Any]:
    """Whether an assistant message without content is accepted, and tool calls with tool_choice auto / named."""
    report: dict[str, Any] = {}
    # an assistant message with content None, as the SDK echoes after a tool call
    report["assistant_content_none"] = _try(
        lambda: {
            "content": chat(
                model=model,
                max_tokens=10,
                messages=[
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": None},
                    {"role": "user", "content": "say ok"},
                ],
            )
            .choices[0]
            .message.content
        }
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    for choice in ("auto", "named"):

        def tool_call(choice=choice):
            tc = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else "auto"
            m = (
                chat(
                    model=model,
                    max_tokens=60,
                    tools=tools,
                    tool_choice=tc,
                    messages=[{"role": "user", "content": "What's the weather in Oslo?"}],
                )
                .choices[0]
                .message
            )
            return {"content": m.content, "tool_calls": [t.function.model_dump() for t in (m.tool_calls or [])]}

        report[f"tools_{choice}"] = _try(tool_call)
    return report


def _log_size(log: Path | None) -> int:
    return log.stat().st_size if log and log.is_file() else 0


def _time_extraction(chat, model: str, log: Path | None, runs: int) -> dict[str, Any]:
    """The timed workload: extract facts from 5 short messages as schema-checked JSON, `runs` times."""
    prompt = "Extract the facts stated in these messages as subject/predicate/object triples.\n" + "\n".join(
        f"{i}. {m}" for i, m in enumerate(MESSAGES_5, 1)
    )
    offset = _log_size(log)
    times, completion_tokens, prompt_tokens, valid, sample = [], [], [], 0, None
    for _ in range(runs):
        t0 = time.perf_counter()
        resp = chat(
            model=model,
            max_tokens=400,
            temperature=0.2,
            messages=[
                {"role": "system", "content": "You extract facts. Answer with JSON only."},
                {"role": "user", "content": prompt},
            ],
            response_format={"type": "json_object", "schema": Facts.model_json_schema()},
        )
        times.append(time.perf_counter() - t0)
        completion_tokens.append(resp.usage.completion_tokens)
        prompt_tokens.append(resp.usage.prompt_tokens)
        try:
            sample = Facts.model_validate_json(resp.choices[0].message.content).model_dump()
            valid += 1
        except ValidationError:
            sample = resp.choices[0].message.content
    rates = _eval_rates(log, offset)
    return {
        "runs": runs,
        "seconds_per_call": [round(t, 2) for t in times],
        "median_seconds": round(statistics.median(times), 2),
        "prompt_tokens": prompt_tokens[0],
        "completion_tokens": completion_tokens,
        "schema_valid_runs": valid,
        "end_to_end_tokens_per_s": round(sum(completion_tokens) / sum(times), 1),
        "generation_tokens_per_s_from_log": rates,
        "sample": sample,
    }


def _time_free_text(chat, model: str, log: Path | None) -> dict[str, Any]:
    """Unconstrained generation speed, for comparison with the grammar-constrained one."""
    offset = _log_size(log)
    t0 = time.perf_counter()
    resp = chat(
        model=model,
        max_tokens=200,
        temperature=0,
        messages=[{"role": "user", "content": "Write a short paragraph about the sea."}],
    )
    dt = time.perf_counter() - t0
    return {
        "seconds": round(dt, 2),
        "completion_tokens": resp.usage.completion_tokens,
        "end_to_end_tokens_per_s": round(resp.usage.completion_tokens / dt, 1),
        "generation_tokens_per_s_from_log": _eval_rates(log, offset),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.models.probe")
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--pid", type=int)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if args.base_url:
        report = probe(args.base_url, args.model, args.pid, args.log, args.runs)
    else:
        from infra.models import LocalModelServer, ensure_llama_server, ensure_model

        ensure_llama_server()
        t0 = time.perf_counter()
        with LocalModelServer(ensure_model()) as srv:
            startup = time.perf_counter() - t0
            report = probe(srv.base_url, srv.model, srv.pid, srv.log_path, args.runs)
            report["startup_seconds"] = round(startup, 1)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
