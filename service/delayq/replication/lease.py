"""The node's side of the master's lease: tokens that name its answers to the
control plane, and the deadline a probe carrying one may grant (the rule:
``failover``'s module notes, "Leases").

Every answer a node gives the control plane (``Status``, and the answers to
``Promote``, ``Follow``, ``Fence``) carries a fresh token, and the node notes
its own monotonic clock (its engine's ``Clock.monotonic_s``: the one the lease's
deadline is checked against) when it minted it. A probe (or ``Promote``) grants a
lease by handing back the token of the latest answer the control plane received;
the lease then runs until *that answer's* time plus ``LEASE_SHARE`` of the
lease. The control plane counts from when it received that answer, which is
later, so the node's lease ends first on any link: a probe that spends a second
in transit, or is delivered after a partition heals, grants a deadline already
past. A token this process never minted (another process's, a forged one)
grants nothing, except to a master that holds no lease yet (started as master,
never kept): the first grant bounds it from its own arrival, which precedes the
answer the control plane then counts from.

Invariants: tokens only rise within a process and start at a random point (a
restarted node never honours its predecessor's); only the last ``KEEP`` are
remembered (an older one grants nothing: its time is long past anyway).
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict

from ..clock import Clock
from ..role import LEASE_SHARE

__all__ = ["KEEP", "LEASE_SHARE", "LeaseTokens"]


KEEP = 1024
"""Tokens remembered: far more than the answers of one lease."""


class LeaseTokens:
    """Mints tokens for answers and tells the deadline a token grants
    (thread-safe: gRPC handlers and engine threads both answer)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._next = secrets.randbits(62) + 1  # never 0: 0 means "no token"
        self._minted: OrderedDict[int, float] = OrderedDict()

    def mint(self) -> int:
        """A token for the answer about to be given, noting the time now."""
        with self._lock:
            token, self._next = self._next, self._next + 1
            self._minted[token] = self._clock.monotonic_s()
            if len(self._minted) > KEEP:
                self._minted.popitem(last=False)
            return token

    def minted_at(self, token: int) -> float | None:
        """When this process minted ``token`` (None: it did not, or forgot it)."""
        with self._lock:
            return self._minted.get(token)

    def deadline(self, token: int, lease_ms: int, *, bounded: bool = True) -> float | None:
        """The monotonic deadline a grant of ``lease_ms`` with ``token`` gives
        (None: the token grants nothing). A master not ``bounded`` yet is bounded
        from now when the token grants nothing (module notes)."""
        if lease_ms <= 0:
            return None
        at = self.minted_at(token) if token else None
        if at is None and not bounded:
            at = self._clock.monotonic_s()
        return None if at is None else at + lease_ms * LEASE_SHARE / 1000
