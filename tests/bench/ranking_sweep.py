#!/usr/bin/env python
"""The message ranking's constants changed one variant at a time, on LoCoMo kept loaded: recall of each.

    .venv/bin/python tests/bench/locomo.py --data ../shared/data/locomo/locomo8.json --no-context --keep DIR
    .venv/bin/python tests/bench/ranking_sweep.py --dir DIR "" SESSION_WEIGHT=0.5 "AUTHOR_BOOST=2,TIME_BOOST=1" \
        [--out tests/bench/results/ranking-sweep.json]

Each variant is a comma-separated list of NAME=VALUE over the constants the search statement is built
from (message_ranking's weights and boosts, lexical_terms' BM25_K1 and BM25_B); "" is the recipe as it
stands. The search runs in this process (projections.message_search, the statement the API runs, rebuilt
for each variant) against the kept stack's Postgres, with each question embedded once by the stack's model
as the API embeds it (`search_text`). Recall@k as locomo.py counts it: the share of a question's evidence
turns in the top k (k 5, 10, 25), averaged per category and over 1-4, for conv-26 and for the rest. The
recipe's row reproduces locomo.py's SearchMessages figures on the same stack.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy.ext.asyncio import AsyncConnection  # noqa: E402

from infra.stack import up  # noqa: E402
from projections import lexical_terms, message_ranking, message_search  # noqa: E402
from projections.db import async_engine  # noqa: E402
from projections.search_shape import MessageSearch  # noqa: E402
from projections.settings import DatabaseSettings  # noqa: E402
from services.llm.embeddings import LocalOnnxEmbedder  # noqa: E402
from tests.bench.locomo import ALL, CATEGORIES, KS, POSTED, group_of, log  # noqa: E402
from tests.bench.locomo import recall as locomo_recall  # noqa: E402

# where the statement reads its constants from: each module that holds a name gets the variant's value
MODULES = (message_search, lexical_terms, message_ranking)


def parsed(variant: str) -> dict[str, float]:
    """NAME=VALUE pairs; a name no module holds is an error (a typo would otherwise measure the recipe)."""
    out = {}
    for part in filter(None, (p.strip() for p in variant.split(","))):
        name, _, value = part.partition("=")
        if not any(hasattr(m, name) for m in MODULES):
            raise SystemExit(f"no ranking constant is called {name!r}")
        out[name] = float(value)
    return out


def _clear_statements() -> None:
    for module in MODULES:
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


@contextmanager
def changed(values: dict[str, float]) -> Iterator[None]:
    """The constants set to `values` (each cast to its current type), the cached statements rebuilt."""
    saved = [(m, name, getattr(m, name)) for name in values for m in MODULES if hasattr(m, name)]
    for module, name, old in saved:
        setattr(module, name, type(old)(values[name]))
    _clear_statements()
    try:
        yield
    finally:
        for module, name, old in saved:
            setattr(module, name, old)
        _clear_statements()


async def query_vectors(conn: AsyncConnection, posted: list[dict]) -> dict[tuple[str, str], list[float]]:
    """Each question's vector, as the API embeds a search: the peers it names taken out (search_text)."""
    embedder, out = LocalOnnxEmbedder(), {}
    for conv in posted:
        for q in conv["questions"]:
            text = await message_search.search_text(conn, conv["ws"], q["question"])
            out[conv["ws"], q["question"]] = embedder.embed_sync([text])[0]
    return out


async def recall(conn: AsyncConnection, posted: list[dict], vectors: dict) -> dict:
    """{group: {category: [recall@k for k in KS]}}, group conv-26 or rest, category a name or ALL."""
    sums: dict = defaultdict(lambda: [0.0] * len(KS))
    counts: dict = defaultdict(int)
    for conv in posted:
        group = group_of(conv["ws"])
        for q in conv["questions"]:
            search = MessageSearch(conv["ws"], q["question"], vectors[conv["ws"], q["question"]], limit=max(KS))
            ranked = [
                conv["dia_of"].get(r["message_id"], "") for r in await message_search.search_messages(conn, search)
            ]
            for cat in (CATEGORIES[q["category"]],) + ((ALL,) if q["category"] != 5 else ()):
                counts[group, cat] += 1
                for i, k in enumerate(KS):
                    sums[group, cat][i] += locomo_recall(ranked, q["evidence"], k)
    out: dict = defaultdict(dict)
    for (group, cat), n in sorted(counts.items()):
        out[group][cat] = [round(s / n, 3) for s in sums[group, cat]]
    return dict(out)


async def sweep(url: str, posted: list[dict], variants: list[str]) -> list[dict]:
    engine = async_engine(DatabaseSettings(url=url))
    rows = []
    try:
        async with engine.connect() as conn:
            vectors = await query_vectors(conn, posted)
            for variant in variants:
                with changed(parsed(variant)):
                    got = await recall(conn, posted, vectors)
                rows.append({"variant": variant or "recipe", "recall": got})
                log(f"{variant or 'recipe'}: " + "; ".join(f"{g} {got[g][ALL]}" for g in sorted(got)))
    finally:
        await engine.dispose()
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", type=Path, required=True, help="a stack kept by locomo.py --keep")
    p.add_argument("variants", nargs="+", help='NAME=VALUE[,NAME=VALUE]; "" for the recipe')
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    for v in args.variants:
        parsed(v)  # every variant checked before the stack starts
    posted = json.loads((args.dir / POSTED).read_text())
    state = up(args.dir, progress=log)
    rows = asyncio.run(sweep(state.database_url, posted, args.variants))
    text = json.dumps({"benchmark": "ranking-sweep", "command": " ".join(sys.argv), "rows": rows}, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
