"""How hybrid message search ranks: pgvector cosine and BM25-weighted full text, fused by score, neighbours
heard. This module is the pure definition; message_search.py computes the same in one SQL statement.

How a search ranks, and what each step was worth on LoCoMo (tests/bench/README.md has the table):
1. Two candidate lists, each with every filter applied before ranking, so a filtered search is as deep
   as an unfiltered one:
   - semantic: the n nearest messages by cosine similarity. Messages are embedded with their author,
     date and the turn they answer (services/embedder/policy.py), so a question that names a person or
     a time can match. The scan runs with `hnsw.iterative_scan = relaxed_order` (pgvector ≥ 0.8): when
     filters drop most of what the graph walk finds, it continues instead of returning too few rows;
     relaxed order is why candidates are ranked by their exact score afterwards.
   - lexical: any of the question's content words (`to_tsvector` drops stop and question words and
     stems the rest; the names of peers it names are left to step 4), ranked by BM25 with binary term frequency (turns are short: counting repeats
     changed nothing measurable): Σ idf(term) · (k1 + 1) / (1 + k1 · (1 − b + b · length / mean length)).
     Document frequencies come from `message_lexicon`, kept by the projector. The author's name is
     part of the indexed text. The list scans `message_terms`, a narrow copy of each message's indexed
     text and filter columns.
     Common terms (held by more than COMMON_DOCS messages and COMMON_SHARE of the workspace's) score
     but do not select: the list holds the messages with any rare term, or, when every term is common,
     those with all of them (`lexical_match`). A word held by thousands of messages otherwise made the
     list read every one of them to rank a few (14 ms of the bench's 50,000 messages for one query;
     1 ms this way), and such a word adds little to a message's rank (its idf is low). Workspaces below
     COMMON_DOCS messages, such as every LoCoMo conversation, rank as if there were no such rule. On
     LoCoMo with COMMON_DOCS at 0 (the share alone decides), @10 / @25 went from 0.793 / 0.875 to
     0.790 / 0.876 on seven conversations and from 0.833 / 0.914 to 0.822 / 0.910 on conv-26; a fixed
     12 messages (about 2 % of a conversation) lost 0.013 @10 on the seven, 6 (about 1 %) lost 0.023.
     Only the query's QUERY_TERMS rarest terms (fewest messages; then in lexeme order) count: the list
     matches each term against each row, so a pasted page of 1,100 distinct words took 2-3 s on 20,000
     messages. A question has far fewer (LoCoMo's hold at most 24 words), and the rarest say the most.
2. Fusion by score, not by rank: each list's scores become z-scores against that list's own candidates,
   and a message's fused score is the sum of its two z-scores, each computed exactly even when the
   message made only one list. Rank fusion (RRF) throws away how much better the best candidate is.
   A list whose candidates all score alike (a word only one message holds) has no z-scores: there a
   message scoring at least as they do gets 1 and any other 0, so a lone exact match still counts
   (with 0 for all, it ranked below unrelated turns the semantic list preferred).
3. Neighbours: an answer often spans two turns (a question, then its reply). A message's score gains
   NEIGHBOUR_WEIGHT × the better fused score of its adjacent turns in the same session (those the
   filters let through), so a turn next to a strong match rises.
4. Named authors: a question about a peer is mostly answered by what that peer said. When the query
   names a peer of the workspace (a word of its display name, metadata `name`, of NAME_PART_CHARS
   or more, or else every word of its id with `_` and `-` read as spaces: lexical_terms.named_peers),
   that peer's messages gain AUTHOR_BOOST: three standard deviations of either list, so they lead
   unless another peer's message matches exceptionally. When every author is named, nothing moves. The name's words (of
   NAME_PART_CHARS or more) are then neither full-text terms nor part of the embedded query
   (`search_text`, `without_names`).
5. Named times: "in August 2022", "on 9 May", "last week" (time_expressions.py) lift the messages sent
   in those periods by TIME_BOOST, resolved against the search's upper bound, or now. A named day or
   month reaches REPORT_LAG_DAYS further: "I went there yesterday" is said after the day it names.
6. Short turns: a message of fewer than SHORT_LEXEMES distinct lexemes ("Bye Ann!", "Sounds great,
   see you then") loses SHORT_PENALTY. Such turns rarely hold a fact, and BM25's length normalisation
   ranks them high for any one word they share with the question.
7. The session's lead: a message gains SESSION_WEIGHT × the best topical score (steps 2, 3 and 6:
   what is said, not who says it or when) of any candidate in its session, if above 0. A
   conversation about the question's topic holds more of its answer than one stray turn elsewhere:
   the turns around a strong match, beyond the adjacent ones, rise a little.
8. Questions of time: a question that asks when ("When did …", "What year …", "How long ago …",
   `asks_when`) is mostly answered by a turn that places what it tells in time ("I went there
   yesterday", "last week", "in May": a lexeme of TIME_LEXEMES). For such a question those turns gain
   WHEN_BOOST. On LoCoMo, 75 % of the evidence turns of temporal questions hold such a word, against
   11 % of all turns.
`fused_score` is the definition of steps 2–8; message_search.fused computes the same in SQL (one round
trip on the API's hot path), and an integration test holds the two equal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence, Set
from datetime import datetime, timedelta
from itertools import pairwise

from projections.time_expressions import Period

MIN_DEPTH = 50
# a part of a display name shorter than this names no one (step 4): an initial or a symbol ("J.", "C++",
# "[x]") made every query holding that letter name the peer. 2, not 3, keeps names such as Al, Jo, Li, Wu
NAME_PART_CHARS = 2
NEIGHBOUR_WEIGHT = 0.3  # measured on LoCoMo: 0.15 and 0.5 score within ±0.01 of it
AUTHOR_BOOST = 3.0  # LoCoMo rest @10: 0.723 without, 0.747 / 0.754 / 0.755 at 2 / 3 / 4
TIME_BOOST = 2.0  # LoCoMo rest @10 with the author boost: 0.754 without, 0.760 / 0.766 / 0.768 at 1 / 2 / 3
# LoCoMo rest @10 / @25 with the three below: 0.775 / 0.852; without them (same run) 0.759 / 0.842
SHORT_PENALTY, SHORT_LEXEMES = 1.0, 10  # without: 0.764 / 0.848; 0.5 at 10 lexemes 0.771 / 0.848
REPORT_LAG_DAYS = 7  # without: temporal @25 0.836, with: 0.851
# LoCoMo rest @10 / @25: 0.779 / 0.867 without, 0.793 / 0.875 with (a rerank of the top 100 scored
# 0.791 / 0.875 at 0.15 and 0.794 / 0.874 at 0.5; the mean of a session's best 3 or 5 scored the same)
SESSION_WEIGHT = 0.3
# LoCoMo rest @10 / @25 over the live top 100 (limit 100): 0.798 / 0.878 without, 0.804 / 0.880 at 2,
# 0.807 / 0.880 at 3, 0.809 / 0.880 at 4, 0.807 / 0.879 at 5; temporal @10 0.801 -> 0.850 at 3;
# adversarial @10 unchanged (0.86)
WHEN_BOOST = 3.0
# Postgres's english lexemes of the words that place a turn in time (step 8): relative days, calendar
# units, weekdays and months. Years and "day" added nothing measurable; "may" is also the modal verb.
TIME_LEXEMES = frozenset(
    "yesterday today tonight tomorrow ago recent week weekend month year "
    "monday tuesday wednesday thursday friday saturday sunday "
    "januari februari march april may june juli august septemb octob novemb decemb".split()
)
_ASKS_WHEN = re.compile(
    r"^\W*(?:when|since when|what (?:year|month|date|day|time)|which (?:year|month|day|date)|how long ago"
    r"|how long (?:has|have|had|did|was|were))\b",
    re.IGNORECASE,
)
BM25_K1, BM25_B = 1.2, 0.75
# the most query terms the lexical list weighs, the rarest kept (step 1): a bound on its cost per row that
# no question reaches (LoCoMo's longest has 24 words, stop words included)
QUERY_TERMS = 32
# a term held by more messages than both is common (step 1): it scores, but selects only with the others
COMMON_DOCS, COMMON_SHARE = 1_000, 0.05


def list_stats(list_scores: Sequence[float]) -> tuple[float, float, float]:
    """(mean, population standard deviation, lowest) of one list's candidate scores; for none, zeros and
    an infinite lowest, which no score reaches (`standardised`)."""
    if not list_scores:
        return 0.0, 0.0, math.inf
    mean = sum(list_scores) / len(list_scores)
    return mean, math.sqrt(sum((s - mean) ** 2 for s in list_scores) / len(list_scores)), min(list_scores)


def standardised(score: float | None, stats: tuple[float, float, float]) -> float:
    """`score` as a z-score against its list; a message with no score yet (no embedding) counts as the
    list's lowest candidate. When the candidates all score alike (one candidate, say) there is no
    z-score: a message scoring at least as they do gets 1, any other 0 (step 2)."""
    mean, std, low = stats
    if std > 0:
        return ((low if score is None else score) - mean) / std
    return 1.0 if score is not None and score >= low else 0.0


def fused_score(
    scores: Mapping[str, tuple[float | None, float]],
    lists: tuple[Sequence[float], Sequence[float]],
    neighbours: Mapping[str, Sequence[str]],
    by_named: frozenset[str] = frozenset(),
    in_period: frozenset[str] = frozenset(),
    short: frozenset[str] = frozenset(),
    session_of: Mapping[str, str] | None = None,
    placed: frozenset[str] = frozenset(),
) -> list[tuple[str, float]]:
    """The definition of steps 2–8: `scores` maps each message to its (semantic, lexical) score,
    `lists` holds each list's candidate scores, `neighbours` a message's adjacent turns, `by_named`
    the messages whose author the query names, `in_period` those sent when it names, `short` those of
    fewer than SHORT_LEXEMES lexemes, `session_of` each message's session (step 7 leaves out a message
    not in it), `placed` those placed in time when the query `asks_when` (step 8); best first."""
    stats = (list_stats(lists[0]), list_stats(lists[1]))
    fused = {m: standardised(s, stats[0]) + standardised(x, stats[1]) for m, (s, x) in scores.items()}
    topical = {
        m: f
        + NEIGHBOUR_WEIGHT * max([fused[n] for n in neighbours.get(m, ()) if n in fused], default=0.0)
        - (SHORT_PENALTY if m in short else 0.0)
        for m, f in fused.items()
    }
    session_of = session_of or {}
    lead: dict[str, float] = {}  # the session's best topical score, never below 0: a lift, not a penalty
    for m, score in topical.items():
        if m in session_of:
            lead[session_of[m]] = max(score, lead.get(session_of[m], 0.0))
    out = {
        m: score
        + (AUTHOR_BOOST if m in by_named else 0.0)
        + (TIME_BOOST if m in in_period else 0.0)
        + (WHEN_BOOST if m in placed else 0.0)
        + SESSION_WEIGHT * lead.get(session_of.get(m), 0.0)
        for m, score in topical.items()
    }
    return sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))


def asks_when(query: str) -> bool:
    """Whether `query` asks when something happened (step 8)."""
    return bool(_ASKS_WHEN.search(query))


def placed_in_time(lexemes: Set[str]) -> bool:
    """Whether a message of `lexemes` places what it tells in time (step 8)."""
    return not TIME_LEXEMES.isdisjoint(lexemes)


def common_above(docs: int) -> float:
    """How many of a workspace's `docs` messages a term must exceed to be common (step 1)."""
    return max(COMMON_DOCS, COMMON_SHARE * docs)


def lexical_match(lexemes: Set[str], df: Mapping[str, int], docs: int) -> bool:
    """Whether a message of `lexemes` joins the lexical list of a query whose terms found in a workspace
    of `docs` messages have the document frequencies `df` (step 1): it holds a rare term, or, when every
    term is common, all of them."""
    rare = {t for t, n in df.items() if n <= common_above(docs)}
    return bool(lexemes & rare) if rare else bool(df) and df.keys() <= lexemes


def reported(period: Period) -> Period:
    """A named day or month widened by the REPORT_LAG_DAYS after it: what happened then is often told
    later ("yesterday", "last week"). Longer periods are left as they are. The end stops at the last
    moment a datetime holds: a period named days before it (a search `before` 9999-12-31) is still one."""
    if period.end - period.start > timedelta(days=31):
        return period
    latest = datetime.max.replace(tzinfo=period.end.tzinfo)  # in the end's own zone: no offset to overflow
    return Period(period.start, period.end + min(timedelta(days=REPORT_LAG_DAYS), latest - period.end))


def depth(limit: int) -> int:
    """Candidates taken from each list: four per result up to 25 results, then two more per result.
    Measured on LoCoMo (rest, recall at the limit): at 50 results (GetContext's at 2,000 tokens) 150
    candidates found 0.918 against 0.919 with 200, at 100 results 250 found 0.960 against 0.961 with 400;
    at 25, two per result lost 0.007. GetContext's search under a perspective took a quarter less time."""
    return max(limit * 4, MIN_DEPTH) if limit <= 25 else 2 * limit + 50


def without_names(query: str, names: Sequence[str]) -> str:
    """`query` without those peers' names or ids, whole or in part (and a possessive 's): what is
    embedded for a search. The named peers' messages are lifted by AUTHOR_BOOST already; a name left in
    the query vector drew it towards every turn that addresses or mentions that peer ("Thanks, Ann!").
    A query that is nothing but names stays as it is. One pass over the query's tokens: a pattern of
    every name took seconds on the API's event loop when a query named thousands of peers."""
    tokens = _tokens(query)
    trie = _name_trie(names, [key for _, key, _ in tokens])
    if not trie:
        return query
    kept, at = [], 0
    while at < len(tokens):
        # a name starts a word, not the inside of one ("Ann" in "Annabel"), nor a symbol right after a word
        starts = tokens[at][1] in trie and (at == 0 or not tokens[at - 1][2])
        end = _name_end(tokens, at, trie) if starts else None
        kept.append(" " if end else tokens[at][0])
        at = end or at + 1
    stripped = " ".join("".join(kept).split())
    return stripped if re.search(r"\w", stripped) else query


def name_parts(name: str) -> list[str]:
    """The words of a display name or id as written, as its lexemes come from them: split at anything but a
    letter or digit, `_` included ("C++ (Carol)": C, Carol; "Ann_Lee": Ann, Lee). Not folded: "İ" folds
    to two characters, and a part of one names no one."""
    return [w for w in re.split(r"[\W_]+", name) if w]


# a name and a query are read as the same tokens: a word (letters, digits, `_`), a run of whitespace, or any
# other one character; "(Carol)" is then (, carol, ), and a name matches the query token by token
_TOKEN = re.compile(r"(\w+)|(\s+)|[^\w\s]")
_END = ""  # a trie node's key for "a name ends here": no token is empty


def _tokens(text: str) -> list[tuple[str, str, bool]]:
    """`text` as (token, key, whether it is a word): the key case-folded, token by token (the name "İlker"
    lowered whole gave "i̇lker", which a case-blind pattern missed in the query), any whitespace one space."""
    return [
        (m.group(), " " if m.lastindex == 2 else m.group().casefold(), m.lastindex == 1) for m in _TOKEN.finditer(text)
    ]


def _name_trie(names: Sequence[str], query: Sequence[str]) -> dict:
    """A trie of the token keys of each way `names` are said (whole, by their words, by their parts, each
    of NAME_PART_CHARS or more) that the query's token keys may hold; the others cannot match, and a
    query may name thousands of peers ("Lopez"): each distinct word is read once."""
    said = set(query)
    words = set(" ".join(names).split())
    keyed = {w: keys for w in words if (keys := _said_keys(w, said))}
    pieces = [keys for w, keys in keyed.items() if len(w) >= NAME_PART_CHARS]
    # a word of one token is its only part, in already
    parts = (p.casefold() for w in words if not w.isalnum() for p in name_parts(w) if len(p) >= NAME_PART_CHARS)
    pieces += [[p] for p in parts if p in said]
    # the tokens either side of each space: a name of several words is said only across these
    spaced = {(query[i - 1], query[i + 1]) for i in range(1, len(query) - 1) if query[i] == " "}
    for ws in map(str.split, names):
        if len(ws) > 1 and all(w in keyed for w in ws):
            if all((keyed[a][-1], keyed[b][0]) in spaced for a, b in pairwise(ws)):
                pieces.append([key for w in ws for key in (" ", *keyed[w])][1:])
    trie: dict = {}
    for keys in pieces:
        node = trie
        for key in keys:
            node = node.setdefault(key, {})
        node[_END] = {}
    return trie


def _said_keys(word: str, said: Set[str]) -> list[str] | None:
    """The token keys of `word` (no whitespace in it) when the query holds every one, else None."""
    key = word.casefold()
    if key in said:
        return [key]
    if word.isalnum():  # one token, not said
        return None
    keys = [key for _, key, _ in _tokens(word)]
    return keys if said.issuperset(keys) else None


def _name_end(tokens: list[tuple[str, str, bool]], at: int, trie: dict) -> int | None:
    """Where the longest name said from `tokens[at]` ends, with its possessive; None when none is."""
    node, end = trie, None
    for i in range(at, len(tokens)):
        node = node.get(tokens[i][1])
        if node is None:
            break
        if _END in node:
            end = _after(tokens, i + 1) or end
    return end


def _after(tokens: list[tuple[str, str, bool]], at: int) -> int | None:
    """Where a name that `tokens[at]` follows ends: past a possessive ("Ann's"), else there, unless a word
    goes on (a name "C++" is not said in "C++x"); None then."""
    if [key for _, key, _ in tokens[at : at + 2]] in (["'", "s"], ["’", "s"]):
        return at + 2
    return at if at == len(tokens) or not tokens[at][2] else None
