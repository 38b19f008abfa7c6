"""Receive fanned in from every shard of a topic (pure: the shells poll).

One ``FanIn`` per (topic, group, invisibility, auto-ack) of a client. A receive
asks every shard that has no poll in flight for its share of ``max_messages``
(concurrent long-polls) and returns as soon as one brings messages. Polls
still in flight then are not cancelled (a cancelled poll could lose an
auto-acked batch): what they bring lands in the buffer, and the next receive
hands it out first. ``take`` honours ``max_messages`` overall and is fair: it
takes from the shards' buffers in turn, starting one shard further each time.

Invisibility runs from when a poll was sent (the server leases the messages
after that). A buffered message whose lease has (almost) run out is dropped,
not handed out: its shard hands it out again, and a receipt for it would be
stale. Auto-acked messages never come again, so they never expire here.

Errors: a receive raises a poll's error when it is the caller's (a bad
argument), or when no shard answered this call at all; else one shard down
does not fail the others' messages. Either way a poll refused as wrong-shard
or unavailable makes the shell fetch the route again (``stale_route``).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from .core import Received
from .routing import refreshes_route, transient

__all__ = ["EXPIRY_MARGIN_S", "FanIn", "Poll"]

EXPIRY_MARGIN_S = 0.5
"""A buffered message is dropped this long before its lease ends (at most a
quarter of the lease), so the receiver has time to ack it."""


@dataclass
class Poll:
    """A poll of one shard in flight: the shell's handle and when it was sent."""

    handle: Any
    sent_s: float


@dataclass
class FanIn:
    invisible_s: float
    auto_ack: bool
    buffers: dict[int, collections.deque[tuple[Received, float]]] = field(default_factory=dict)
    """Per shard: messages received and not yet handed out, with when they expire."""
    inflight: dict[int, Poll] = field(default_factory=dict)
    answered: int = 0
    """Polls that came back without an error since ``begin``."""
    errors: list[grpc.RpcError] = field(default_factory=list)
    """Polls that failed since ``begin``."""
    newest_epoch: int = 0
    """The highest shard-map epoch a poll's answer named (a node serves a newer map
    than the client's: a rebalance added or removed a shard)."""
    _turn: int = 0

    @staticmethod
    def share(count: int, max_messages: int) -> int:
        """How many messages one shard's poll asks for."""
        return max(1, math.ceil(max_messages / count))

    def begin(self) -> None:
        """A receive call starts: forget earlier calls' answers and errors."""
        self.answered = 0
        self.errors.clear()

    def idle(self, count: int) -> list[int]:
        """The shards to poll now: those without a poll in flight."""
        return [s for s in range(count) if s not in self.inflight]

    def sent(self, shard: int, handle: Any, now_s: float) -> None:
        self.inflight[shard] = Poll(handle, now_s)

    def came_back(
        self, shard: int, outcome: Sequence[Received] | grpc.RpcError, topology_epoch: int = 0
    ) -> None:
        """The poll of ``shard`` ended with messages, or an error; its answer named
        ``topology_epoch`` (0: not known)."""
        self.newest_epoch = max(self.newest_epoch, topology_epoch)
        poll = self.inflight.pop(shard, None)
        if isinstance(outcome, grpc.RpcError):
            self.errors.append(outcome)
            return
        self.answered += 1
        if outcome and poll is not None:
            margin = min(EXPIRY_MARGIN_S, self.invisible_s / 4)
            expires = math.inf if self.auto_ack else poll.sent_s + self.invisible_s - margin
            self.buffers.setdefault(shard, collections.deque()).extend(
                (m, expires) for m in outcome
            )

    def harvest(
        self,
        outcome: Callable[[Any], Sequence[Received] | grpc.RpcError],
        epoch: Callable[[Any], int] | None = None,
    ) -> None:
        """Take in every poll that has ended (``handle.done()``); ``outcome`` turns a
        handle into its messages or its error, ``epoch`` into the shard-map epoch
        its answer named."""
        for shard, poll in list(self.inflight.items()):
            if poll.handle.done():
                named = 0 if epoch is None else epoch(poll.handle)
                self.came_back(shard, outcome(poll.handle), named)

    def buffered(self, now_s: float) -> int:
        self._drop_expired(now_s)
        return sum(len(b) for b in self.buffers.values())

    def _drop_expired(self, now_s: float) -> None:
        for buf in self.buffers.values():
            while buf and buf[0][1] <= now_s:
                buf.popleft()

    def take(self, max_messages: int, now_s: float) -> list[Received]:
        """Up to ``max_messages`` buffered messages, the shards taking turns."""
        self._drop_expired(now_s)
        shards = sorted(s for s, b in self.buffers.items() if b)
        out: list[Received] = []
        if shards:
            start = self._turn % len(shards)
            order = shards[start:] + shards[:start]
            self._turn += 1
            while len(out) < max_messages and order:
                for s in list(order):
                    buf = self.buffers[s]
                    if not buf:
                        order.remove(s)
                        continue
                    out.append(buf.popleft()[0])
                    if len(out) == max_messages:
                        break
        return out

    def stale_route(self, topology_epoch: int = 0) -> bool:
        """A poll of this call failed in a way that says the route may be stale
        (its shard's master moved or is down), or some answer named a newer map
        than ``topology_epoch`` (the client's): the shell fetches the map again, even
        when other shards answered, or that shard would be polled at the old
        address for good (or a new shard never)."""
        newer = bool(topology_epoch) and self.newest_epoch > topology_epoch
        return newer or any(refreshes_route(e) for e in self.errors)

    def failure(self) -> grpc.RpcError | None:
        """After a receive that took nothing: the error to raise, if any (a caller's
        mistake, or every poll of this call failed and none is left in flight)."""
        for e in self.errors:
            if not transient(e):
                return e
        if self.errors and not self.answered and not self.inflight:
            return self.errors[0]
        return None
