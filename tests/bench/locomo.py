#!/usr/bin/env python
"""LoCoMo evidence recall: are the turns that answer a question among the top k of peerlog's retrieval?

    .venv/bin/python tests/bench/locomo.py --data ../shared/data/locomo/locomo8.json \
        [--audit ../shared/data/locomo/locomo8_audit_errors.json] [--conversations conv-26,conv-42] \
        [--derive] [--chat] [--out tests/bench/results/locomo.json]

Each conversation becomes a workspace: its two speakers are peers, each LoCoMo session a peerlog
session (messages backdated to the session's date, `dia_id` kept in metadata), posted through the API
on the local stack (Kafka, Postgres, projector, worker, API). Once every message is embedded:

- messages: WorkspaceService.SearchMessages (hybrid, RRF) with the question; recall@k is the share of a
  question's evidence turns in the top k, averaged per category (LoCoMo's own numbering: 1 multi-hop,
  2 temporal, 3 open-domain, 4 single-hop, 5 adversarial), for conv-26 and for the rest;
- with --derive (needs PEERLOG_LLM_BASE_URL: the deriver calls that model): the observations of both
  speakers' self-models nearest the question (SearchObservations, the query behind GetContext's semantic
  slice); an evidence turn counts as found when an observation in the top k cites it;
- with --chat (needs PEERLOG_LLM_BASE_URL): Chat answers each question and the same model judges it
  against the gold answer (CORRECT/WRONG); accuracy per category.

The audit file's corrections apply: WRONG_CITATION questions use `correct_evidence`; INCOMPLETE ones
(the gold answer itself is wrong or unclear) are left out and counted. The data is not copied anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from itertools import zip_longest
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import psycopg  # noqa: E402
from google.protobuf import struct_pb2, timestamp_pb2  # noqa: E402

from infra.stack import down, up  # noqa: E402
from peerlog.v1 import (  # noqa: E402
    dialectic_pb2,
    dialectic_pb2_grpc,
    messages_pb2,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from tests.bench.derive import machine, sql_dsn  # noqa: E402
from tests.support.client import Client  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (10, 25)


def log(msg: str) -> None:
    print(f"[locomo {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def session_time(text: str) -> datetime:
    """LoCoMo's '1:56 pm on 8 May, 2023' as UTC."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def sessions_of(conversation: dict) -> list[tuple[str, datetime, list[dict]]]:
    out = []
    for key, turns in conversation.items():
        if key.startswith("session_") and not key.endswith("date_time") and turns:
            out.append((key, session_time(conversation[f"{key}_date_time"]), turns))
    return sorted(out, key=lambda s: int(s[0].split("_")[1]))


def questions(sample: dict, audit: dict) -> tuple[list[dict], int]:
    """The sample's questions with evidence, corrected by the audit; and how many INCOMPLETE ones were left out."""
    fixes = {e["qa_index"]: e for e in audit.get(sample["sample_id"], [])}
    out, left_out = [], 0
    for i, qa in enumerate(sample["qa"]):
        fix = fixes.get(i, {})
        if fix.get("error_type") == "INCOMPLETE":
            left_out += 1
            continue
        evidence = fix.get("correct_evidence") if fix.get("error_type") == "WRONG_CITATION" else qa.get("evidence")
        # a few evidence entries hold several ids in one string ("D8:6; D9:17")
        evidence = [part.strip() for e in (evidence or []) for part in e.replace(",", ";").split(";") if part.strip()]
        out.append({"index": i, "question": qa["question"], "category": qa["category"], "evidence": evidence,
                    "answer": qa.get("answer", qa.get("adversarial_answer", ""))})
    return out, left_out


def load_audit(path: Path | None) -> dict:
    if path is None or not path.exists():
        return {}
    raw = json.loads(path.read_text())
    entries = raw if isinstance(raw, list) else raw.get("errors", raw)
    by_sample: dict[str, list] = defaultdict(list)
    for e in entries if isinstance(entries, list) else []:
        by_sample[e["sample_id"]].append(e)
    return by_sample


def ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


async def ingest(c: Client, sample: dict) -> tuple[dict[str, str], str]:
    """Post one conversation; returns message id → dia_id and the last consistency token."""
    ws, conv = sample["sample_id"], sample["conversation"]
    speakers = [conv["speaker_a"], conv["speaker_b"]]
    await c.workspace(ws)
    for p in speakers:
        await c.peer(ws, p.replace(" ", "_"))
    dia_of, token = {}, ""
    for name, start, turns in sessions_of(conv):
        await c.session(ws, name, members=[p.replace(" ", "_") for p in speakers])
        for lo in range(0, len(turns), 100):
            chunk = turns[lo:lo + 100]
            new = []
            for j, t in enumerate(chunk):
                meta = struct_pb2.Struct()
                meta.update({"dia_id": t["dia_id"]})
                text = t["text"] + (f" [shares a photo: {t['blip_caption']}]" if t.get("blip_caption") else "")
                new.append(messages_pb2.NewMessage(peer_id=t["speaker"].replace(" ", "_"), content=text,
                                                   created_at=ts(start + timedelta(seconds=30 * (lo + j))),
                                                   metadata=meta))
            added = await c.messages.AddMessages(messages_pb2.AddMessagesRequest(
                workspace_id=ws, session_id=name, messages=new))
            dia_of.update({mid: t["dia_id"] for mid, t in zip(added.message_ids, chunk, strict=True)})
            token = added.consistency_token
    return dia_of, token


def wait_embedded(dsn: str, expected: int, timeout: float = 3600) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with psycopg.connect(dsn) as conn:
            n = conn.execute("SELECT count(*) FROM peerlog.messages WHERE embedding IS NOT NULL").fetchone()[0]
        if n >= expected:
            return time.monotonic() - started
        time.sleep(2)
    raise TimeoutError(f"only {n} of {expected} messages embedded after {timeout} s")


def recall(found: list[str], evidence: list[str], k: int) -> float:
    top = set(found[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


async def search_hits(channel, ws: str, question: str, dia_of: dict[str, str]) -> list[str]:
    got = await workspaces_pb2_grpc.WorkspaceServiceStub(channel).SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id=ws, query=question, limit=max(KS)))
    return [dia_of.get(r.message.message_id, "") for r in got.results]


async def observation_hits(c: Client, ws: str, speakers: list[str], question: str,
                           dia_of: dict[str, str]) -> list[str]:
    """Dia ids cited by the observations nearest the question (SearchObservations, the query behind
    GetContext's semantic slice) in both speakers' self-models, taken in turn so k splits evenly."""
    ranked = []
    for speaker in speakers:
        found = await c.search_observations(ws, speaker, speaker, question, top_k=max(KS))
        ranked.append([m.observation for m in found.matches])
    hits = []
    for turn in zip_longest(*ranked):
        hits += [[dia_of.get(s.message_id, "") for s in o.sources] for o in turn if o is not None]
    return [d for sources in hits for d in sources]


async def wait_derived(c: Client, ws: str, timeout: float = 6 * 3600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await c.processing_status(ws)
        if status.counts.pending == status.counts.in_flight == 0:
            return
        await asyncio.sleep(10)
    raise TimeoutError(f"{ws}: derivation not finished after {timeout} s")


def summarise(rows: list[dict], field: str) -> dict:
    by: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by[CATEGORIES[r["category"]]].append(r[field])
        by["all (1-4)"].append(r[field]) if r["category"] != 5 else None
    return {cat: {"questions": len(v), "mean": round(statistics.mean(v), 3)} for cat, v in sorted(by.items())}


async def ask_and_judge(channel, ws: str, speaker: str, q: dict) -> dict:
    stub = dialectic_pb2_grpc.DialecticServiceStub(channel)
    reply = await stub.Chat(dialectic_pb2.ChatRequest(workspace_id=ws, observer_id=speaker, target_id=speaker,
                                                      query=q["question"]), timeout=600)
    verdict = await judge(q["question"], str(q["answer"]), reply.answer)
    return {"answer": reply.answer, "correct": verdict, "abstained": reply.abstained}


async def judge(question: str, gold: str, answer: str) -> float:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=os.environ["PEERLOG_LLM_BASE_URL"], api_key=os.environ.get("PEERLOG_LLM_API_KEY", "none"))
    prompt = (f"Question: {question}\nGold answer: {gold}\nCandidate answer: {answer}\n"
              "Is the candidate answer correct (same facts as the gold answer; wording may differ)? "
              "Reply with exactly one word: CORRECT or WRONG.")
    out = await client.chat.completions.create(model=os.environ.get("PEERLOG_LLM_MODEL", ""), temperature=0,
                                               messages=[{"role": "user", "content": prompt}])
    return 1.0 if "CORRECT" in (out.choices[0].message.content or "").upper() else 0.0


async def evaluate(state, samples: list[dict], audit: dict, args) -> dict:
    rows, left_out = [], 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{state.api_port}") as channel:
        c = Client(channel)
        dia_maps, total = {}, 0
        started = time.monotonic()
        for sample in samples:
            dia_maps[sample["sample_id"]], _ = await ingest(c, sample)
            total += len(dia_maps[sample["sample_id"]])
        ingest_s = time.monotonic() - started
        log(f"posted {total} messages in {ingest_s:.0f} s; waiting for embeddings")
        embed_wait_s = wait_embedded(sql_dsn(state.database_url), total)
        for sample in samples:
            ws, dia_of = sample["sample_id"], dia_maps[sample["sample_id"]]
            qs, skipped = questions(sample, audit)
            left_out += skipped
            speakers = [sample["conversation"][k].replace(" ", "_") for k in ("speaker_a", "speaker_b")]
            if args.derive:
                await wait_derived(c, ws)
            for q in qs:
                if not q["evidence"]:
                    continue
                t0 = time.monotonic()
                hits = await search_hits(channel, ws, q["question"], dia_of)
                row = {"sample": ws, "category": q["category"], "search_ms": (time.monotonic() - t0) * 1000,
                       **{f"search@{k}": recall(hits, q["evidence"], k) for k in KS}}
                if args.derive:
                    obs = await observation_hits(c, ws, speakers, q["question"], dia_of)
                    row.update({f"observations@{k}": recall(obs, q["evidence"], k) for k in KS})
                if args.chat:
                    row.update(await ask_and_judge(channel, ws, speakers[0], q))
                rows.append(row)
            log(f"{ws}: {sum(1 for r in rows if r['sample'] == ws)} questions scored")
    return {"rows": rows, "left_out_incomplete": left_out, "messages": total, "ingest_s": round(ingest_s, 1),
            "embedding_wait_s": round(embed_wait_s, 1)}


def report(result: dict, args) -> dict:
    rows = result.pop("rows")
    fields = [f"search@{k}" for k in KS] + ([f"observations@{k}" for k in KS] if args.derive else []) + (
        ["correct"] if args.chat else [])
    out = {}
    for name, subset in (("conv-26", [r for r in rows if r["sample"] == "conv-26"]),
                         ("rest", [r for r in rows if r["sample"] != "conv-26"])):
        if subset:
            out[name] = {f: summarise(subset, f) for f in fields}
    result["recall"] = out
    result["questions_scored"] = len(rows)
    result["search_ms_p50"] = round(statistics.median(r["search_ms"] for r in rows), 1) if rows else None
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--audit", type=Path, help="default: locomo8_audit_errors.json next to --data")
    p.add_argument("--conversations", default="", help="comma-separated sample ids (default: all)")
    p.add_argument("--derive", action="store_true", help="derive observations with PEERLOG_LLM_BASE_URL's model")
    p.add_argument("--chat", action="store_true", help="answer with Chat and judge with PEERLOG_LLM_BASE_URL's model")
    p.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/locomo.json")
    args = p.parse_args()
    if (args.derive or args.chat) and not os.environ.get("PEERLOG_LLM_BASE_URL"):
        p.error("--derive and --chat need a model endpoint: set PEERLOG_LLM_BASE_URL (and PEERLOG_LLM_MODEL)")
    samples = json.loads(args.data.read_text())
    wanted = {s for s in args.conversations.split(",") if s}
    samples = [s for s in samples if not wanted or s["sample_id"] in wanted]
    audit = load_audit(args.audit or args.data.with_name("locomo8_audit_errors.json"))
    processors = "router,embedder" + (",deriver" if args.derive else "")
    env = {"PEERLOG_WORKER_PROCESSORS": processors, "PEERLOG_DERIVER_MAX_WAIT_S": "30", "PEERLOG_DERIVER_TICK_S": "5"}
    for key in ("PEERLOG_LLM_BASE_URL", "PEERLOG_LLM_MODEL", "PEERLOG_LLM_API_KEY"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    root = Path(tempfile.mkdtemp(prefix="peerlog-locomo-"))
    state = up(root, progress=log, model_env=env)
    try:
        result = asyncio.run(evaluate(state, samples, audit, args))
    finally:
        down(root, progress=log)
    result = {"benchmark": "locomo", "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
              "command": " ".join(shlex.quote(a) for a in sys.argv), "conversations": [s["sample_id"] for s in samples],
              **report(result, args)}
    text = json.dumps(result, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
