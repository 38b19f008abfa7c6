"""One push group's pusher on its shard's master (``Pusher``): takes the group's
ready messages as a consumer does, sends each to the group's target as one
signed HTTP request, and settles it by the answer.

The loop (``run``): while the gate (``push.gate``: Retry-After hold, circuit,
the in-flight window) has room, ``take`` up to that many messages (invisible for
the request's timeout and ``PUSH_MARGIN_MS``: a push still under way is never
handed out twice by this node), one task each (``_push``); after a take that
got less than it asked for (all that was ready), wait for the engine's signal
(``wait_ready``: ``IDLE_LOOK_S`` at most after an empty take, so an idle group
costs a take every 2 s; redeliveries after a lapse of invisibility are not
signalled and are found by that look); while the gate is shut, for its wake time or until a push
settles (room again). Rate, pause and the group's in-flight limit are the
engine's, applied at ``take``; attempts, backoff, ``max_attempts`` and the
dead-letter topic are the engine's nack's.
A 2xx acks; a 429 or 503 with Retry-After nacks with that least wait and holds
the whole target; anything else nacks into the group's backoff.

Invariants: a request counts in the gate's window from when its task is spawned
(the loop yields after a batch's spawns), so taken-but-unsettled messages never
exceed the window, and none waits for a pooled connection; a Retry-After hold
stops requests already spawned too (each waits for its end before sending). Only a
master pushes: ``delivering()`` (no lock: a bool and a float
compare) is asked right before each request starts, so none starts after a
fence or a lapse of the lease (the take itself is refused then too); a message
taken but not pushed stays in flight and its invisibility lapses, on this node
or the next master: at-least-once, the message id (``webhook-id``) lets a
receiver drop the duplicates. HTTP I/O never runs under the engine's lock (the
engine calls are ``PushSource``'s, on the pool). A 2xx whose ack the shard
refused is counted ``acks_lost`` (a duplicate follows). No secret's text and no
URL's credentials or query are logged (``origin`` only).

Not thread-safe: runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from ..clock import Clock
from ..delivery.policy import PUSH_BACKOFF, GroupPolicy, share
from ..delivery.pushtarget import PushTarget
from ..delivery.receiving import RECEIVE_LOOK_AGAIN_S
from ..delivery.types import ReceivedBatch, ReceivedMessage
from ..errors import DelayqError
from ..push.answers import Answer, verdict
from ..push.egress import Egress
from ..push.gate import TargetGate
from ..push.http import TargetClient
from ..push.requests import Pushed, request_headers
from ..push.secrets import LOOK_S, SecretStore
from ..push.signing import Key
from ..push.snapshot import PushSnapshot, PushState
from ..pushurls import origin

__all__ = ["IDLE_LOOK_S", "MAX_TAKE", "PUSH_IN_FLIGHT", "PUSH_MARGIN_MS", "PushSource", "Pusher"]

log = logging.getLogger("delayq.push")

PUSH_MARGIN_MS = 5000  # a taken message stays invisible this much past its request's timeout
MAX_TAKE = 256  # messages one take asks for: one engine call a batch, not a message
IDLE_LOOK_S = 2.0  # an empty take's wait for the ready signal (lapses are not signalled)
PUSH_IN_FLIGHT = 256  # requests under way at once when the group sets no in-flight limit


class PushSource(Protocol):
    """The consumer's calls a pusher uses (``server.consuming.Consuming``)."""

    async def take(
        self, topic: str, group: str, max_messages: int, invisible_ms: int
    ) -> ReceivedBatch: ...

    async def wait_ready(self, timeout_s: float) -> None: ...

    async def ack(
        self, topic: str, group: str, receipts: Sequence[str], field: str = "receipts"
    ) -> Sequence[object]: ...

    async def nack(
        self, topic: str, group: str, receipts: Sequence[str], at_least_ms: int = 0
    ) -> Sequence[object]: ...


class Pusher:
    """The pusher of ``topic``'s ``group`` to ``policy.push``; ``run`` it as a task,
    cancel the task to stop it (requests under way are aborted)."""

    def __init__(
        self,
        topic: str,
        group: str,
        policy: GroupPolicy,
        *,
        source: PushSource,
        delivering: Callable[[], bool],
        clock: Clock,
        egress: Egress,
        secrets: SecretStore,
        max_connections: int,
        shards: Callable[[], int] = lambda: 1,
        lease_left: Callable[[], float | None] = lambda: None,
    ) -> None:
        """``shards``: how many shards the topics span now (the group's in-flight
        limit is split over them, as the engine enforces it); ``lease_left``: the
        master's lease left in seconds (None: none that lapses): no request's
        timeout outlasts it."""
        self._lease_left = lease_left
        assert policy.push is not None, "a pusher is a push group's"
        self.topic, self.group = topic, group
        self.policy = policy  # the pushers replace it when only its limits change
        self.target: PushTarget = policy.push
        self._source = source
        self._delivering = delivering
        self._clock = clock
        self._egress = egress
        self._secrets = secrets
        self._max_connections = max_connections
        self._shards = shards
        self.gate = TargetGate(probe_ms=self._probe_ms, now_ms=clock.now_ms())
        self._keys: tuple[Key, ...] | None = ()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Timeout | None = None  # the idle wait a settle ends early
        self._refused: str | None = None  # the egress category logged last
        self.label = origin(self.target.url)  # scheme://host:port: no credentials, no query
        self._invisible_ms = self.target.timeout_ms + PUSH_MARGIN_MS  # a taken message's

    def _probe_ms(self, n: int) -> int:
        """The open circuit's wait before its ``n``th probe: the group's backoff (a
        push group's default without one) after ``n`` failures, without jitter."""
        b = self.policy.backoff if self.policy.backoff.initial_ms else PUSH_BACKOFF
        return b.delay_ms(n)

    def _limit(self) -> int:
        """Requests under way at once: this shard's share of the group's in-flight
        limit (what the engine lets a take hand out), at most one a pooled
        connection (a taken message never waits for a connection, its invisibility
        running)."""
        limit = share(self.policy, self._shards()).max_in_flight or PUSH_IN_FLIGHT
        return min(limit, self._max_connections)

    def snapshot(self) -> PushSnapshot:
        now = self._clock.now_ms()
        state = PushState.NO_SECRET if self._keys is None else self.gate.state(now)
        return self.gate.snapshot(self.topic, self.group, self.label, state)

    async def run(self) -> None:
        t = self.target
        client = TargetClient(
            t.url,
            egress=self._egress,
            ca_bundle=t.ca_bundle,
            max_connections=self._max_connections,
            now_s=self._clock.monotonic_s,
        )
        invisible_ms = self._invisible_ms
        try:
            while True:
                keys = await self._secrets.keys(t.secret_ref)
                self._note_secret(keys)
                if keys is None:  # a signed target's requests never go unsigned
                    await self._idle(LOOK_S)
                    continue
                now = self._clock.now_ms()
                room = self.gate.window(now, self._limit())
                if room <= 0:
                    wake = self.gate.wake_ms(now)
                    await self._idle((wake - now) / 1000 if wake > now else LOOK_S)
                    continue
                asked = min(room, MAX_TAKE)
                got = await self._source.take(self.topic, self.group, asked, invisible_ms)
                for m in got.messages():
                    self._spawn(client, m, keys, now)
                await asyncio.sleep(0)  # let the spawned requests start before looking again
                if not got.ids:  # nothing ready: wait for the engine's signal
                    await self._idle(self._idle_look_s(), ready=True)
                elif len(got.ids) < asked:  # all that was ready: wait for more (as ``looks``)
                    await self._idle(RECEIVE_LOOK_AGAIN_S, ready=True)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await client.close()
            # a take counts this task a waiter of the ready signal until its next
            # wait: end that count (a stopped pusher waits no more)
            await self._source.wait_ready(0)

    def _idle_look_s(self) -> float:
        """How long an empty take waits for the ready signal before it looks again:
        long (``IDLE_LOOK_S``: an idle group costs next to nothing), but short under
        a rate limit (its tokens come back unsignalled)."""
        return RECEIVE_LOOK_AGAIN_S if self.policy.rate_per_s else IDLE_LOOK_S

    async def _idle(self, timeout_s: float, ready: bool = False) -> None:
        """Wait ``timeout_s``: with ``ready``, or until the engine signals messages
        ready (room was not what stopped the take); else, or until a push settles
        (room again)."""
        with contextlib.suppress(TimeoutError):
            if ready:
                await self._source.wait_ready(timeout_s)
                return
            async with asyncio.timeout(timeout_s) as self._wake:
                await asyncio.Event().wait()
        self._wake = None

    def _spawn(
        self, client: TargetClient, m: ReceivedMessage, keys: tuple[Key, ...], taken_ms: int
    ) -> None:
        """Start ``m``'s request as a task, counted in flight from now (the loop's
        next window already holds it); ``taken_ms``: no later than its take."""
        self.gate.started()
        task = asyncio.create_task(self._push(client, m, keys, taken_ms))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _push(
        self, client: TargetClient, m: ReceivedMessage, keys: tuple[Key, ...], taken_ms: int
    ) -> None:
        """One request for ``m`` (counted in flight by ``_spawn``), settled by its
        answer; first, while a Retry-After holds the target, it waits (no request
        made: the message stays taken), unless the hold outlasts the message's
        invisibility: then it is nacked to after the hold (its handout counted)."""
        while self.gate.held(now := self._clock.now_ms()):
            until = self.gate.not_before_ms
            if until + self.target.timeout_ms > taken_ms + self._invisible_ms:
                self.gate.unstarted()
                self._room()
                with contextlib.suppress(DelayqError):  # not master: the lapse settles it
                    await self._source.nack(self.topic, self.group, [m.receipt], until - now)
                return
            await asyncio.sleep((until - now) / 1000)
        if not self._delivering():
            self.gate.unstarted()
            return  # deposed since the take: left in flight, pushed by the next master
        if m.attempt <= 1:
            self.gate.late((now - m.deliver_at_ms) / 1000)
        pushed = Pushed(
            id=m.id, topic=self.topic, group=self.group, key=m.key, headers=m.headers,
            attempt=m.attempt, due_ms=m.deliver_at_ms, delivered_ms=m.delivered_ms,
        )  # fmt: skip
        t = self.target
        headers = request_headers(pushed, m.body, t.headers, keys, now_s=now // 1000)
        try:
            answer = await client.send(t.method, headers, m.body, self._timeout_s())
        except Exception as e:  # a client bug, not the target's: counted, retried, logged
            log.error("push group %s/%s: a request to %s failed: %s", self.topic, self.group,
                      self.label, type(e).__name__)  # fmt: skip
            answer = Answer(None, None, "other", 0.0)
        now = self._clock.now_ms()
        v = verdict(answer, now)
        self.gate.answered(v.outcome, now, answer.latency_s, v.hold_ms)
        self._note_refusal(client.refused_category)
        self._room()
        try:
            if v.ack:
                got = await self._source.ack(self.topic, self.group, [m.receipt])
                if any(isinstance(o, DelayqError) for o in got):
                    self.gate.lost_ack()
            else:
                await self._source.nack(self.topic, self.group, [m.receipt], v.at_least_ms)
        except DelayqError:  # no longer master, closing: the lapse settles it
            if v.ack:
                self.gate.lost_ack()

    def _timeout_s(self) -> float:
        """A request's timeout: the target's, capped at the lease left (a request
        never outlives the mastership it was sent under)."""
        left = self._lease_left()
        timeout_s = self.target.timeout_ms / 1000
        return timeout_s if left is None else max(0.0, min(timeout_s, left))

    def _room(self) -> None:
        """End the loop's idle wait: a push settled, there is room again. Once per
        wait (a second reschedule of an expiring timeout raises), and not when it
        is expiring by itself already."""
        wake, self._wake = self._wake, None
        if wake is not None and not wake.expired():
            with contextlib.suppress(RuntimeError):  # expiring: it ends anyway
                wake.reschedule(0)

    def _note_secret(self, keys: tuple[Key, ...] | None) -> None:
        """Log a change of the secret's state (its ref only, never its text)."""
        if (keys is None) != (self._keys is None):
            if keys is None:
                log.warning(
                    "push group %s/%s: its secret ref %r names no valid secret under "
                    "--push-secret-dir: nothing is pushed until it does",
                    self.topic, self.group, self.target.secret_ref,
                )  # fmt: skip
            else:
                log.info("push group %s/%s: its secret is back", self.topic, self.group)
        self._keys = keys

    def _note_refusal(self, category: str | None) -> None:
        """Log a change of the egress refusal, once (the origin and category only)."""
        if category != self._refused:
            if category == "invalid":
                log.warning(
                    "push group %s/%s: %s is refused: its host is an IP address in a form "
                    "that is not accepted (write it as dotted-quad or IPv6 text)",
                    self.topic, self.group, self.label,
                )  # fmt: skip
            elif category is not None:
                log.warning(
                    "push group %s/%s: %s is refused: its addresses are %s ones (allow "
                    "them with --push-allow)", self.topic, self.group, self.label, category,
                )  # fmt: skip
            else:
                log.info("push group %s/%s: %s reachable again", self.topic, self.group,
                         self.label)  # fmt: skip
            self._refused = category
