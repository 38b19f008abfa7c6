"""The exception tree of delayq, drawn here once::

    DelayqError
    ├── InvalidArgument      bad input; ``field`` names the offending field
    ├── NotFound             unknown, expired or foreign message id / receipt
    ├── AlreadyExists        a schedule with ``if_exists=reject`` found its key taken;
    │                        ``id`` and ``deliver_at_ms`` are the existing message's
    ├── Congested            a bounded queue or a wheel slot is full;
    │   │                    retry after ``retry_after_ms``
    │   └── StorageFull      the data directory's disk (or quota) is full
    ├── FailedPrecondition   valid call, wrong state (e.g. reschedule of a delivered message)
    │   ├── WrongShard       a key, id or receipt another shard owns: refresh the shard map
    │   │   └── NotMaster    a write or receive sent to a replica: the master takes it
    │   └── Forwarded        a message a rebalance moved to another shard (the server
    │                        passes the call on there; ``target``)
    ├── CorruptData          a file failed its magic/CRC/version check
    ├── EngineClosed         the engine was stopped (or never started)
    └── Unavailable          a master that may not ack now (fenced, lease lapsed, too
                             few in-sync replicas): retry, maybe at another node

One tree for every user: the embedded engine raises these classes, the server
translates them to status codes at one boundary, and the client raises a
subclass of the same kind that is also a ``client.errors.ClientError`` (with the
client's own kinds beside: ``TooLarge``, ``DeadlineExceeded``...), so ``except
delayq.InvalidArgument`` catches either; ``delayq`` exports both. Storage never
swallows an unknown error. An error text quotes what a client sent only through
``quote``: at most ``QUOTE_CHARS`` characters of it, so that a hostile value
cannot blow up a status message (gRPC refuses trailers over 16 KiB).
"""

from __future__ import annotations

import errno

__all__ = [
    "QUOTE_CHARS",
    "AlreadyExists",
    "Congested",
    "CorruptData",
    "DelayqError",
    "EngineClosed",
    "FailedPrecondition",
    "Forwarded",
    "InvalidArgument",
    "NotFound",
    "NotMaster",
    "StorageFull",
    "Unavailable",
    "WrongShard",
    "no_space",
    "quote",
    "storage_full",
]

QUOTE_CHARS = 32
"""The most of a client's value an error text shows: enough to recognise it."""


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """``value`` for an error text: its repr when short, else the repr of its first
    ``limit`` characters and its length (``'aaaa'... (20000 characters)``)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


class DelayqError(Exception):
    """Base of every error delayq raises on purpose."""


class InvalidArgument(DelayqError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(DelayqError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class AlreadyExists(DelayqError):
    """A schedule asked to be refused when its key is taken (``IfExists.REJECT``) and
    it was: nothing was stored; ``id`` names the message that holds the key."""

    def __init__(self, field: str, id: str, deliver_at_ms: int) -> None:
        super().__init__(f"{field}: a message with this key exists: {id}")
        self.field = field
        self.id = id
        self.deliver_at_ms = deliver_at_ms


class Congested(DelayqError):
    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(f"{message}; retry after {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms


class StorageFull(Congested):
    """A write found no space (ENOSPC) or no quota (EDQUOT) left: nothing of the call
    was kept; the same call succeeds once space is freed (retention, a bigger volume)."""

    RETRY_AFTER_MS = 1000

    def __init__(self, message: str) -> None:
        super().__init__(message, self.RETRY_AFTER_MS)


def no_space(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (ENOSPC) or the quota (EDQUOT) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def storage_full(exc: OSError, what: str) -> StorageFull | None:
    """``exc`` as a ``StorageFull`` if it says the disk or quota is full (None else);
    ``what`` names what was being written, e.g. "append to the commitlog in /data"."""
    if not no_space(exc):
        return None
    return StorageFull(f"no space left to {what} ({exc.strerror}); free space or grow the volume")


class FailedPrecondition(DelayqError):
    pass


class WrongShard(FailedPrecondition):
    """The call reached a shard that does not own ``field`` (a key, id or receipt):
    ``owner`` does (-1: no shard of the map), under shard map ``topology_epoch``.
    A client with an older map fetches it again (GetRoute) and resends. Over gRPC
    the owner and epoch also travel as trailers under these keys."""

    OWNER_KEY = "delayq-owner-shard"
    TOPOLOGY_EPOCH_KEY = "delayq-topology-epoch"

    def __init__(self, field: str, owner: int, topology_epoch: int, this_shard: int) -> None:
        where = f"shard {owner}" if owner >= 0 else "no shard of the map"
        super().__init__(
            f"{field}: belongs to {where} under shard map epoch {topology_epoch}, "
            f"not to shard {this_shard}; fetch the route again (GetRoute) and resend"
        )
        self.field = field
        self.owner = owner
        self.topology_epoch = topology_epoch


class NotMaster(WrongShard):
    """A call that only the shard's master takes reached a replica (or a master
    that stepped down). ``master``: the address it follows, when known. The client
    fetches the route again, as for ``WrongShard``."""

    def __init__(self, what: str, shard: int, epoch: int, master: str, topology_epoch: int):
        DelayqError.__init__(
            self,
            f"{what}: this node is a replica of shard {shard} (epoch {epoch}); "
            + (f"the master is {master}; " if master else "")
            + "fetch the route again (GetRoute) and resend to the master",
        )
        self.field = what
        self.owner = shard
        self.topology_epoch = topology_epoch
        self.master = master


class Forwarded(FailedPrecondition):
    """The message ``id`` names was moved to shard ``target`` by a rebalance."""

    def __init__(self, field: str, id: str, target: int) -> None:
        super().__init__(f"{field}: moved to shard {target} by a rebalance")
        self.id = id
        self.target = target


class Unavailable(DelayqError):
    """The node cannot take the call now, but the same call may succeed soon (here
    or at the next master): a fenced master, a lapsed lease, a sync write whose
    in-sync replicas did not confirm in time, a key whose shard a rebalance is
    changing. Over gRPC: UNAVAILABLE (+ ``retry-after-ms`` when ``retry_after_ms``)."""

    def __init__(self, message: str, retry_after_ms: int = 0) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class CorruptData(DelayqError):
    pass


class EngineClosed(DelayqError):
    pass
