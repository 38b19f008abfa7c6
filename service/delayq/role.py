"""A node's role in its shard, and the lease by which a master holds it (pure).

``Role`` is the one spelling of the idea from the engine to the operator: the
timers, the failover decision, the control plane and the operator's status all
use it; the admin protobuf's and the DelayTopic's strings are its values,
converted at those boundaries (``Role(text)``; ``str(role)``). Only a master acks
writes and delivers; a replica applies its master's log and never fires on its
own.

A master acts only within a lease: ``LEASE_SHARE`` of the control plane's
``lease_ms`` (``DEFAULT_LEASE_MS`` for the local cluster), counted from the node's
answer whose token a probe handed back (the rule: ``control.failover``'s notes,
"Leases"; the node's side: ``replication.lease``).
"""

from __future__ import annotations

import enum

__all__ = ["DEFAULT_LEASE_MS", "LEASE_SHARE", "Role"]


class Role(enum.StrEnum):
    """A node's part in its shard."""

    MASTER = "master"
    REPLICA = "replica"


DEFAULT_LEASE_MS = 3000
"""The local supervisor's lease: an unreachable master is counted dead after it."""

LEASE_SHARE = 0.75
"""A master holds a granted lease this share of ``lease_ms``, counted from the
answer whose token granted it (``control.failover``'s notes, "Leases"); the rest
is a margin for clock rates only."""
