"""A simulated shard for the keeper's tests (``test_keeper.py``): the admin
contract of ``delayq.admin.v1`` played by ``FakeShard`` over ``FakeNode``s on a
fake clock, and the ``Harness`` that drives a ``ShardKeeper`` over it and keeps
what it stores, publishes and reports."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from delayq.control.admin import AdminError
from delayq.control.failover import MASTER, REPLICA
from delayq.control.keeper import KeeperSettings, ShardKeeper
from delayq.control.record import ShardRecord
from delayq.control.views import Answer, Replica
from delayq.replication.lease import LEASE_SHARE

LEASE = 3000


@dataclass
class FakeNode:
    name: str
    up: bool = True
    role: str = REPLICA
    epoch: int = 0
    fenced: bool = False
    log_end: int = 0
    flushed: int = 0
    insync: set[str] = field(default_factory=set)
    following: str = ""
    lease_until: int = -1
    """UNBOUNDED: a master no control plane has given a lease (never lapses)."""
    minted: dict[int, int] = field(default_factory=dict)
    """Its answers' lease tokens, and when each was given."""
    lose_answers: bool = False
    """Takes every call but its answers are lost."""
    cut: bool = False
    """Alive (it may deliver) but unreachable."""
    recovering: bool = False
    """Its process replays its logs: it answers with its start-up values (role as
    started, epoch 0, nothing flushed), takes no lease and delivers nothing."""

    def delivering(self, now: int) -> bool:
        return self.up and self.role == MASTER and not self.fenced and now < self.lease_until


UNBOUNDED = 1 << 62


def _granted(n: FakeNode, token: int, lease_ms: int, now: int) -> int | None:
    """The lease deadline a grant with ``token`` gives ``n`` (``replication.lease``)."""
    at = n.minted.get(token)
    if at is None:
        return now + int(lease_ms * LEASE_SHARE) if n.lease_until == UNBOUNDED else None
    return at + int(lease_ms * LEASE_SHARE)


class FakeShard:
    """Nodes ``node-0..`` at ``h:0..``: the admin contract, and the log of calls."""

    def __init__(self, count: int, clock: list[int]) -> None:
        self.nodes = {f"node-{i}": FakeNode(f"node-{i}") for i in range(count)}
        self.clock = clock
        self.calls: list[tuple[Any, ...]] = []
        self.grants: list[tuple[str, int]] = []
        self._tokens = itertools.count(1)
        """(node, the lease token its probe handed back), probe by probe."""
        m = self.nodes["node-0"]
        m.role, m.epoch, m.insync = MASTER, 1, {"node-0"}
        for n in list(self.nodes.values())[1:]:
            n.following, n.epoch = "h:0", 1

    def address(self, name: str) -> str:
        return "h:" + name.rpartition("-")[2]

    def answer(self, n: FakeNode) -> Answer:
        if n.recovering:
            return Answer(name=n.name, role=n.role, recovering=True)
        replicas: tuple[Replica, ...] = ()
        hw = 0
        if n.role == MASTER:
            me = self.address(n.name)
            replicas = tuple(
                Replica(name=r.name, flushed=r.flushed, written=r.log_end,
                        connected=r.up and r.following == me and r.epoch == n.epoch)
                for r in self.nodes.values() if r is not n and r.following == me
            )  # fmt: skip
            flushed = {r.name: r.flushed for r in replicas} | {n.name: n.flushed}
            hw = min(flushed.get(x, 0) for x in n.insync | {n.name})
        token = next(self._tokens)
        n.minted[token] = self.clock[0]
        return Answer(
            name=n.name, role=n.role, epoch=n.epoch, fenced=n.fenced, log_end=n.log_end,
            flushed=n.flushed, high_water=hw, insync=frozenset(n.insync), replicas=replicas,
            lease_valid=self.clock[0] < n.lease_until,
            master=self.address(n.name) if n.role == MASTER else n.following,
            lease_token=token, leased=n.role == MASTER and n.lease_until != UNBOUNDED,
        )  # fmt: skip

    # the Admin protocol
    def statuses(self, requests: Mapping[str, Any], timeout_s: float) -> dict[str, Answer | None]:
        out: dict[str, Answer | None] = {}
        for name, req in requests.items():
            self.calls.append(("Status", name, req.epoch, req.lease_ms, tuple(req.insync)))
            self.grants.append((name, req.lease_token))
            n = self.nodes[name]
            if not n.up or n.cut:
                out[name] = None
                continue
            if req.epoch == n.epoch and n.role == MASTER and req.lease_ms > 0 and not n.recovering:
                until = _granted(n, req.lease_token, req.lease_ms, self.clock[0])
                if until is not None:
                    unbounded = n.lease_until == UNBOUNDED
                    n.lease_until = until if unbounded else max(n.lease_until, until)
                n.insync = set(req.insync)
            out[name] = None if n.lose_answers else self.answer(n)
        return out

    def command(self, name: str, method: str, request: Any, timeout_s: float) -> Answer:
        self.calls.append((method, name, request.epoch))
        n = self.nodes[name]
        if not n.up or n.cut:
            raise AdminError("UNAVAILABLE", "down")
        if method == "Promote":
            if request.epoch <= n.epoch:
                raise AdminError("FAILED_PRECONDITION", "stale")
            n.role, n.epoch, n.fenced, n.following = MASTER, request.epoch, False, ""
            until = _granted(n, request.lease_token, request.lease_ms, self.clock[0])
            n.insync, n.lease_until = set(request.insync), -1 if until is None else until
        elif request.epoch < n.epoch:
            raise AdminError("FAILED_PRECONDITION", "stale")
        elif method == "Follow":
            n.role, n.epoch, n.fenced, n.following = REPLICA, request.epoch, False, request.master
            n.insync = set()
        elif method == "Fence":
            n.fenced = True
        if n.lose_answers:
            raise AdminError("DEADLINE_EXCEEDED", "lost")
        return self.answer(n)

    def close(self) -> None:
        self.calls.append(("close",))


class Harness:
    def __init__(
        self, count: int = 3, *, sync: bool = False, min_insync: int = 1, new: bool = False
    ) -> None:
        """``new``: a shard the operator just created: every node a replica without
        an epoch, the record (node-0 at epoch 1) never in office."""
        self.clock = [0]
        self.shard = FakeShard(count, self.clock)
        if new:
            for n in self.shard.nodes.values():
                n.role, n.epoch, n.insync, n.following = REPLICA, 0, set(), ""
        self.stored: list[ShardRecord] = []
        self.published: list[ShardRecord] = []
        self.events: list[tuple[str, str]] = []
        self.fail_store = False
        self.keeper = ShardKeeper(
            shard=0,
            nodes=[(n, self.shard.address(n)) for n in self.shard.nodes],
            record=ShardRecord(
                shard=0, epoch=1, master="node-0", insync=frozenset({"node-0"}), in_office=not new
            ),
            settings=KeeperSettings(lease_ms=LEASE, min_insync=min_insync, sync=sync),
            admin=self.shard,
            store=self.store,
            publish=self.publish,
            clock_ms=lambda: self.clock[0],
            on_event=lambda reason, message: self.events.append((reason, message)),
        )

    def store(self, rec: ShardRecord) -> None:
        if self.fail_store:
            raise OSError(28, "No space left on device")
        self.shard.calls.append(("store", rec.epoch, rec.master, tuple(sorted(rec.insync))))
        self.stored.append(rec)

    def publish(self, rec: ShardRecord) -> None:
        self.shard.calls.append(("publish", rec.epoch, rec.master))
        self.published.append(rec)

    def tick(self, advance: int = 250) -> Any:
        self.clock[0] += advance
        return self.keeper.tick()

    def writes(self, n: int) -> None:
        """The master appends and every connected replica copies and fsyncs it."""
        nodes = self.shard.nodes
        m = next(x for x in nodes.values() if x.role == MASTER and not x.fenced and x.up)
        m.log_end = m.flushed = m.log_end + n
        for r in nodes.values():
            if r.up and r.following == self.shard.address(m.name) and r.epoch == m.epoch:
                r.log_end = r.flushed = m.log_end
