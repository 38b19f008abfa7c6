"""What the supervisor knows of a shard's nodes, and the failover decision's input
built from it (pure: no I/O, no clock; times are parameters in monotonic ms).

``Answer`` is a node's admin ``StatusResponse`` as plain values. ``Watch`` is the
supervisor's memory of one node: its last answer, whether the last probe was
answered, and ``seen_ms``. ``node_status`` and ``shard_view`` turn them into
``failover.NodeStatus`` and ``failover.ShardView`` for ``failover.decide``; the
rules themselves live there and only there.

``seen_ms`` (what the decision's lease rule counts from) is when the keeper
*received* the node's latest answer. Each answer carries a lease token, and the
next probes hand back the token of the latest answer received: the node's lease
then runs from that answer's time, which precedes its receipt (the rule:
``failover``'s module notes, "Leases"). So an unanswered probe, or one delivered
late, can never hold the node beyond ``seen_ms`` plus the lease.

A node whose process the supervisor has started as a master (``starting``: no
``--follow``) may act as master at once, and a master never given a lease does
not lapse. Until the node has answered as bounded (``leased``: a probe has given
it a lease, which now runs out unless renewed), or answers as a replica or
fenced (it can become a master again only by a ``Promote``, which carries a
lease), the view says of it when it does not answer: "role master, seen now".
So the decision waits for it rather than promoting past a master that would
never stop on its own.

A node still recovering (replaying its logs) answers with its start-up values:
the role and epoch it was started with, not those its data holds. That says nothing of what
its data holds, so such an answer counts as no answer (and the node, not
running yet, delivers nothing and takes no lease). Otherwise a recorded master
slower to recover than its replicas would look unfit (an epoch below the
recorded one) and be fenced and replaced at every start of a whole shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..role import Role
from .failoverview import MASTER, REPLICA, NodeStatus, ShardView
from .record import ShardRecord

__all__ = ["Answer", "Replica", "Watch", "answers_of", "node_status", "shard_view"]


@dataclass(frozen=True, kw_only=True)
class Replica:
    """One entry of a master's ``StatusResponse.replicas``."""

    name: str
    written: int = 0
    flushed: int = 0
    lag_bytes: int = 0
    lag_ms: int = 0
    connected: bool = False
    insync: bool = False


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A node's admin ``StatusResponse``, as plain values."""

    name: str
    role: Role = REPLICA
    epoch: int = 0
    fenced: bool = False
    lease_valid: bool = False
    log_end: int = 0
    flushed: int = 0
    high_water: int = 0
    insync: frozenset[str] = frozenset()
    replicas: tuple[Replica, ...] = ()
    master: str = ""
    streaming: bool = False
    replication: str = ""
    min_insync: int = 0
    failovers: int = 0
    recovering: bool = False
    lease_token: int = 0
    leased: bool = False

    @classmethod
    def from_proto(cls, r: Any) -> Answer:
        """From a ``delayq.admin.v1.StatusResponse``."""
        return cls(
            name=str(r.name),
            role=MASTER if r.role == MASTER else REPLICA,
            epoch=int(r.epoch),
            fenced=bool(r.fenced),
            lease_valid=bool(r.lease_valid),
            log_end=int(r.log_end),
            flushed=int(r.flushed),
            high_water=int(r.high_water),
            insync=frozenset(str(n) for n in r.insync),
            replicas=tuple(
                Replica(
                    name=str(x.name),
                    written=int(x.written),
                    flushed=int(x.flushed),
                    lag_bytes=int(x.lag_bytes),
                    lag_ms=int(x.lag_ms),
                    connected=bool(x.connected),
                    insync=bool(x.insync),
                )
                for x in r.replicas
            ),
            master=str(r.master),
            streaming=bool(r.streaming),
            replication=str(r.replication),
            min_insync=int(r.min_insync),
            failovers=int(r.failovers),
            recovering=bool(r.recovering),
            lease_token=int(r.lease_token),
            leased=bool(r.leased),
        )

    def replica(self, name: str) -> Replica | None:
        """This master's entry for replica ``name`` (None: it has none)."""
        for r in self.replicas:
            if r.name == name:
                return r
        return None


@dataclass(kw_only=True)
class Watch:
    """The supervisor's memory of one node (mutable; one keeper thread owns it)."""

    name: str
    address: str
    seen_ms: int
    """See the module notes. Starts at the time the supervisor began watching."""
    in_ms: int
    """The last probe (send time) at which the node counted as in sync with the
    recorded master (``insync.counts_in``); for the in-sync set's shrink."""
    last: Answer | None = None
    """Its last answer (None: it never answered)."""
    reachable: bool = False
    """It answered the last probe."""
    starting: bool = False
    """Its process was started as a master and may hold no lease (module notes)."""
    top_flushed: tuple[int, int] = (0, 0)
    """(epoch, the highest ``flushed`` seen for it at that epoch, from its own
    answers or its master's replica list)."""

    def observe(self, answer: Answer | None, got_ms: int) -> None:
        """A probe got ``answer``, received by ``got_ms`` (None: no answer in time).
        An answer of a node still recovering counts as none (module notes)."""
        if answer is None or answer.recovering:
            self.reachable = False
            return
        self.last, self.reachable = answer, True
        self.seen_ms = max(self.seen_ms, got_ms)
        if answer.role != MASTER or answer.fenced or answer.leased:
            self.starting = False  # bounded now: not a master, or leased
        self.note_flushed(answer.epoch, answer.flushed)

    @property
    def answer(self) -> Answer | None:
        """Its answer to the last probe (None: it did not answer that one)."""
        return self.last if self.reachable else None

    @property
    def up(self) -> bool:
        """It answered the last probe and is not recovering."""
        return self.reachable and self.last is not None and not self.last.recovering

    @property
    def lease_token(self) -> int:
        """The token of the latest answer received (0: none), for the next grant."""
        return 0 if self.last is None else self.last.lease_token

    def note_flushed(self, epoch: int, flushed: int) -> None:
        top_epoch, top = self.top_flushed
        if epoch > top_epoch:
            self.top_flushed = (epoch, flushed)
        elif epoch == top_epoch:
            self.top_flushed = (epoch, max(top, flushed))

    def flushed_at(self, epoch: int) -> int:
        """The highest ``flushed`` seen for the node at ``epoch`` (0: none)."""
        top_epoch, top = self.top_flushed
        return top if top_epoch == epoch else 0


def node_status(w: Watch, now_ms: int) -> NodeStatus:
    """``w`` as the failover decision's ``NodeStatus``."""
    if w.starting and not w.reachable:
        # started as a master, not heard from yet: it may deliver from now on
        epoch = w.last.epoch if w.last is not None else 0
        return NodeStatus(name=w.name, reachable=False, seen_ms=now_ms, role=MASTER, epoch=epoch)
    a = w.last
    if a is None:
        return NodeStatus(name=w.name, reachable=False, seen_ms=w.seen_ms)
    log_end = max(a.log_end, a.flushed)  # (flushed <= log_end; a racing answer may not say so)
    return NodeStatus(
        name=w.name,
        reachable=w.reachable,
        seen_ms=w.seen_ms,
        role=a.role,
        epoch=a.epoch,
        log_end=log_end,
        flushed=a.flushed,
        fenced=a.fenced,
        insync=a.insync if a.role == MASTER else frozenset(),
        high_water=a.high_water if a.role == MASTER else 0,
    )


def shard_view(
    recorded: ShardRecord,
    watches: Iterable[Watch],
    *,
    now_ms: int,
    lease_ms: int,
    min_insync: int,
) -> ShardView:
    """The decision's input: the recorded metadata and every node's status."""
    return ShardView(
        epoch=recorded.epoch,
        master=recorded.master,
        insync=recorded.insync,
        nodes=tuple(node_status(w, now_ms) for w in watches),
        now_ms=now_ms,
        lease_ms=lease_ms,
        min_insync=min_insync,
    )


def answers_of(watches: Iterable[Watch]) -> Mapping[str, Answer | None]:
    """Each node's answer to the last probe (None: it did not answer)."""
    return {w.name: w.last if w.reachable else None for w in watches}
