#!/usr/bin/env python
"""LoCoMo evidence recall: are the turns that answer a question among the top k of peerlog's retrieval,
and of three naive baselines run over the same turns and questions?

    .venv/bin/python tests/bench/locomo.py --data ../shared/data/locomo/locomo8.json \
        [--audit ../shared/data/locomo/locomo8_audit_errors.json] [--conversations conv-26,conv-42] \
        [--no-context] [--rerank] [--derive] [--chat] [--keep DIR] [--out tests/bench/results/locomo.json]

Each conversation becomes a workspace: its two speakers are peers, each LoCoMo session a peerlog
session (messages backdated to the session's date, `dia_id` kept in metadata; a shared photo's caption
appended to the text as " [shares a photo: <caption>]"), posted through the API on the local stack
(Kafka, Postgres, projector, worker, API). Recall@k is the share of a question's evidence turns in the
top k (k = 5, 10, 25), averaged per category (LoCoMo's own numbering: 1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop, 5 adversarial) and over 1-4 (adversarial questions are reported apart),
for conv-26 and for the rest. Measured:

- search: WorkspaceService.SearchMessages with the question, once every message is embedded; its
  client-side latency (p50, p95 over all questions);
- the baselines (tests/bench/baselines.py), computed before the stack starts, each conversation its own
  corpus: bm25, Okapi BM25 (k1 1.2, b 0.75, idf ln(1 + (N - n + 0.5) / (n + 0.5))) over the posted
  texts, lowercase `\w+` tokens minus NLTK's English stop words, any question token matching; minilm,
  cosine between all-MiniLM-L6-v2 (peerlog's local embedder) vectors of the bare question and of
  "[<day> <Month> <Year>] <speaker>: <text>" with the session's date; rrf, reciprocal rank fusion
  (k 60) of those two full rankings. `table` puts peerlog beside them, with the best baseline per k and
  peerlog's margin over it;
- with --rerank: the same search with `rerank` (the cross-encoder, services/llm/rerank.py), beside it;
- GetContext evidence recall (unless --no-context): ContextService.GetContext for the conversation's
  last session with the question as search_query, the first speaker as observer and no summary, at
  token budgets 1,000, 2,000 and 4,000; the share of the question's evidence turns among the returned
  messages (`relevant_messages` and `messages`);
- with --derive (needs PEERLOG_LLM_BASE_URL: the deriver calls that model): the observations of both
  speakers' self-models nearest the question (SearchObservations, the query behind GetContext's semantic
  slice); an evidence turn counts as found when an observation in the top k cites it;
- with --chat (needs PEERLOG_LLM_BASE_URL): Chat answers each question and the same model judges it
  against the gold answer (CORRECT/WRONG); accuracy per category.

The audit file's corrections apply: WRONG_CITATION questions use `correct_evidence`; INCOMPLETE ones
(the gold answer itself is wrong or unclear) are left out and counted. Questions without evidence are
skipped. The data is not copied anywhere. The JSON result goes to stdout and --out, a table to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import zip_longest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from google.protobuf import struct_pb2, timestamp_pb2  # noqa: E402

from infra.stack import down, sql_dsn, up  # noqa: E402
from peerlog.v1 import (  # noqa: E402
    context_pb2,
    dialectic_pb2,
    messages_pb2,
    workspaces_pb2,
)
from services.api.channels import aio_channel  # noqa: E402
from services.cli.client import Client  # noqa: E402
from services.llm.embeddings import MINILM, LocalOnnxEmbedder  # noqa: E402
from tests.bench import baselines  # noqa: E402
from tests.bench.derive import machine  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ALL = "all (1-4)"
KS = (5, 10, 25)
BUDGETS = (1000, 2000, 4000)
GROUPS = ("conv-26", "rest")
POSTED = "locomo-posted.json"  # with --keep: each conversation's workspace, message ids and questions
# the row field prefix of each method in the table: peerlog's is its SearchMessages recall, "peerlog
# reranked" the same with `rerank` (with --rerank)
METHODS = {"peerlog": "search", "peerlog reranked": "rerank", **{name: name for name in baselines.NAMES}}
PEERLOG_METHODS = ("peerlog", "peerlog reranked")


def measured(by_field: dict) -> dict[str, str]:
    """The methods whose recall this run measured (peerlog reranked only with --rerank)."""
    return {method: prefix for method, prefix in METHODS.items() if f"{prefix}@{KS[0]}" in by_field}


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


def peer_id(speaker: str, opaque: bool = False) -> str:
    """A speaker's peer id: the name with underscores, or (--opaque-ids) an id that says nothing of the
    name, as an app's user ids do, the name then given as the peer's `name` in its metadata."""
    if opaque:
        return "u-" + hashlib.sha256(speaker.encode()).hexdigest()[:10]
    return speaker.replace(" ", "_")


def posted_text(turn: dict) -> str:
    """A turn's message content: its text, and the caption of the photo it shares."""
    return turn["text"] + (f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")


def turns_of(conversation: dict) -> list[baselines.Turn]:
    """The turns as the bench posts them, for the baselines."""
    return [
        baselines.Turn(t["dia_id"], t["speaker"], posted_text(t), start.date())
        for _, start, turns in sessions_of(conversation)
        for t in turns
    ]


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
        if evidence:
            out.append(
                {
                    "index": i,
                    "question": qa["question"],
                    "category": qa["category"],
                    "evidence": evidence,
                    "answer": qa.get("answer", qa.get("adversarial_answer", "")),
                }
            )
    return out, left_out


def with_baselines(sample: dict, qs: list[dict], embed: baselines.Embed) -> list[dict]:
    """The questions, each with its recall@k under every baseline (fields `<name>@<k>`)."""
    ranked = baselines.rank(turns_of(sample["conversation"]), [q["question"] for q in qs], embed, depth=max(KS))
    return [
        {**q, **{f"{name}@{k}": recall(ranked[name][i], q["evidence"], k) for name in baselines.NAMES for k in KS}}
        for i, q in enumerate(qs)
    ]


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


@dataclass(frozen=True)
class Posted:
    """A conversation as posted: its workspace, the speakers' peer ids, its last session, message id → dia_id."""

    ws: str
    speakers: list[str]
    last_session: str
    dia_of: dict[str, str]


async def ingest(c: Client, sample: dict, opaque: bool = False) -> Posted:
    """Post one conversation."""
    ws, conv = sample["sample_id"], sample["conversation"]
    names = [conv["speaker_a"], conv["speaker_b"]]
    speakers = [peer_id(name, opaque) for name in names]
    await c.workspace(ws)
    for p, name in zip(speakers, names, strict=True):
        metadata = struct_pb2.Struct()
        if opaque:
            metadata.update({"name": name})
        await c.peer(ws, p, metadata=metadata)
    dia_of = {}
    sessions = sessions_of(conv)
    for name, start, turns in sessions:
        await c.session(ws, name, members=speakers)
        for lo in range(0, len(turns), 100):
            chunk = turns[lo : lo + 100]
            new = []
            for j, t in enumerate(chunk):
                meta = struct_pb2.Struct()
                meta.update({"dia_id": t["dia_id"]})
                new.append(
                    messages_pb2.NewMessage(
                        peer_id=peer_id(t["speaker"], opaque),
                        content=posted_text(t),
                        created_at=ts(start + timedelta(seconds=30 * (lo + j))),
                        metadata=meta,
                    )
                )
            added = await c.messages.AddMessages(
                messages_pb2.AddMessagesRequest(workspace_id=ws, session_id=name, messages=new)
            )
            dia_of.update({mid: t["dia_id"] for mid, t in zip(added.message_ids, chunk, strict=True)})
    return Posted(ws, speakers, sessions[-1][0], dia_of)


def wait_embedded(dsn: str, expected: int, timeout: float = 3600) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with psycopg.connect(dsn) as conn:
            n = conn.execute("SELECT count(*) FROM peerlog.messages WHERE embedding IS NOT NULL").fetchone()[0]
        if n >= expected:
            return time.monotonic() - started
        time.sleep(2)
    raise TimeoutError(f"only {n} of {expected} messages embedded after {timeout} s")


def share(found: list[str], evidence: list[str]) -> float:
    """The share of the evidence turns among `found`."""
    found_set = set(found)
    return sum(1 for e in evidence if e in found_set) / len(evidence)


def recall(ranked: list[str], evidence: list[str], k: int) -> float:
    return share(ranked[:k], evidence)


async def search_hits(
    c: Client,
    ws: str,
    question: str,
    dia_of: dict[str, str],
    limit: int = max(KS),
    scored: bool = False,
    rerank: bool = False,
) -> list:
    """The dia ids of the top `limit` hits, best first (with `scored`: [dia id, score] pairs)."""
    got = await c.workspaces.SearchMessages(
        workspaces_pb2.SearchWorkspaceMessagesRequest(workspace_id=ws, query=question, limit=limit, rerank=rerank)
    )
    dias = [dia_of.get(r.message.message_id, "") for r in got.results]
    return [[d, round(r.score, 4)] for d, r in zip(dias, got.results, strict=True)] if scored else dias


async def context_hits(c: Client, conv: Posted, question: str, budget: int) -> list[str]:
    """Dia ids of the messages GetContext returns for the question within `budget` tokens."""
    got = await c.context.GetContext(
        context_pb2.GetContextRequest(
            workspace_id=conv.ws,
            session_id=conv.last_session,
            token_budget=budget,
            include_summary=False,
            observer_id=conv.speakers[0],
            search_query=question,
        )
    )
    # getattr: the bench must run against servers (and stubs) from before relevant_messages existed
    returned = [*getattr(got, "relevant_messages", []), *got.messages]
    return [conv.dia_of.get(m.message_id, "") for m in returned]


async def observation_hits(c: Client, ws: str, speakers: list[str], question: str, dia_of: dict[str, str]) -> list[str]:
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
        by[ALL].append(r[field]) if r["category"] != 5 else None
    return {cat: {"questions": len(v), "mean": round(statistics.mean(v), 3)} for cat, v in sorted(by.items())}


async def ask_and_judge(c: Client, ws: str, speaker: str, q: dict) -> dict:
    reply = await c.dialectic.Chat(
        dialectic_pb2.ChatRequest(workspace_id=ws, observer_id=speaker, target_id=speaker, query=q["question"]),
        timeout=600,
    )
    verdict = await judge(q["question"], str(q["answer"]), reply.answer)
    return {"answer": reply.answer, "correct": verdict, "abstained": reply.abstained}


async def judge(question: str, gold: str, answer: str) -> float:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(
        base_url=os.environ["PEERLOG_LLM_BASE_URL"], api_key=os.environ.get("PEERLOG_LLM_API_KEY", "none")
    )
    prompt = (
        f"Question: {question}\nGold answer: {gold}\nCandidate answer: {answer}\n"
        "Is the candidate answer correct (same facts as the gold answer; wording may differ)? "
        "Reply with exactly one word: CORRECT or WRONG."
    )
    out = await client.chat.completions.create(
        model=os.environ.get("PEERLOG_LLM_MODEL", ""), temperature=0, messages=[{"role": "user", "content": prompt}]
    )
    return 1.0 if "CORRECT" in (out.choices[0].message.content or "").upper() else 0.0


async def score(c: Client, conv: Posted, q: dict, args) -> dict:
    """One question's row: peerlog's recall (search, and GetContext, observations, Chat as asked) beside
    the baselines' recall the question already carries."""
    t0 = time.monotonic()
    hits = await search_hits(c, conv.ws, q["question"], conv.dia_of)
    row = {
        "sample": conv.ws,
        "category": q["category"],
        "search_ms": (time.monotonic() - t0) * 1000,
        **{f"search@{k}": recall(hits, q["evidence"], k) for k in KS},
        **{f"{name}@{k}": q[f"{name}@{k}"] for name in baselines.NAMES for k in KS},
    }
    if args.rerank:
        t0 = time.monotonic()
        reranked = await search_hits(c, conv.ws, q["question"], conv.dia_of, rerank=True)
        row["rerank_ms"] = (time.monotonic() - t0) * 1000
        row.update({f"rerank@{k}": recall(reranked, q["evidence"], k) for k in KS})
    if args.context:
        for budget in BUDGETS:
            row[f"context@{budget}"] = share(await context_hits(c, conv, q["question"], budget), q["evidence"])
    if args.derive:
        obs = await observation_hits(c, conv.ws, conv.speakers, q["question"], conv.dia_of)
        row.update({f"observations@{k}": recall(obs, q["evidence"], k) for k in KS})
    if args.chat:
        row.update(await ask_and_judge(c, conv.ws, conv.speakers[0], q))
    if args.hits:  # for offline analysis of the ranking: not part of the report
        row["question"], row["evidence"] = q["question"], q["evidence"]
        row["top100"] = await search_hits(c, conv.ws, q["question"], conv.dia_of, limit=100, scored=True)
    return row


async def evaluate(state, plan: list[tuple[dict, list[dict]]], args) -> dict:
    rows = []
    async with aio_channel(f"127.0.0.1:{state.api_port}", state.admin_token()) as channel:
        c = Client(channel)
        started = time.monotonic()
        posted = [await ingest(c, sample, args.opaque_ids) for sample, _ in plan]
        total = sum(len(conv.dia_of) for conv in posted)
        ingest_s = time.monotonic() - started
        log(f"posted {total} messages in {ingest_s:.0f} s; waiting for embeddings")
        embed_wait_s = wait_embedded(sql_dsn(state.database_url), total)
        for conv, (_, qs) in zip(posted, plan, strict=True):
            if args.derive:
                await wait_derived(c, conv.ws)
            rows += [await score(c, conv, q, args) for q in qs]
            log(f"{conv.ws}: {len(qs)} questions scored")
    kept = [
        {
            "ws": conv.ws,
            "dia_of": conv.dia_of,
            "questions": [{k: q[k] for k in ("question", "category", "evidence")} for q in qs],
        }
        for conv, (_, qs) in zip(posted, plan, strict=True)
    ]
    return {
        "rows": rows,
        "posted": kept,
        "messages": total,
        "ingest_s": round(ingest_s, 1),
        "embedding_wait_s": round(embed_wait_s, 1),
    }


def fields(args) -> list[str]:
    prefixes = [prefix for method, prefix in METHODS.items() if args.rerank or method != "peerlog reranked"]
    return (
        [f"{prefix}@{k}" for prefix in prefixes for k in KS]
        + ([f"context@{b}" for b in BUDGETS] if args.context else [])
        + ([f"observations@{k}" for k in KS] if args.derive else [])
        + (["correct"] if args.chat else [])
    )


def table(recall_by_group: dict, args) -> dict:
    """Per group, the all (1-4) mean @k of peerlog and of each baseline, the best baseline per k and
    peerlog's margin over it (peerlog minus that baseline); peerlog's GetContext recall too."""
    out = {}
    for group, by_field in recall_by_group.items():
        if ALL not in by_field[f"search@{KS[0]}"]:
            continue  # only adversarial questions: nothing to compare
        rows = {
            method: {f"@{k}": by_field[f"{prefix}@{k}"][ALL]["mean"] for k in KS}
            for method, prefix in measured(by_field).items()
        }
        if args.context:
            rows["peerlog"].update({f"context@{b}": by_field[f"context@{b}"][ALL]["mean"] for b in BUDGETS})
        best = {f"@{k}": max(baselines.NAMES, key=lambda name: rows[name][f"@{k}"]) for k in KS}
        margins = {
            f"margin{method[len('peerlog') :].replace(' ', '_')}": {
                at: round(rows[method][at] - rows[name][at], 3) for at, name in best.items()
            }
            for method in PEERLOG_METHODS
            if method in rows
        }
        out[group] = {**rows, "best_baseline": best, **margins}
    return out


def group_of(sample: str) -> str:
    """conv-26 is reported apart from the rest (GROUPS)."""
    return "conv-26" if sample == "conv-26" else "rest"


def report(result: dict, args) -> dict:
    rows = result.pop("rows")
    out = {}
    for name, subset in ((g, [r for r in rows if group_of(r["sample"]) == g]) for g in GROUPS):
        if subset:
            out[name] = {f: summarise(subset, f) for f in fields(args)}
    result["table"] = table(out, args)
    result["recall"] = out
    result["questions_scored"] = len(rows)
    for kind in ("search", "rerank") if args.rerank else ("search",):
        ms = [r[f"{kind}_ms"] for r in rows]
        result[f"{kind}_ms_p50"] = round(float(np.percentile(ms, 50)), 1) if ms else None
        result[f"{kind}_ms_p95"] = round(float(np.percentile(ms, 95)), 1) if ms else None
    return result


# the text table's column blocks: all (1-4) at every k, then each category at 10 and 25
COLUMNS = [(ALL, KS)] + [(CATEGORIES[c], (10, 25)) for c in sorted(CATEGORIES)]
CELL = 7  # a mean is 5 characters


def block(cells: list[str], ks: tuple[int, ...]) -> str:
    """One column block; 4 more spaces than its cells, so a category label ("adversarial (334)") fits."""
    return "".join(c.ljust(CELL) for c in cells).ljust(CELL * len(ks) + 4)


def group_lines(group: str, by_field: dict) -> list[str]:
    def mean(field: str, cat: str) -> str:
        got = by_field[field].get(cat)
        return f"{got['mean']:.3f}" if got else "-"

    def line(label: str, cells) -> str:
        return (label.ljust(17) + "".join(block(cells(cat, ks), ks) for cat, ks in COLUMNS)).rstrip()

    counts = by_field[f"search@{KS[0]}"]
    lines = [
        line(group, lambda cat, ks: [f"{cat} ({counts.get(cat, {}).get('questions', 0)})"]),
        line("", lambda cat, ks: [f"@{k}" for k in ks]),
    ]
    lines += [
        line(method, lambda cat, ks: [mean(f"{prefix}@{k}", cat) for k in ks])
        for method, prefix in measured(by_field).items()
    ]
    if f"context@{BUDGETS[0]}" in by_field:
        lines.append(
            f"GetContext evidence recall, {ALL}: "
            + ", ".join(f"{b} tokens {mean(f'context@{b}', ALL)}" for b in BUDGETS)
        )
    return lines


def text_table(result: dict) -> str:
    """Per group, peerlog and the baselines: all (1-4) @5 @10 @25, then @10 @25 per category; search latency."""
    lines = [line for group, by_field in result["recall"].items() for line in [*group_lines(group, by_field), ""]]
    latency = [
        f"{kind} p50 {result[f'{kind}_ms_p50']} ms, p95 {result[f'{kind}_ms_p95']} ms"
        for kind in ("search", "rerank")
        if f"{kind}_ms_p50" in result
    ]
    return "\n".join(lines + latency)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--audit", type=Path, help="default: locomo8_audit_errors.json next to --data")
    p.add_argument("--conversations", default="", help="comma-separated sample ids (default: all)")
    p.add_argument(
        "--context",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="GetContext evidence recall at 1,000 / 2,000 / 4,000 tokens",
    )
    p.add_argument("--rerank", action="store_true", help="also SearchMessages with rerank (the cross-encoder)")
    p.add_argument("--derive", action="store_true", help="derive observations with PEERLOG_LLM_BASE_URL's model")
    p.add_argument("--chat", action="store_true", help="answer with Chat and judge with PEERLOG_LLM_BASE_URL's model")
    p.add_argument("--out", type=Path, default=ROOT / "tests/bench/results/locomo.json")
    p.add_argument(
        "--opaque-ids",
        action="store_true",
        help="peer ids that say nothing of the speaker's name (the name goes in the peer's metadata)",
    )
    p.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="run the stack in DIR and leave it running with the conversations loaded, their questions in "
        f"DIR/{POSTED}, for tests/bench/ranking_sweep.py",
    )
    p.add_argument(
        "--hits",
        type=Path,
        help="also write each question with its top 100 hits and their scores "
        "(JSON lines), for analysing the ranking offline",
    )
    args = p.parse_args()
    if (args.derive or args.chat) and not os.environ.get("PEERLOG_LLM_BASE_URL"):
        p.error("--derive and --chat need a model endpoint: set PEERLOG_LLM_BASE_URL (and PEERLOG_LLM_MODEL)")
    if args.keep and (args.keep / POSTED).exists():  # posting again would put every turn in twice
        p.error(f"{args.keep} already holds the conversations: sweep it with ranking_sweep.py, or keep a new directory")
    samples = json.loads(args.data.read_text())
    wanted = {s for s in args.conversations.split(",") if s}
    samples = [s for s in samples if not wanted or s["sample_id"] in wanted]
    audit = load_audit(args.audit or args.data.with_name("locomo8_audit_errors.json"))
    asked = [(s, *questions(s, audit)) for s in samples]
    # before the stack starts, so the in-process model competes with neither the stack's embedder nor
    # the search latency measured later
    started, embed = time.monotonic(), LocalOnnxEmbedder(model=MINILM).embed_sync
    plan = [(s, with_baselines(s, qs, embed)) for s, qs, _ in asked]
    baselines_s = time.monotonic() - started
    log(f"baselines ranked in {baselines_s:.0f} s")
    processors = "router,embedder" + (",deriver" if args.derive else "")
    env = {"PEERLOG_WORKER_PROCESSORS": processors, "PEERLOG_DERIVER_MAX_WAIT_S": "30", "PEERLOG_DERIVER_TICK_S": "5"}
    for key in ("PEERLOG_LLM_BASE_URL", "PEERLOG_LLM_MODEL", "PEERLOG_LLM_API_KEY"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    root = args.keep or Path(tempfile.mkdtemp(prefix="peerlog-locomo-"))
    state = up(root, progress=log, model_env=env)
    try:
        result = asyncio.run(evaluate(state, plan, args))
    finally:
        if not args.keep:
            down(root, progress=log)
    rows, posted = result["rows"], result.pop("posted")
    if args.keep:
        (root / POSTED).write_text(json.dumps(posted))
        log(f"the stack stays up in {root}; stop it with infra.stack.down")
    result = {
        "benchmark": "locomo",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "conversations": [s["sample_id"] for s in samples],
        "left_out_incomplete": sum(left_out for _, _, left_out in asked),
        "baselines_s": round(baselines_s, 1),
        **report(result, args),
    }
    if args.hits:
        args.hits.write_text(
            "".join(
                json.dumps({k: r[k] for k in ("sample", "category", "question", "evidence", "top100")}) + "\n"
                for r in rows
            )
        )
    text = json.dumps(result, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    print(text_table(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
