"""The memory provider: what an agent loop calls around each turn.

    memory = MemoryProvider(load_config(), directory=Path.cwd())
    memory.start()                                   # session, observation settings, prewarm
    system = base_prompt + "\\n\\n" + memory.context_for_turn(user_text)
    ... the model answers, maybe calling memory.dispatch(name, args) for memory.tools("openai") ...
    memory.record_turn(user_text, answer)
    memory.close()                                   # sends what is still queued

Every server call is bounded by `timeout` (a turn's memory work as a whole too) and fails open: the
turn goes on without memory, and the failure is logged and counted in `stats`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextvars import ContextVar, copy_context
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from peerlog_client import MemberSpec, Peerlog
from peerlog_client._sync import Peer, Session, Workspace
from peerlog_client.errors import FailedPrecondition, InvalidArgument, NotFound
from peerlog_client.memory import policy
from peerlog_client.memory.config import MemoryConfig, PeerFlags, connect
from peerlog_client.memory.identity import (
    Sender,
    a2a_session,
    cleaned_gateway_session,
    display_name,
    session_name,
    user_peer,
)
from peerlog_client.memory.writer import Writer
from peerlog_client.models import NewMessage

log = logging.getLogger("peerlog_client.memory")
T = TypeVar("T")
_NO_TURN = object()  # no turn was begun in this thread or task


class MemoryUnavailable(RuntimeError):
    """The server could not be reached within `timeout` (raised by tools only; turns fail open)."""


@dataclass
class Stats:
    """What the provider did: by turn, which layers it refreshed; what failed open, by operation."""

    turns: int = 0
    base_refreshes: list[int] = field(default_factory=list)  # the turns that fetched the base layer
    dialectic_runs: list[int] = field(default_factory=list)  # the turns that ran the dialectic
    dialectic_passes: list[str] = field(default_factory=list)  # the level of every Chat pass made
    prewarm_handed_over: bool = False
    sync_fallbacks: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    timeouts: Counter[str] = field(default_factory=Counter)


@dataclass
class _Layers:
    """The cached context layers of one user peer, and the turns they were refreshed at."""

    base: str = ""
    dialectic: str = ""
    base_turn: int | None = None
    dialectic_turn: int | None = None


class MemoryProvider:
    """Peerlog memory for one agent: context before each turn, messages after it, five tools.

    config: the settings (load_config()). directory: the working directory the session strategy maps
    (default: the current one). session: a fixed session name (a gateway's chat key) that overrides
    the strategy. title: an explicit session title. client: a Peerlog to use instead of making one.
    """

    def __init__(
        self,
        config: MemoryConfig,
        *,
        directory: Path | None = None,
        session: str | None = None,
        title: str | None = None,
        client: Peerlog | None = None,
    ) -> None:
        self.config = config
        self.session_id = session_name(config, directory or Path.cwd(), gateway_key=session, title=title)
        # today's name of the chat's session; session_id becomes the earlier one, if a look finds it this chat's
        self._named_today = self.session_id
        self._cleaned = cleaned_gateway_session(session)  # looked at once, when the session is first needed
        self._gateway_chat = bool(session)  # its turns' users are their senders, not peerName
        self.client = client or connect(config)
        self._own_client = client is None
        self.stats = Stats()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="peerlog-memory")
        # the handles and state below; never held across a call to the server, so a turn never waits for
        # another thread's call (a background write, a prewarm) beyond its own timeout
        self._lock = threading.RLock()
        self._ws: Workspace | None = None
        self._peers: dict[str, Peer] = {}
        self._names: dict[str, str] = {}  # peer -> the display name its turns want
        self._named: dict[str, str] = {}  # peer -> the display name it was given (or refused) here
        self._sessions: dict[str, Session] = {}
        self.flags: dict[str, PeerFlags] = {}  # peer -> the observation toggles in force (the server's)
        self._layers: dict[str, _Layers] = {}
        self._prewarm: Future[str | None] | None = None
        # the turn's sender, set from context_for_turn to record_turn: per thread (and asyncio task), so turns
        # that overlap (a gateway's group chat) each act for their own user; the latest begun, for a call made
        # where no turn was begun (another thread than the turn's), and once a bot's turn is recorded the
        # latest human's: never cleared to None, which in a chat of many users would act as peerName
        self._turn_sender: Sender | None | object = _NO_TURN
        self._human_sender: Sender | None | object = _NO_TURN
        self._turn_here: ContextVar[Sender | None | object] = ContextVar(f"peerlog-turn-{id(self)}", default=_NO_TURN)
        self._closed = False
        self._turns_unwritten = 0
        self._turn_spent = 0.0  # seconds the current turn's context took, out of its timeout
        self.writer = Writer(
            self._send, background=config.write_frequency == "async", on_failure=lambda e: self._failed("write", e)
        )

    # --- what the agent loop calls -----------------------------------------------------------

    def start(self) -> None:
        """Ready the session. hybrid/context: in the background, then a prewarm dialectic at full depth
        for turn 1. tools: only with initOnSessionStart, and then synchronously (bounded by timeout).
        A gateway's chat is readied with the AI alone and not prewarmed: whose turns come is not known yet."""
        user = self._start_user()
        if self.config.recall_mode == "tools":
            if self.config.init_on_session_start:
                self._bounded("start", lambda: self._session_for(user), self._deadline())
            return
        if user is not None:
            self._prewarm = self._pool.submit(self._prewarm_run, user)

    def _start_user(self) -> str | None:
        """Whose memory start() reads: peerName's, unless this is a gateway's chat, whose users are its
        senders (None), or pinUserPeer makes every sender peerName."""
        # read as peerName there, the default peer would join the chat and observe every user in it
        if self._gateway_chat and not self.config.pin_user_peer:
            return None
        return self.config.peer_name

    def context_for_turn(self, user_message: str = "", *, sender: Sender | None = None) -> str:
        """The memory to add to the system prompt for this turn ("" in tools mode or when none is at
        hand). Refreshes what the cadences say is due; never takes longer than `timeout`."""
        with self._lock:
            self.stats.turns += 1
            turn = self.stats.turns
            self._turn_sender = sender
            if not (sender and sender.is_bot):
                self._human_sender = sender
        self._turn_here.set(sender)
        user = user_peer(self.config, sender)
        session_id = self._session_id(user, sender)
        layers = self._layers.setdefault(user, _Layers())
        due = policy.due(self.config, turn, layers.base_turn, layers.dialectic_turn)
        started = time.monotonic()
        deadline = started + self.config.timeout
        if due.base:
            base = self._bounded("context", lambda: self._base_layer(user, session_id), deadline)
            self._refresh(layers, "base", turn, base)
        if due.dialectic:
            dialectic = self._dialectic_for_turn(user, user_message, turn, deadline, session_id)
            self._refresh(layers, "dialectic", turn, dialectic)
        self._turn_spent = time.monotonic() - started
        return policy.assemble(layers.base, layers.dialectic, self.config)

    def record_turn(self, user_message: str, assistant_message: str, *, sender: Sender | None = None) -> None:
        """Queue the turn's two messages (chunked to messageMaxChars) and send them as writeFrequency
        says: async (in the background), turn (now), session (at close) or every N turns."""
        sender = sender or self._sender()
        with self._lock:
            if self._turn_sender == sender:
                self._turn_sender = self._human_sender  # a bot's turn is over: bot_turn no longer holds
        self._turn_here.set(_NO_TURN)  # this thread's calls now act as any other thread's
        if self._closed:
            log.warning("peerlog memory: a turn recorded after close() is not saved")
            return
        if not self.config.save_messages or (sender and sender.is_bot and not self.config.a2a_sessions):
            return  # not saved; or a bot's turn, which without a2aSessions is left out entirely
        user = user_peer(self.config, sender)
        self._want_names(user, sender)
        # stamped now: the send may come much later (at close, the Nth turn, after an outage), and the server
        # would stamp it then; carried in the queued messages, so a retry sends the identical request
        said_at = datetime.now(UTC)
        self.writer.add(
            self._session_id(user, sender),
            [
                *self._chunked(user, user_message, said_at),
                *self._chunked(self.config.ai_peer, assistant_message, said_at),
            ],
        )
        frequency = self.config.write_frequency
        self._turns_unwritten += 1
        if frequency == "turn" or (isinstance(frequency, int) and self._turns_unwritten >= frequency):
            self._turns_unwritten = 0
            # the turn's memory work as a whole stays within timeout: the write gets what the context left
            budget, self._turn_spent = self.config.timeout - self._turn_spent, 0.0
            self._bounded("write", lambda: self.writer.flush(budget), time.monotonic() + budget)

    @property
    def bot_turn(self) -> bool:
        """True while a turn from another bot runs: the profile and conclude tools refuse writes."""
        sender = self._sender()
        return bool(sender and sender.is_bot)

    @property
    def serves_many_users(self) -> bool:
        """A gateway's chat: its users are their senders (not pinned to peerName), each a peer of its own."""
        return self._gateway_chat and not self.config.pin_user_peer

    def _turn(self) -> Sender | None | object:
        """The sender of the turn this thread (or task) is in, else of the latest turn begun anywhere (the
        latest human's once a bot's is recorded); _NO_TURN when no turn is known."""
        here = self._turn_here.get()
        return self._turn_sender if here is _NO_TURN else here

    def _sender(self) -> Sender | None:
        """The sender a call acts for (_turn); None for a turn without one, or none known (peerName)."""
        turn = self._turn()
        return None if turn is _NO_TURN else turn  # type: ignore[return-value]

    def tools(self, fmt: str = "openai") -> list[dict[str, Any]]:
        """The five tools' schemas ("openai" or "anthropic"); none in context mode."""
        from peerlog_client.memory.tools import schemas

        return [] if self.config.recall_mode == "context" else schemas(self.config, fmt)

    def dispatch(self, name: str, args: dict[str, Any] | str | None, *, sender: Sender | None = None) -> str:
        """Run a tool call; the result (or what went wrong) as text for the model. `sender`: the turn's, as
        given to context_for_turn; without it, the turn begun in this thread or task, else the latest begun
        anywhere. Turns that overlap and call from other threads (asyncio.to_thread copies the context, so
        the turn a call began there is not seen here) must pass it, or a tool acts for the latest turn's user.
        In a chat of many users, a call made before any turn was begun (or only another bot's) is refused."""
        from peerlog_client.memory.tools import dispatch

        if sender is None:
            return self._unknown_sender(name) or dispatch(self, name, args)
        here = self._turn_here.set(sender)
        try:
            return dispatch(self, name, args)
        finally:
            self._turn_here.reset(here)

    def _unknown_sender(self, name: str) -> str | None:
        """The error line for a tool call in a chat of many users when no turn is known (none begun yet,
        or only another bot's); None when the call may go on."""
        # read as peerName, the call would write about the default peer, search as it, and make it a member
        # of the chat, where it observes every user. A turn begun without a sender is the caller's word that
        # peerName speaks (its context and messages are peerName's too), so its calls go on
        if not self.serves_many_users or self._turn() is not _NO_TURN:
            return None
        log.warning("peerlog memory: %s called in a chat of many users with no sender known; refused", name)
        return f"error: {name} cannot tell whose turn this is in a chat of many users: pass sender= to dispatch"

    def wait_prewarm(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the prewarm; True when it has landed (whether or not it got an answer)."""
        if self._prewarm is None:
            return False
        try:
            self._prewarm.exception(timeout=timeout)
        except FutureTimeout:
            return False
        return True

    def flush(self) -> bool:
        return self.writer.flush(self.config.timeout)

    def close(self) -> None:
        """Send what is still queued (bounded by timeout), then let go of the connection."""
        if self._closed:
            return
        self._closed = True
        self.writer.close(self.config.timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_client:
            self.client.close()  # a call still running in the pool then fails as ClientClosed

    def __enter__(self) -> MemoryProvider:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- handles, for the tools too ----------------------------------------------------------

    # two threads that both miss a handle may both fetch it: the calls are get-or-create, so that costs a
    # call, where holding the lock across it made every other thread wait for the server

    def workspace(self) -> Workspace:
        if self._ws is None:
            ws = self.client.workspace(self.config.resolved_workspace)
            with self._lock:
                self._ws = self._ws or ws
        return self._ws

    def peer(self, peer_id: str) -> Peer:
        with self._lock:
            found = self._peers.get(peer_id)
        if found is None:
            found = self.workspace().peer(peer_id)
            with self._lock:
                found = self._peers.setdefault(peer_id, found)
        return found

    def _session_for(self, user: str | None, session_id: str | None = None) -> Session:
        """The session with `user` and the AI as members (None: the AI alone, for what the AI does without
        a user, so no user joins a chat just for it): new members get the configured observation toggles,
        existing ones keep the server's, which are read back into `flags`."""
        session_id = self._session_named(session_id or self.session_id, user)
        with self._lock:
            session = self._sessions.get(session_id)
        members = {m.peer_id for m in session.info.memberships if m.left_at is None} if session else set()
        wanted = self.config.flags
        needed = [*([(user, wanted.user)] if user is not None else []), (self.config.ai_peer, wanted.ai)]
        if session is None or any(p not in members for p, _ in needed):
            specs = [MemberSpec(p, observe_me=f.observe_me, observe_others=f.observe_others) for p, f in needed]
            for p, _ in needed:
                self.peer(p)
            session = self.workspace().session(session_id, members=specs)
        with self._lock:
            self._sessions[session_id] = session
            for m in session.info.memberships:
                if m.left_at is None:
                    self.flags[m.peer_id] = PeerFlags(
                        observe_me=m.observe_me if m.observe_me is not None else True,
                        observe_others=bool(m.observe_others),  # not said: the configuration's, off by default
                    )
        return session

    def _session_named(self, session_id: str, user: str | None) -> str:
        """`session_id` as the server has it: this chat's earlier session, once a look found it this chat's.
        Only a turn's user settles that it has none: peerName, read without a turn, may be no member of a
        gateway user's chat, and without a user (None) whose chat it is cannot be told. A failed look is
        made again at the next call."""
        if session_id == self.session_id and self._cleaned and user is not None:
            earlier = self._earlier_session(user, self._cleaned)
            if earlier or self._sender() is not None or user != self.config.peer_name:
                self._cleaned = None
                self.session_id = earlier or self.session_id
        return self.session_id if session_id == self._named_today else session_id

    def _earlier_session(self, user: str, cleaned: str) -> str | None:
        """The session an earlier version named this chat by, the cleaned key alone, when it is `user`'s chat
        with the AI: `user` its only current member beside the AI. One that two chats' keys shared (two
        users in it) is neither's: each starts its own, and no user reads what another told the AI there."""
        try:
            earlier = self.workspace().session(cleaned, create=False)
        except NotFound:
            return None
        members = {m.peer_id for m in earlier.info.memberships if m.left_at is None} - {self.config.ai_peer}
        return cleaned if members == {user} else None

    def observer_of(self, user: str) -> str:
        """Whose knowledge about `user` the layers and tools read: the AI's when it observes others,
        else the user's own self-model."""
        ai = self.flags.get(self.config.ai_peer, self.config.flags.ai)
        return self.config.ai_peer if ai.observe_others else user

    def current_user(self) -> str:
        return user_peer(self.config, self._sender())

    def current_session(self) -> Session:
        user = self.current_user()
        return self._session_for(user, self._session_id(user, self._sender()))

    def _session_id(self, user: str, sender: Sender | None) -> str:
        """The session a turn from `sender` belongs to: another bot's own, never the human's."""
        return a2a_session(user) if sender and sender.is_bot else self.session_id

    # --- the layers ----------------------------------------------------------------------------

    def _base_layer(self, user: str, session_id: str | None = None) -> str:
        """Session summary (of turns the user saw), what is known about the user and their card, the AI's
        self-model from this session (_self_model), and the AI's card where it is only ever this user's
        (ai_card_is_users)."""
        session = self._session_for(user, session_id)
        ctx = session.context(
            tokens=(self.config.context_tokens or 2000),
            observer=self.observer_of(user),
            target=user,
            # the AI saw every turn: as its reader, a summary would tell a user who joined a group chat late
            # what was said before they did; as the user's, it is packed only if they saw all it covers
            perspective=user,
        )
        card = self.peer(self.config.ai_peer).card().entries if self.ai_card_is_users(user) else ()
        sections = [
            ("This conversation so far", ctx.summary),
            (f"What is known about {user}", ctx.representation),
            (f"{user}'s card", "\n".join(f"- {e}" for e in ctx.peer_card)),
            (f"What you ({self.config.ai_peer}) know about yourself", self._self_model(session)),
            ("Your identity card", "\n".join(f"- {e}" for e in card)),
        ]
        return "\n\n".join(f"# {title}\n{body.strip()}" for title, body in sections if body.strip())

    def _self_model(self, session: Session) -> str:
        """The AI's self-model from `session` alone (what it said here, and what it concluded from that
        only); none in a gateway's chat of many users."""
        # the AI observes itself in every user's chats, so only this session's is the user's to read; and a
        # representation read takes no perspective (GetRepresentation has none), so in a chat of many users
        # it would tell one who joined late what the AI concluded from its replies before they did
        if self.serves_many_users:
            return ""
        return self.peer(self.config.ai_peer).representation(sessions=[session]).markdown

    def ai_card_is_users(self, user: str) -> bool:
        """Whether the AI's card may go into `user`'s prompt: when this provider serves that one user only
        (no gateway's chat of many users, and not another bot's turn)."""
        # a card is not tied to sessions (a dream writes the AI's from every chat it was in), so no session
        # read can narrow it: it is left out wherever someone other than the one user could be told it
        return not self.serves_many_users and user == self.config.peer_name

    def dialectic(
        self,
        user: str,
        query: str,
        level: str,
        depth: int,
        warm: bool,
        deadline: float | None = None,
        session_id: str | None = None,
    ) -> str:
        """Ask peerlog's dialectic in up to `depth` passes (assessment, self-audit, reconciliation),
        stopping early after a pass with strong signal; the last answer. session_id: the turn's session
        (None: this provider's)."""
        answers: list[str] = []
        observer = self.peer(self.observer_of(user))
        session = self._session_for(user, session_id)
        for index, pass_level in enumerate(policy.pass_levels(depth, level, self.config.dialectic_depth_levels)):
            prompt = policy.first_prompt(warm, query) if index == 0 else policy.next_prompt(answers)
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            answer = observer.chat(
                policy.chat_query(prompt, self.config.dialectic_max_input_chars),
                target=user,
                session=session,
                level=pass_level,
                timeout=remaining,
                perspective=user,  # only turns the user was there for: never another user's words
                time_zone=self.config.time_zone,
            )
            self.stats.dialectic_passes.append(pass_level)
            if answer.abstained:
                break  # nothing in memory about the user yet: a further pass would find nothing either
            answers.append(answer.answer)
            if policy.strong_signal(answer.answer):
                break
        return answers[-1] if answers else ""

    def _prewarm_run(self, user: str) -> str | None:
        """Before turn 1: `user`'s base layer, then the dialectic at full depth (each fails open)."""
        base = self._bounded("prewarm", lambda: self._base_layer(user), self._deadline())
        if base is not None:
            layers = self._layers.setdefault(user, _Layers())
            layers.base = base
        level = self.config.dialectic_reasoning_level
        return self._bounded(
            "prewarm",
            lambda: self.dialectic(user, "", level, self.config.dialectic_depth, bool(base)),
            self._deadline(),
        )

    def _dialectic_for_turn(self, user: str, query: str, turn: int, deadline: float, session_id: str) -> str | None:
        layers = self._layers[user]
        level = policy.query_level(
            self.config.dialectic_reasoning_level,
            query,
            self.config.reasoning_level_cap,
            self.config.reasoning_heuristic,
        )
        if (
            turn == 1
            and self._prewarm is not None
            and user == self.config.peer_name
            and session_id in (self._named_today, self.session_id)
        ):
            if self._prewarm.done() and self._prewarm.result():
                self.stats.prewarm_handed_over = True
                return self._prewarm.result()
            # the prewarm has not landed: one bounded pass now instead of waiting for it
            self.stats.sync_fallbacks += 1
            return self._bounded(
                "dialectic",
                lambda: self.dialectic(user, query, level, 1, bool(layers.base), deadline, session_id),
                deadline,
            )
        depth = self.config.dialectic_depth
        return self._bounded(
            "dialectic",
            lambda: self.dialectic(user, query, level, depth, bool(layers.base), deadline, session_id),
            deadline,
        )

    def _refresh(self, layers: _Layers, layer: str, turn: int, text: str | None) -> None:
        """Keep a fetched layer; a failed fetch keeps the old one and stays due for the next turn."""
        if text is None:
            return
        setattr(layers, layer, text)
        setattr(layers, f"{layer}_turn", turn)
        (self.stats.base_refreshes if layer == "base" else self.stats.dialectic_runs).append(turn)

    # --- writing -------------------------------------------------------------------------------

    def _chunked(self, peer_id: str, text: str, said_at: datetime) -> list[NewMessage]:
        """A message said at `said_at` as ordered chunks of at most messageMaxChars, each tagged with its
        place; none for blank text. A NUL is left out and a lone surrogate becomes U+FFFD (policy.storable)."""
        # the server refuses blank content or a NUL, and the refusal would take the batch's other messages
        # with it; a lone surrogate cannot even be encoded, and would hold back every later batch
        text = policy.storable(text)
        pieces = [piece for piece in policy.chunks(text, self.config.message_max_chars) if piece.strip()]
        if len(pieces) == 1:
            return [NewMessage(peer_id, pieces[0], said_at)]
        return [
            NewMessage(peer_id, piece, said_at, metadata={"chunk": i, "chunks": len(pieces)})
            for i, piece in enumerate(pieces)
        ]

    def _want_names(self, user: str, sender: Sender | None) -> None:
        with self._lock:
            for peer_id in (user, self.config.ai_peer):
                name = display_name(self.config, peer_id, sender)
                if name:
                    self._names[peer_id] = policy.storable(name)

    def _give_name(self, peer_id: str) -> None:
        """Give the peer the display name its turns want, before they are sent (they carry it), once; a
        name the server refuses (no letter or digit, say) is logged and the turns go unnamed. Any other
        failure raises, and the send is retried, name first."""
        with self._lock:
            name = self._names.get(peer_id)
            if not name or self._named.get(peer_id) == name:
                return
        peer = self.peer(peer_id)
        # read now: SetPeerMetadata replaces the whole object, and what this process read of it earlier may
        # have changed since (the app stored another key), which the merge would write back over
        metadata = peer.refresh().metadata
        if metadata.get("name") != name:
            try:
                peer.set_metadata({**metadata, "name": name})
            except InvalidArgument as error:
                self._failed("name", error)  # refused for good: asking again would be refused again
        with self._lock:
            # only now: a name lost to a transient failure is asked for again with the retried send
            self._named[peer_id] = name

    def _send(self, session_id: str, messages: list[NewMessage], key: str) -> None:
        authors = sorted({m.peer_id for m in messages})
        for author in authors:
            self._give_name(author)
        try:
            self._append(session_id, authors, messages, key)
        except FailedPrecondition as error:
            if "not members" not in str(error):
                raise
            # an author was removed elsewhere since the session was read: read it again, which adds the
            # authors back, and make the same write once more (same key: it cannot land twice)
            with self._lock:
                self._sessions.pop(session_id, None)
            self._append(session_id, authors, messages, key)

    def _append(self, session_id: str, authors: list[str], messages: list[NewMessage], key: str) -> None:
        # each author must be a member; the AI's reply to a blank turn (a photo) makes no user one
        users: list[str | None] = [a for a in authors if a != self.config.ai_peer] or [None]
        sessions = [self._session_for(user, session_id) for user in users]
        sessions[-1].add_messages(messages, idempotency_key=key)

    # --- failing open --------------------------------------------------------------------------

    def _deadline(self) -> float:
        return time.monotonic() + self.config.timeout

    def _bounded(self, what: str, work: Callable[[], T], deadline: float) -> T | None:
        """work() in a worker thread, waited for until `deadline`; None (logged, counted) if it fails
        or is late. A late call goes on in its thread, bounded by the client's own deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._timed_out(what)
            return None
        try:
            # in the caller's turn; after close() the pool takes no work (RuntimeError): a failure like any other
            future = self._pool.submit(copy_context().run, work)
            return future.result(timeout=remaining)
        except FutureTimeout:
            # not started yet (queued behind other late work): never started. Left queued, a burst of late
            # calls ran on after the server recovered, and held up the turns that came then
            future.cancel()
            self._timed_out(what)
        except Exception as error:  # noqa: BLE001 - fail open: whatever went wrong, the turn goes on
            self._failed(what, error)
        return None

    def call(self, what: str, work: Callable[[], T]) -> T:
        """work() bounded by timeout, for the tools: raises MemoryUnavailable instead of hanging."""
        future = self._pool.submit(copy_context().run, work)  # in the caller's turn
        try:
            return future.result(timeout=self.config.timeout)
        except FutureTimeout:
            future.cancel()  # not started yet: never started, as its caller is told (see _bounded)
            self._timed_out(what)
            raise MemoryUnavailable(f"peerlog did not answer within {self.config.timeout} s") from None

    def _timed_out(self, what: str) -> None:
        self.stats.timeouts[what] += 1
        log.warning("peerlog memory: %s took longer than %.1f s; going on without it", what, self.config.timeout)

    def _failed(self, what: str, error: Exception) -> None:
        self.stats.failures[what] += 1
        log.warning("peerlog memory: %s failed (%s: %s); going on without it", what, type(error).__name__, error)
