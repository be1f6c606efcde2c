"""The Postgres tables that project the log. Declared once, created in any schema.

Tables carry no schema name: every connection maps them onto the schema it serves
(`schema_translate_map`), which is how a rebuild fills a fresh schema with the same definitions.
No column is filled from the wall clock, so replaying the same log gives identical rows.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Computed,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP, TSVECTOR

metadata = MetaData()
TS = TIMESTAMP(timezone=True)

workspaces = Table(
    "workspaces",
    metadata,
    Column("workspace_id", Text, primary_key=True),
    Column("metadata", JSONB, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
)

peers = Table(
    "peers",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("peer_id", Text, nullable=False),
    Column("observe_me", Boolean, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
    PrimaryKeyConstraint("workspace_id", "peer_id"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("message_count", BigInteger, nullable=False, server_default="0"),
    Column("event_id", Text, nullable=False, unique=True),
    PrimaryKeyConstraint("workspace_id", "session_id"),
)

# one row per membership period: a peer that leaves and rejoins has two rows
memberships = Table(
    "memberships",
    metadata,
    Column("joined_event_id", Text, primary_key=True),
    Column("workspace_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("peer_id", Text, nullable=False),
    Column("observe_me", Boolean, nullable=True),
    Column("observe_others", Boolean, nullable=False),
    Column("joined_at", TS, nullable=False),
    Column("left_at", TS, nullable=True),
    Column("left_event_id", Text, nullable=True, unique=True),
    Index("memberships_by_session", "workspace_id", "session_id", "peer_id"),
    Index("memberships_by_peer", "workspace_id", "peer_id"),
)

messages = Table(
    "messages",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("peer_id", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("recorded_at", TS, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
    Column("content_tsv", TSVECTOR, Computed("to_tsvector('english', content)", persisted=True)),
    PrimaryKeyConstraint("workspace_id", "message_id"),
    UniqueConstraint("workspace_id", "session_id", "seq", name="messages_session_seq"),
    Index("messages_fts", "content_tsv", postgresql_using="gin"),
)

# next offset to read per partition, written in the same transaction as the rows it produced
projection_offsets = Table(
    "projection_offsets",
    metadata,
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic", "partition"),
)

# records the projector could not read, parked with the reason instead of blocking the log
quarantine = Table(
    "quarantine",
    metadata,
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("key", Text, nullable=True),
    Column("reason", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("logged_at", TS, nullable=True),
    PrimaryKeyConstraint("topic", "partition", "offset"),
)

# a fresh value per schema build: lets a running projector notice that a rebuild swapped schemas
projection_meta = Table(
    "projection_meta",
    metadata,
    Column("singleton", Boolean, primary_key=True, server_default="true"),
    Column("generation", Text, nullable=False),
)

# tables whose rows are the projection proper (compared row for row after a rebuild)
DATA_TABLES = (workspaces, peers, sessions, memberships, messages, projection_offsets, quarantine)
