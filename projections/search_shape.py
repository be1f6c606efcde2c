"""A message search as asked (MessageSearch), the parts its statement has (Shape), and the statement's
bound values. Statements are built and cached per shape (message_search.py); the path a search takes
through them is chosen in search_path.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from projections import message_ranking
from projections.message_ranking import asks_when, depth
from projections.schema import ACTIVE_EMBEDDING_MODEL
from projections.time_expressions import Period


@dataclass(frozen=True)
class MessageSearch:
    workspace_id: str
    query: str
    vector: Sequence[float] | None
    session_ids: Sequence[str] = ()
    author_ids: Sequence[str] = ()
    perspective_id: str = ""
    after: datetime | None = None
    before: datetime | None = None
    # the store as it stood then: only messages sent before it and recorded by then (message_reads.as_of_bound)
    as_of: datetime | None = None
    limit: int = 10
    include_adjacent: bool = False
    zone: tzinfo = UTC  # the asker's: the days, months and years its query's time words name
    # the asker sees less than the workspace (a peer's or a session's token): its terms take no workspace
    # statistics, which would tell it what the sessions it never joined hold (lexical_terms.query_terms)
    narrow: bool = False


@dataclass(frozen=True)
class Shape:
    """Which parts a search has. Statements are built once per shape (building one costs more CPU than
    running it) and take every value as a bound parameter but the row counts (message_search._count)."""

    vector: bool
    text: bool
    sessions: bool = False
    authors: bool = False
    after: bool = False
    before: bool = False
    as_of: bool = False
    perspective: bool = False
    periods: bool = False
    exact: bool = False  # the semantic list compares every message of the sessions (search_path)
    when: bool = False  # the query asks when (message_ranking step 8)
    narrow: bool = False  # as MessageSearch.narrow

    @property
    def confined(self) -> bool:
        """Whether the search is confined to sessions: the observer's, or the listed ones."""
        return self.perspective or self.sessions

    @classmethod
    def of(cls, s: MessageSearch, named_periods: Sequence[Period] = ()) -> Shape:
        return cls(
            vector=s.vector is not None,
            text=bool(s.query.strip()),
            sessions=bool(s.session_ids),
            authors=bool(s.author_ids),
            after=s.after is not None,
            before=s.before is not None,
            as_of=s.as_of is not None,
            perspective=bool(s.perspective_id),
            periods=bool(named_periods),
            when=asks_when(s.query),
            narrow=s.narrow,
        )


def params(s: MessageSearch, named_periods: Sequence[Period] = ()) -> dict:
    """The bound values of `s`'s statement."""
    return {
        "starts": [p.start for p in named_periods],
        "ends": [p.end for p in named_periods],
        "workspace_id": s.workspace_id,
        "q": s.query,
        "vector": list(s.vector) if s.vector is not None else None,
        "session_ids": list(s.session_ids),
        "author_ids": list(s.author_ids),
        "after": s.after,
        "before": s.before,
        "as_of": s.as_of,
        "perspective_id": s.perspective_id,
        "n": depth(s.limit),
        # read from the ranking module at each call: one definition of the rule, also for a test that changes it
        "common_docs": message_ranking.COMMON_DOCS,
        "common_share": message_ranking.COMMON_SHARE,
        "limit": s.limit,
        "model": ACTIVE_EMBEDDING_MODEL,
    }
