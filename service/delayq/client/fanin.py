"""Receive fanned in from every shard of a topic (pure: the shells poll).

One ``FanIn`` per (topic, group, invisibility, auto-ack) of a client. A receive
asks every shard that has no poll in flight for its share of ``max_messages``
(concurrent long-polls) and returns as soon as one brings messages. Polls
still in flight then are not cancelled (a cancelled poll could lose an
auto-acked batch): what they bring lands in the buffer, and the next receive
hands it out first. ``take`` honours ``max_messages`` overall and is fair: it
takes from the shards' buffers in turn, starting one shard further each time.
A buffered message whose invisibility has run out is dropped, not handed out:
its shard hands it out again, and a receipt for it would be stale.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any

from .core import Received

__all__ = ["EXPIRY_MARGIN_S", "FanIn"]

EXPIRY_MARGIN_S = 0.5
"""A buffered message is dropped this long before its invisibility ends, so the
receiver has time to ack it."""


@dataclass
class FanIn:
    buffers: dict[int, collections.deque[tuple[Received, float]]] = field(default_factory=dict)
    """Per shard: messages received and not yet handed out, with when they expire."""
    inflight: dict[int, Any] = field(default_factory=dict)
    """Per shard: the shell's handle of a poll in flight (a future or task)."""
    _turn: int = 0

    @staticmethod
    def share(count: int, max_messages: int) -> int:
        """How many messages one shard's poll asks for."""
        return max(1, math.ceil(max_messages / count))

    def idle(self, count: int) -> list[int]:
        """The shards to poll now: those without a poll in flight."""
        return [s for s in range(count) if s not in self.inflight]

    def add(self, shard: int, messages: list[Received], now_s: float, invisible_s: float) -> None:
        """A poll of ``shard`` came back with ``messages`` (received at ``now_s``);
        a failed poll comes back with none."""
        self.inflight.pop(shard, None)
        if messages:
            expires = now_s + invisible_s - EXPIRY_MARGIN_S
            self.buffers.setdefault(shard, collections.deque()).extend(
                (m, expires) for m in messages
            )

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
