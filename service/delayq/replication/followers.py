"""The master's book of its followers (thread-safe): each replica's written and
fsynced positions, the in-sync set, the high-water mark, and the wait of a sync
acknowledgement.

The in-sync set is the control plane's (told through ``Status``), the master's
own name always in it; until a control plane has told one, every connected
follower counts (a shard run by hand has no failover to protect). The
high-water mark is the lowest fsynced position over the set (the master's own
included; a member not connected counts 0, so the mark freezes until the control
plane drops it from the set), and it stays while the set has fewer than
``min_insync`` members: records below it are on the disks of at least
``min_insync`` nodes, and only they are indexed for delivery in sync mode. A
sync write is acknowledged once the mark passes it and the set has at least
``min_insync`` members; otherwise ``Unavailable`` when the deadline passes
(never a soft success; the record stays in the master's log, and is delivered
once the set holds it: at-least-once for a client that retries).

A follower the master has heard nothing from for ``SILENT_S`` (it answers every
chunk, and the master sends one at least every ``HEARTBEAT_S``) is no longer
*live*: the master reports it not connected and ends its stream, so a replica cut
off from its master while the control plane still reaches both leaves the
in-sync set within ``SILENT_S`` plus the control plane's lease (and a probe
round), instead of when TCP gives up (~15 min).

Every time here (when a follower was heard from, when a chunk was sent, a sync
ack's deadline) is on the master's ``Clock.monotonic_s``; a caller that passes
a time in (``Follower.live``, ``lag_ms``) reads the same clock (``Followers.clock``).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..clock import Clock
from ..errors import Unavailable

__all__ = ["HEARTBEAT_S", "SILENT_S", "Follower", "Followers"]

HEARTBEAT_S = 0.5
"""The master sends a chunk (a heartbeat when it has no records) at least this often."""

SILENT_S = 2.0
"""Either side of a replication stream that has heard nothing from the other for
this long counts it gone (four heartbeats)."""


@dataclass
class Follower:
    name: str
    written: int = 0
    flushed: int = 0
    connected: bool = False
    streams: int = 0  # open streams under this name (a reconnect overlaps the old one)
    sent: list[tuple[int, float]] = field(default_factory=list)  # (chunk end, monotonic s)
    heard: float = 0.0  # monotonic s of its last report (or connection)

    def live(self, now_s: float) -> bool:
        """Connected, and heard from within ``SILENT_S``."""
        return self.connected and now_s - self.heard <= SILENT_S

    def lag_ms(self, now_s: float) -> int:
        """Age of the oldest chunk sent that this follower has not written."""
        for end, at in self.sent:
            if end > self.written:
                return int((now_s - at) * 1000)
        return 0


class Followers:
    def __init__(
        self,
        own_name: str,
        flushed: Callable[[], int],
        *,
        clock: Clock,
        min_insync: int = 1,
        on_high_water: Callable[[int], None] | None = None,
    ) -> None:
        self.own_name = own_name
        self.clock = clock  # the master's: its monotonic_s times everything here
        self._flushed = flushed  # the master's own fsynced position
        self.min_insync = min_insync
        self._on_high_water = on_high_water
        self._cv = threading.Condition()
        self._followers: dict[str, Follower] = {}
        self._told: frozenset[str] | None = None  # the control plane's in-sync set
        self._high_water = 0

    # -- the set -----------------------------------------------------------
    def tell_insync(self, names: frozenset[str]) -> None:
        """The control plane's recorded in-sync set (this node's name is added)."""
        with self._cv:
            self._told = frozenset(names) | {self.own_name}
            self._recompute()
            self._cv.notify_all()  # (a larger set may let a sync ack return)

    def insync(self) -> frozenset[str]:
        with self._cv:
            return self._members()

    def live_insync(self) -> frozenset[str]:
        """The members of the in-sync set heard from within ``SILENT_S``, the master
        included: fewer than ``min_insync`` and sync acknowledgements wait (the set
        itself shrinks only through the control plane, and in sync mode never below
        ``min_insync``)."""
        with self._cv:
            now = self.clock.monotonic_s()
            live = {n for n, f in self._followers.items() if f.live(now)} | {self.own_name}
            return self._members() & live

    def _members(self) -> frozenset[str]:
        if self._told is not None:
            return self._told
        now = self.clock.monotonic_s()
        live = (n for n, f in self._followers.items() if f.live(now))
        return frozenset(live) | {self.own_name}

    # -- positions ---------------------------------------------------------
    def connected(self, name: str) -> Follower:
        with self._cv:
            f = self._followers.setdefault(name, Follower(name))
            f.streams += 1
            f.connected = True
            f.heard = self.clock.monotonic_s()
            f.sent.clear()
            self._recompute()
            self._cv.notify_all()  # (one more live member may let a sync ack return)
            return f

    def disconnected(self, name: str) -> None:
        with self._cv:
            f = self._followers.get(name)
            if f is not None:
                f.streams -= 1
                f.connected = f.streams > 0
                self._recompute()

    def sent(self, name: str, end: int) -> None:
        with self._cv:
            f = self._followers.get(name)
            if f is not None:
                f.sent.append((end, self.clock.monotonic_s()))

    def report(self, name: str, written: int, flushed: int) -> None:
        with self._cv:
            f = self._followers.get(name)
            if f is None:
                return
            f.written, f.flushed, f.heard = written, flushed, self.clock.monotonic_s()
            while f.sent and f.sent[0][0] <= written:
                f.sent.pop(0)
            self._recompute()

    def live(self, name: str) -> bool:
        """Follower ``name`` is connected and was heard from within ``SILENT_S``."""
        with self._cv:
            f = self._followers.get(name)
            return f is not None and f.live(self.clock.monotonic_s())

    def forget(self) -> None:
        """Drop every follower (this node stopped being the master)."""
        with self._cv:
            self._followers.clear()
            self._told = None
            self._high_water = 0
            self._cv.notify_all()

    # -- the mark ------------------------------------------------------------
    @property
    def high_water(self) -> int:
        with self._cv:
            self._recompute()
            return self._high_water

    def announce(self) -> None:
        """Pass the mark as it is now to ``on_high_water`` (a master taking its role:
        under the lock, so that no later mark is overwritten by this one)."""
        with self._cv:
            self._recompute()
            if self._on_high_water is not None:
                self._on_high_water(self._high_water)

    def _recompute(self) -> None:
        members = self._members()
        if len(members) < self.min_insync:
            return  # too few to hold anything for good: the mark stays
        own = self._flushed()
        marks = [own]
        for name in members - {self.own_name}:
            f = self._followers.get(name)
            marks.append(f.flushed if f is not None and f.connected else 0)
        # the mark never goes down (a member's reconnect may report less for a while)
        mark = max(self._high_water, min(marks))
        if mark != self._high_water:
            self._high_water = mark
            self._cv.notify_all()
            if self._on_high_water is not None:
                self._on_high_water(mark)

    def wait(
        self,
        end: int,
        timeout_s: float,
        stops_in: Callable[[], float | None] = lambda: None,
    ) -> None:
        """Return once the in-sync set holds ``end`` fsynced and has at least
        ``min_insync`` members; ``Unavailable`` at the deadline, or as soon as the
        master may no longer ack (its lease lapsed, it was fenced: the write cannot
        be acknowledged, so its caller hears it now, not at the deadline, and goes
        to the next master). ``stops_in``: the seconds until that happens (0 or
        less: it has; None: no such time ahead, a lease that never lapses).

        No polling: a report, a connection or a told set wakes the wait, and so
        does ``wake`` (the node calls it after a role command); otherwise it
        sleeps until the deadline or the lease's lapse (on ``clock.timeout_s``: a
        fake clock's waits poll, as its time jumps without telling anyone)."""
        deadline = self.clock.monotonic_s() + timeout_s
        with self._cv:
            while True:
                self._recompute()
                members = self._members()
                if self._high_water >= end and len(members) >= self.min_insync:
                    return
                stops = stops_in()
                if stops is not None and stops <= 0:
                    raise Unavailable(
                        "sync replication: the master lost its lease or was fenced before "
                        "the in-sync set confirmed the write; retry shortly"
                    )
                left = deadline - self.clock.monotonic_s()
                if left <= 0:
                    raise Unavailable(self._why(end, members, timeout_s))
                sleep_s = left if stops is None else min(left, stops)
                self._cv.wait(self.clock.timeout_s(self.clock.now_ms() + math.ceil(sleep_s * 1000)))

    def wake(self) -> None:
        """Wake the sync acks waiting (``wait``): the master's role changed."""
        with self._cv:
            self._cv.notify_all()

    def _why(self, end: int, members: frozenset[str], timeout_s: float) -> str:
        if len(members) < self.min_insync:
            return (
                f"sync replication needs {self.min_insync} in-sync nodes, the master "
                f"included; it has {len(members)} ({', '.join(sorted(members))}); retry shortly"
            )
        behind = sorted(
            n
            for n in members - {self.own_name}
            if (f := self._followers.get(n)) is None or not f.connected or f.flushed < end
        )
        return (
            f"sync replication: in-sync replicas {', '.join(behind)} did not confirm the write "
            f"within {timeout_s:g}s; retry shortly"
        )

    def snapshot(self) -> list[Follower]:
        """A copy of every follower's state, by name."""
        with self._cv:
            return [
                dataclasses.replace(f, sent=list(f.sent))
                for _, f in sorted(self._followers.items())
            ]
