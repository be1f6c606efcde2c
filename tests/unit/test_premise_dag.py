"""The premise walk behind GetProvenance: breadth first, each node once, and cut only when something is left."""

from __future__ import annotations

import asyncio

import pytest

from projections import audit_reads


def _walk(monkeypatch, edges: dict[str, list[str]], limit: int):
    async def premises_of(conn, workspace_id, ids):
        return {i: edges.get(i, []) for i in ids}

    monkeypatch.setattr(audit_reads, "premises_of", premises_of)
    return asyncio.run(audit_reads.premise_dag(None, "w", "root", limit))


@pytest.mark.parametrize("leaves, truncated", [(3, False), (4, True)])
def test_a_dag_of_exactly_the_limit_is_not_called_cut_and_one_node_more_is(monkeypatch, leaves, truncated):
    edges = {"root": ["a"], "a": [f"leaf{i}" for i in range(leaves)]}
    order, _, cut = _walk(monkeypatch, edges, limit=5)
    assert cut is truncated and order[:2] == ["root", "a"] and len(order) == min(5, 2 + leaves)


def test_a_walk_stopped_at_the_limit_whose_last_level_rests_on_more_is_cut(monkeypatch):
    edges = {"root": ["a", "b"], "a": ["deeper"]}
    order, _, cut = _walk(monkeypatch, edges, limit=3)
    assert order == ["root", "a", "b"] and cut
    order, _, cut = _walk(monkeypatch, {"root": ["a", "b"]}, limit=3)
    assert order == ["root", "a", "b"] and not cut
