"""The lexical half of message search, as SQL parts: the query's lexemes with their BM25 idf (`query_terms`;
without the workspace's statistics for a caller who sees less than the workspace), a row's BM25 score
(`bm25`), the peers a query names (`named_peers`), and whether a turn is placed in time (`placed_in_time`).
message_search.py composes them into its one statement; message_ranking.py defines the rule."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Float, Text, and_, any_, bindparam, cast, false, func, literal, literal_column, or_, select, text
from sqlalchemy.dialects.postgresql import TSQUERY

from projections.message_ranking import BM25_B, BM25_K1, NAME_PART_CHARS, QUERY_TERMS, TIME_LEXEMES
from projections.schema import (
    FIRST_NAME_LEXEME,
    HAS_DISPLAY_NAME,
    PEER_DISPLAY_NAME,
    TEXT_SEARCH_CONFIG,
    message_lexicon,
    peers,
)


def quoted_lexeme(lexeme):
    """`lexeme` in tsquery syntax as one quoted term: read exactly, never as an operator (a parser would
    read the lexeme '-5' as 'not 5')."""
    return literal("'").concat(func.replace(func.replace(lexeme, "\\", "\\\\"), "'", "''")).concat("'")


# the mean length BM25 assumes when it may not read the workspace's: LoCoMo's turns hold 12.7 distinct
# lexemes on average, their author's name included (11.1-14.8 by conversation)
OWN_MEAN_LENGTH = 12.0


@lru_cache(maxsize=2)
def query_terms(narrow: bool = False):
    """The query's terms, at most QUERY_TERMS of them, each with its BM25 idf and as a tsquery; and the
    corpus' totals. `narrow`: the caller sees less than the workspace, whose statistics would tell it what
    the rest holds (`_own_terms`)."""
    return _own_terms() if narrow else _workspace_terms()


def _workspace_terms():
    """The query's lexemes found in the workspace, the rarest, with the workspace's idf and mean length."""
    lx = message_lexicon.c
    totals = (
        select(lx.docs.label("n"), lx.lexemes.cast(Float).op("/")(lx.docs).label("mean_length"))
        .where(lx.workspace_id == bindparam("workspace_id"), lx.lexeme == "")
        .cte("corpus")
    )
    words = _words()
    idf = func.ln(1 + (totals.c.n - lx.docs + 0.5) / (lx.docs + 0.5))
    terms = (
        select(
            lx.lexeme,
            idf.label("idf"),
            cast(quoted_lexeme(lx.lexeme), TSQUERY).label("q"),
            (
                lx.docs > func.greatest(bindparam("common_docs"), bindparam("common_share", type_=Float) * totals.c.n)
            ).label("common"),
        )
        .select_from(words)
        .join(message_lexicon, and_(lx.workspace_id == bindparam("workspace_id"), lx.lexeme == words.c.lexeme))
        .join(totals, literal(True))
        .where(_not_named(words.c.lexeme))
        .order_by(lx.docs, lx.lexeme)
        .limit(QUERY_TERMS)
        .cte("terms")
    )
    return terms, totals


def _own_terms():
    """The query's own lexemes, the first in lexeme order, each of idf 1 and none common, and a fixed mean
    length: nothing read from the workspace's messages. Its document frequencies would rank a caller's own
    messages by what the sessions it never joined hold (a term they hold weighs less), and a term they
    lack would drop out: its scores would say whether a word is written anywhere in the workspace."""
    words = _words()
    totals = select(literal(OWN_MEAN_LENGTH, Float).label("mean_length")).cte("corpus")
    terms = (
        select(
            words.c.lexeme,
            literal(1.0, Float).label("idf"),
            cast(quoted_lexeme(words.c.lexeme), TSQUERY).label("q"),
            false().label("common"),
        )
        .where(_not_named(words.c.lexeme))
        .order_by(words.c.lexeme)
        .limit(QUERY_TERMS)
        .cte("terms")
    )
    return terms, totals


def _words():
    return select(func.unnest(_lexemes(bindparam("q", type_=Text))).label("lexeme")).subquery("words")


def _not_named(lexeme):
    # a lexeme too short to name anyone (NAME_PART_CHARS) stays a term
    return or_(lexeme.not_in(_named_lexemes()), func.length(lexeme) < NAME_PART_CHARS)


def bm25(t, terms, totals):
    """BM25 with binary term frequency of row `t` (of messages or message_terms) for the query's terms
    (0 when none match). One `@@` per term: three times faster than matching against the row's lexemes
    as an array, which is built anew for every row."""
    matched = (
        select(func.coalesce(func.sum(terms.c.idf), 0.0)).where(t.c.content_tsv.op("@@")(terms.c.q)).scalar_subquery()
    )
    length = func.length(t.c.content_tsv).cast(Float)
    mean_length = select(totals.c.mean_length).scalar_subquery()
    norm = 1 + BM25_K1 * (1 - BM25_B + BM25_B * length / mean_length)
    return matched * (BM25_K1 + 1) / norm


def _lexemes(text):
    """The lexemes of `text` as the indexed texts have theirs (schema.MESSAGE_TSV, PEER_NAME_LEXEMES)."""
    return func.tsvector_to_array(func.to_tsvector(literal_column(f"'{TEXT_SEARCH_CONFIG}'::regconfig"), text))


def _named_lexemes():
    """The lexemes of the peers the query names: not query terms, because those peers' messages are
    already lifted by AUTHOR_BOOST, and matching the name again in the text ranked every short turn by
    or to that peer ("Bye Ann!") above the turns that answer."""
    named = named_peers()
    return select(func.unnest(named.c.name_lexemes)).scalar_subquery()


@lru_cache(maxsize=1)
def named_peers():
    """The workspace's peers the query names (`peers.name_lexemes`): a display name (metadata `name`) by
    any of its words of NAME_PART_CHARS or more, as people say "Maria" of Maria Lopez, but not "x" of
    "[x] Carol"; an id by every word of it, read with `_` and `-` as spaces ("Ann_Lee"), since an id's
    words may be a kind ("user_42") that names no one. A name that stems to nothing (all stop words)
    names no one. Two indexes find them (schema.peers): the cost follows the peers whose first lexeme,
    or a word of whose display name, is in the query, not the workspace's peers."""
    pr = peers.c
    said = _lexemes(bindparam("q", type_=Text))
    # the index expressions as written there, so a generic plan uses them too
    by_id = and_(literal_column(FIRST_NAME_LEXEME) == any_(said), pr.name_lexemes.op("<@")(said))
    by_display_name = and_(text(HAS_DISPLAY_NAME), pr.name_lexemes.op("&&")(_name_words(said)))
    return (
        select(pr.peer_id, PEER_DISPLAY_NAME.label("name"), pr.name_lexemes)
        .where(pr.workspace_id == bindparam("workspace_id"), or_(by_id, by_display_name))
        .cte("named")
    )


def _name_words(lexemes):
    """The array `lexemes` without those shorter than NAME_PART_CHARS: a display name's short lexemes then
    meet none of the query's, as if left out of it, and the index on the names' lexemes still serves."""
    lexeme = func.unnest(lexemes).column_valued("l")
    return func.array(select(lexeme).where(func.length(lexeme) >= NAME_PART_CHARS).scalar_subquery())


def placed_in_time(tsv):
    """Whether a message's indexed text holds one of TIME_LEXEMES (message_ranking step 8)."""
    return tsv.op("@@")(cast(literal(" | ".join(sorted(TIME_LEXEMES))), TSQUERY))
