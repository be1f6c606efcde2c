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
    and_,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP, TSVECTOR

from projections.vectors import Vector
from services.llm.settings import EmbeddingSettings

metadata = MetaData()
TS = TIMESTAMP(timezone=True)
# the vector column follows the embedding setting; changing it means a rebuild into a fresh schema
EMBEDDING_DIMENSIONS = EmbeddingSettings().dimensions
# every vector is stored with the model that made it; reads compare a query only with vectors of the
# model the deployment embeds queries with (the same setting), never across vector spaces: two models of
# one dimension would otherwise mix silently
ACTIVE_EMBEDDING_MODEL = EmbeddingSettings().model
# a vector rides in the covering btree indexes below (messages_session_vectors, observations_by_pair_ranked)
# only while it leaves room for the ids beside it: a btree entry holds at most 2,704 bytes and 384 float32
# take 1,544. A 768-dimension vector alone takes 3,080, so every insert of one failed; beyond 384 the reads
# take the vector from the table instead of the index
VECTOR_IN_INDEXES = EMBEDDING_DIMENSIONS <= 384
_INDEXED_VECTOR = ["embedding"] if VECTOR_IN_INDEXES else []
# what an entry of the covering indexes leaves for the ids it holds: observations_by_pair_ranked's workspace,
# observer, observed and observation; messages_session_vectors' workspace, session and message. Ids of 512
# characters thrice, a two-character observation id and a 384-dimension vector made a 3,176-byte entry, so the
# rest takes 1,640 of the 2,704 a btree entry holds (1,548 of them the vector). Kept below what that leaves,
# for a longer model or derivation name (services/api/entry_room.py refuses what would not fit)
ENTRY_ID_BYTES = 950 if VECTOR_IN_INDEXES else 2_450

workspaces = Table(
    "workspaces",
    metadata,
    Column("workspace_id", Text, primary_key=True),
    Column("metadata", JSONB, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
)

# the text search configuration of every tsvector and query (lexical_terms reads queries by it)
TEXT_SEARCH_CONFIG = "english"
# how a peer is named in text: its display name (metadata `name`), else its id read as words
PEER_NAME_LEXEMES = (
    f"nullif(tsvector_to_array(to_tsvector('{TEXT_SEARCH_CONFIG}', "
    "coalesce(nullif(metadata->>'name', ''), translate(peer_id, '_-', '  ')))), '{}')"
)
FIRST_NAME_LEXEME = "name_lexemes[1]"
HAS_DISPLAY_NAME = "(metadata ->> 'name') <> ''"
# a message's indexed text: the author as it is named (MessageAppended.author_name, else the id as
# words), then the content
MESSAGE_TSV = f"to_tsvector('{TEXT_SEARCH_CONFIG}', coalesce(nullif(author_name, ''), replace(peer_id, '_', ' ')) || ' ' || content)"

peers = Table(
    "peers",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("peer_id", Text, nullable=False),
    Column("observe_me", Boolean, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
    # the lexemes of the peer's name (PEER_NAME_LEXEMES: "Ann_Lee": ann, lee), NULL when it stems to
    # nothing: a search finds the peers its query names (lexical_terms.named_peers) through the two
    # indexes below, where computing them for every peer of the workspace cost 16-21 ms a lookup, twice
    # a search, among 20,000 peers
    Column("name_lexemes", ARRAY(Text), Computed(PEER_NAME_LEXEMES, persisted=True)),
    PrimaryKeyConstraint("workspace_id", "peer_id"),
    # named by id, every word of it: a peer's first lexeme is then among the query's, one probe per query
    # lexeme. A GIN index over every lexeme answered "the user" with each of 20,000 "user_N" peers
    Index("peers_by_first_lexeme", "workspace_id", text(f"({FIRST_NAME_LEXEME})")),
    # named by display name, any word of it: the display-named peers only, each inserted at once
    # (fastupdate off): every search read a GIN pending list whole, 2 ms among 20,000 new peers, until a
    # vacuum merged it
    Index(
        "peers_by_display_name",
        "name_lexemes",
        postgresql_using="gin",
        postgresql_where=text(HAS_DISPLAY_NAME),
        postgresql_with={"fastupdate": "off"},
    ),
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
    Column("observe_others", Boolean, nullable=True),  # NULL: the member did not say (MemberJoined v2)
    Column("joined_at", TS, nullable=False),
    Column("left_at", TS, nullable=True),
    Column("left_event_id", Text, nullable=True, unique=True),
    # visibility in log order, the router's rule (message_reads.seen_while_member): the session's last message
    # seq when the join (the leave) was applied. Joins, leaves and messages of a session share one
    # partition, applied in log order; wall-clock times from several API processes need not agree with it
    Column("joined_after_seq", BigInteger, nullable=False),
    Column("left_after_seq", BigInteger, nullable=True),
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
    # the author's name is part of what a lexical search matches: questions name people ("What did Ann
    # buy?"); underscores split, so a peer id "Ann_Lee" matches "Ann" and "Lee" (MESSAGE_TSV)
    Column("content_tsv", TSVECTOR, Computed(MESSAGE_TSV, persisted=True)),
    # from MessagesEmbedded; the latest embedding event (by id, UUIDv7 = time order) wins
    Column("embedding", Vector(EMBEDDING_DIMENSIONS), nullable=True),
    Column("embedding_model", Text, nullable=True),
    Column("embedding_event_id", Text, nullable=True),
    # MessageAppended.author_name, NULL when none; last, where an older schema gets it (db._upgrade_messages)
    Column("author_name", Text, nullable=True),
    PrimaryKeyConstraint("workspace_id", "message_id"),
    UniqueConstraint("workspace_id", "session_id", "seq", name="messages_session_seq"),
    Index(
        "messages_embedding", "embedding", postgresql_using="hnsw", postgresql_ops={"embedding": "vector_cosine_ops"}
    ),
    Index("messages_by_peer", "workspace_id", "peer_id", "created_at"),
    # a session's vectors side by side, for a search confined to few sessions that compares every one
    # of their messages (search_path.EXACT_SCAN_FACTOR): an index-only scan reads them five to a page
    # in session order, where the table holds each in a ~2 kB row among other sessions' rows. Read
    # bench, 3,800 messages under the perspective: 0.10 instead of 0.34 ms per session scanned
    Index(
        "messages_session_vectors",
        "workspace_id",
        "session_id",
        postgresql_include=["seq", "message_id", "embedding_model", *_INDEXED_VECTOR],
        # kept through a rebuild's replay, not built after it: an entry past a btree's 2,704 bytes must be
        # refused at its event, as the live projector refuses it (then parked), not when the index is built
        # after the replay took the row (the rebuild failed there, and at every try after)
    ),
)

# CloneSession's copies: where each was first sent (MessageAppended.origin), so a copy of a copy names it too
message_origins = Table(
    "message_origins",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("origin_workspace_id", Text, nullable=False),
    Column("origin_session_id", Text, nullable=False),
    Column("origin_message_id", Text, nullable=False),
    PrimaryKeyConstraint("workspace_id", "message_id"),
)

# what lexical search scans: each message's `content_tsv` and the columns the search filters on, copied
# by the projector when it inserts the message. Not the messages table itself: its rows carry the
# embedding (1.5 of their ~1.7 kB), so a query word held by 8,000 of 50,000 messages meant reading
# 6,200 pages there and ~1,000 here, three times the time (tests/bench/README.md)
message_terms = Table(
    "message_terms",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("peer_id", Text, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("content_tsv", TSVECTOR, nullable=False),
    PrimaryKeyConstraint("workspace_id", "message_id"),
    Index("message_terms_fts", "content_tsv", postgresql_using="gin"),
    # a search under a perspective whose sessions hold few messages ANDs this bitmap with the full-text
    # one before reading rows: an observer's 268 of a query's 3,345 matches read, not all of them
    # (message_search.lexical; 2.75 -> 1.2 ms for that list, tests/bench/README.md "Stop 46")
    Index("message_terms_by_session", "workspace_id", "session_id", info={"deferred": True}),
)

# per workspace, how many messages hold each lexeme of `content_tsv` (its document frequency), for the
# inverse document frequency of lexical search; the row with lexeme '' holds the workspace's totals:
# docs = messages, lexemes = the sum of their distinct-lexeme counts (for the mean length). Kept by the
# projector in the transaction that inserts the messages, so it always matches them.
message_lexicon = Table(
    "message_lexicon",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("lexeme", Text, nullable=False),
    Column("docs", BigInteger, nullable=False),
    Column("lexemes", BigInteger, nullable=False),
    PrimaryKeyConstraint("workspace_id", "lexeme"),
)

# embeddings whose message is not projected yet: the projector reads the embeddings topic and the
# sessions topic independently, so a MessagesEmbedded may arrive first; MessageAppended takes it from here
pending_message_embeddings = Table(
    "pending_message_embeddings",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("embedding", Vector(EMBEDDING_DIMENSIONS), nullable=False),
    Column("embedding_model", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    PrimaryKeyConstraint("workspace_id", "message_id"),
)

# what each pair perceived: the deriver's input, for processing status
perceptions = Table(
    "perceptions",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("observer_id", Text, nullable=False),
    Column("observed_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("perceived_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
    PrimaryKeyConstraint("workspace_id", "observer_id", "observed_id", "message_id"),
    Index("perceptions_by_session", "workspace_id", "session_id"),
)

observations = Table(
    "observations",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("observation_id", Text, nullable=False),
    Column("observer_id", Text, nullable=False),
    Column("observed_id", Text, nullable=False),
    Column("level", Text, nullable=False),
    Column("content", Text, nullable=False),
    # normalised content, for exact-duplicate lookups (indexed by its md5: see observations_by_key_hash)
    Column("content_key", Text, nullable=False),
    Column("session_id", Text, nullable=True),
    Column("confidence", Text, nullable=True),
    Column("pattern_type", Text, nullable=True),
    Column("embedding", Vector(EMBEDDING_DIMENSIONS), nullable=True),
    Column("embedding_model", Text, nullable=False),
    Column("times_derived", Integer, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("batch_id", Text, nullable=True),
    Column("dream_id", Text, nullable=True),
    Column("derivation", Text, nullable=False, server_default=""),  # "" is the original; see derivations.py
    Column("premise_superseded_at", TS, nullable=True),  # a premise in its closure stopped being current
    Column("superseded_by", Text, nullable=True),
    Column("superseded_at", TS, nullable=True),
    Column("deleted_at", TS, nullable=True),
    Column("delete_reason", Text, nullable=True),
    Column("event_id", Text, nullable=False, unique=True),
    PrimaryKeyConstraint("workspace_id", "observation_id"),
    Index("observations_by_pair", "workspace_id", "observer_id", "observed_id", "created_at"),
    # what a working set ranks a pair's store by, and filters it with, beside the vector: an index-only
    # scan of the pair, instead of its ~1,000 rows of ~2 kB scattered over the table
    # (observation_reads._working_set_statement)
    Index(
        "observations_by_pair_ranked",
        "workspace_id",
        "observer_id",
        "observed_id",
        postgresql_include=[
            "derivation",
            "superseded_by",
            "deleted_at",
            "created_at",
            "times_derived",
            "observation_id",
            "embedding_model",
            *_INDEXED_VECTOR,
        ],
        # kept through a rebuild's replay, like messages_session_vectors (which says why)
    ),
)
# No HNSW or full-text index over observations: every read of them is one pair's (ObservationFilter), and
# the pair's vectors are compared exactly from observations_by_pair_ranked (an HNSW walk filtered to a pair
# afterwards returns fewer than asked); an HNSW index was kept up to date at every insert and rebuilt after
# every replay for no read

# a btree entry holds at most 2,704 bytes and the normalised content may be 8,000 (2,000 four-byte
# characters): index its md5, and compare both the md5 and the value (content_key_matches)
Index(
    "observations_by_key_hash",
    observations.c.workspace_id,
    observations.c.observer_id,
    observations.c.observed_id,
    func.md5(observations.c.content_key),
)
# a peer's display name as SQL (NULL or '' when it has none): what messages are stamped with, what names it
PEER_DISPLAY_NAME = peers.c.metadata["name"].astext

# indexes an older schema has that this one replaced; create_schema drops them
RETIRED_INDEXES = (
    "observations_by_key",
    "messages_fts",
    "observations_embedding",
    "observations_fts",
    "peers_by_name",  # stop 41's GIN index over every peer's lexemes (see peers_by_first_lexeme)
)
# columns an older schema has that this one dropped, by table; create_schema drops them (the full-text
# vector of every observation, computed at each insert, which no read used)
RETIRED_COLUMNS = {"observations": ("content_tsv",)}


def content_key_matches(key):
    """The condition "content_key = key" in a form observations_by_key_hash serves."""
    return and_(func.md5(observations.c.content_key) == func.md5(key), observations.c.content_key == key)


# the message and verbatim span behind an observation; reinforcements add sources too
observation_sources = Table(
    "observation_sources",
    metadata,
    Column("event_id", Text, nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("workspace_id", Text, nullable=False),
    Column("observation_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("span", Text, nullable=False),
    PrimaryKeyConstraint("event_id", "ordinal"),
    Index("sources_by_observation", "workspace_id", "observation_id"),
)

premises = Table(
    "premises",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("observation_id", Text, nullable=False),
    Column("premise_id", Text, nullable=False),
    PrimaryKeyConstraint("workspace_id", "observation_id", "premise_id"),
    Index("premises_by_premise", "workspace_id", "premise_id"),
)

rejected_observations = Table(
    "rejected_observations",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("rejection_id", Text, nullable=False),
    Column("observer_id", Text, nullable=False),
    Column("observed_id", Text, nullable=False),
    Column("level", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("sources", JSONB, nullable=False),
    Column("premise_ids", ARRAY(Text), nullable=False, server_default="{}"),
    Column("derivation", Text, nullable=False, server_default=""),
    Column("batch_id", Text, nullable=True),
    Column("dream_id", Text, nullable=True),
    Column("rejected_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
    PrimaryKeyConstraint("workspace_id", "rejection_id"),
)

# every event that touched an observation, for its audit history (see observation_handlers.py)
observation_events = Table(
    "observation_events",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("observation_id", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("occurred_at", TS, nullable=False),
    Column("producer", JSONB, nullable=False),
    Column("causation_id", Text, nullable=True),
    Column("detail", JSONB, nullable=False),
    PrimaryKeyConstraint("workspace_id", "observation_id", "event_id"),
)

# one row per derivation batch: started → done | dead_lettered
derivation_batches = Table(
    "derivation_batches",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("batch_id", Text, nullable=False),
    Column("observer_id", Text, nullable=False),
    Column("observed_id", Text, nullable=False),
    Column("message_ids", ARRAY(Text), nullable=False),
    Column("derivation", Text, nullable=False, server_default=""),
    Column("state", Text, nullable=False),
    Column("added", Integer, nullable=True),
    Column("reinforced", Integer, nullable=True),
    Column("superseded", Integer, nullable=True),
    Column("rejected", Integer, nullable=True),
    Column("model", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("started_at", TS, nullable=True),
    Column("finished_at", TS, nullable=True),
    PrimaryKeyConstraint("workspace_id", "batch_id"),
    Index("batches_by_pair", "workspace_id", "observer_id", "observed_id"),
)

# one row per dream a pair was sent into, from its request to its end
dreams = Table(
    "dreams",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("dream_id", Text, nullable=False),
    Column("observer_id", Text, nullable=False),
    Column("observed_id", Text, nullable=False),
    Column("reason", Text, nullable=False),  # threshold | forced
    Column("new_explicit", Integer, nullable=False),
    Column("state", Text, nullable=False),  # requested | started | completed | failed
    Column("edits", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Column("requested_at", TS, nullable=False),
    Column("started_at", TS, nullable=True),
    Column("finished_at", TS, nullable=True),
    PrimaryKeyConstraint("workspace_id", "dream_id"),
    Index("dreams_by_pair", "workspace_id", "observer_id", "observed_id", "requested_at"),
)

# every version of every card (latest by event order), so a card can be read as it stood
peer_cards = Table(
    "peer_cards",
    metadata,
    Column("event_id", Text, primary_key=True),
    Column("workspace_id", Text, nullable=False),
    Column("observer_id", Text, nullable=False),
    Column("observed_id", Text, nullable=False),
    Column("entries", JSONB, nullable=False),
    Column("updated_at", TS, nullable=False),
    # who set it, and the dream that did (the event's cause), for an auditor: NULL in rows from before them
    Column("producer", JSONB, nullable=True),
    Column("dream_id", Text, nullable=True),
    Index("peer_cards_by_pair", "workspace_id", "observer_id", "observed_id", "updated_at"),
)

summaries = Table(
    "summaries",
    metadata,
    Column("event_id", Text, primary_key=True),
    Column("workspace_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("last_message_id", Text, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("messages_covered", Integer, nullable=False),
    Column("token_count", Integer, nullable=False),
    Column("model", Text, nullable=False),
    Column("created_at", TS, nullable=False),
    Index("summaries_by_session", "workspace_id", "session_id", "kind", "last_seq"),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("event_id", Text, primary_key=True),
    Column("workspace_id", Text, nullable=False),
    Column("kind", Text, nullable=False),  # derivation | summary
    Column("observer_id", Text, nullable=True),
    Column("observed_id", Text, nullable=True),
    Column("session_id", Text, nullable=True),
    Column("batch_id", Text, nullable=True),
    Column("message_ids", ARRAY(Text), nullable=False),
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("failed_at", TS, nullable=False),
    # a summary's: short | long (NULL in rows projected before it was kept: taken as either)
    Column("summary_kind", Text, nullable=True),
    # a summary's whose messages fell out of the pending state: never resolved by a later summary
    Column("summary_dropped", Boolean, nullable=False, server_default=text("false")),
)

# every DerivationPromoted, numbered per pair in log order: the latest is the pair's current derivation,
# the latest promoted by a time is the one an as-of read follows; a pair without a row reads "" (the original)
derivation_promotions = Table(
    "derivation_promotions",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("observer_id", Text, nullable=False),
    Column("observed_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("derivation", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("promoted_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
    PrimaryKeyConstraint("workspace_id", "observer_id", "observed_id", "seq"),
)

# every configuration level ever set (issue 10 §3), a history: a read takes the latest row at or before a
# time (as_of), and a message's row holds its own level and the workspace level stamped on it. A session
# row's after_seq is the session's last message seq when it was projected (its log position, as in
# memberships); a message row's is the message's seq. workspace rows have session_id '' and message_id ''
configurations = Table(
    "configurations",
    metadata,
    Column("event_id", Text, primary_key=True),
    Column("workspace_id", Text, nullable=False),
    Column("level", Text, nullable=False),  # workspace | session | message
    Column("session_id", Text, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("configuration", JSONB, nullable=True),
    Column("workspace_configuration", JSONB, nullable=True),  # message rows: the stamp
    Column("after_seq", BigInteger, nullable=True),
    Column("recorded_at", TS, nullable=False),
    Index("configurations_by_scope", "workspace_id", "level", "session_id", "message_id", "recorded_at"),
)

# scopes (issue 13 §1): named groups of sessions that bound recall; their sessions are in scope_changes
# (history) and scope_members (now)
scopes = Table(
    "scopes",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("scope_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("event_id", Text, nullable=False, unique=True),
    PrimaryKeyConstraint("workspace_id", "scope_id"),
)

# every session put into or taken out of a scope, a history: a read as of a time takes each session's latest
# change recorded by then. `seq` numbers a scope's change events in log order (the directory partition
# holds a workspace's scope events in order), since clocks of several API processes need not agree with it
scope_changes = Table(
    "scope_changes",
    metadata,
    Column("event_id", Text, nullable=False),
    Column("workspace_id", Text, nullable=False),
    Column("scope_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("added", Boolean, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("recorded_at", TS, nullable=False),
    PrimaryKeyConstraint("event_id", "session_id"),
    Index("scope_changes_by_scope", "workspace_id", "scope_id", "session_id", "seq"),
)

# each scope's sessions now (at most 1,000), kept beside scope_changes by the same handlers: a read of the
# present costs what the scope holds, not every add and remove it ever had (the history serves as_of reads)
scope_members = Table(
    "scope_members",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("scope_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    PrimaryKeyConstraint("workspace_id", "scope_id", "session_id"),
)

# the first keyed client write per (workspace, scope, key) and the reply it got: the ids it created, in
# request order, and the log positions it reached (projections/idempotency.py)
idempotent_requests = Table(
    "idempotent_requests",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("scope", Text, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("request_id", Text, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("ids", ARRAY(Text), nullable=False),
    Column("token", Text, nullable=False),
    Column("recorded_at", TS, nullable=False),
    PrimaryKeyConstraint("workspace_id", "scope", "idempotency_key"),
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
    # made by code that stamps what clients wrote PAIR_WIDE (db._upgrade_client_observations)
    Column("client_writes_pair_wide", Boolean, nullable=False, server_default="true"),
)

# tables whose rows are the projection proper (compared row for row after a rebuild);
# pending_message_embeddings is left out: what waits there depends on the order topics were read in
DATA_TABLES = (
    workspaces,
    peers,
    sessions,
    memberships,
    messages,
    message_origins,
    message_terms,
    message_lexicon,
    perceptions,
    observations,
    observation_sources,
    premises,
    observation_events,
    rejected_observations,
    derivation_batches,
    derivation_promotions,
    dreams,
    peer_cards,
    summaries,
    dead_letters,
    projection_offsets,
    quarantine,
    idempotent_requests,
    configurations,
    scopes,
    scope_changes,
    scope_members,
)
