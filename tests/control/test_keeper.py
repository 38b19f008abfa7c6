"""The supervisor's failover loop without servers: views built from admin answers,
the in-sync set's rules, and ``ShardKeeper`` driving a simulated shard (the
admin contract of ``delayq.admin.v1`` played by ``FakeShard``) on a fake clock:
what it sends, in which order, and what it records first."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.admin.v1 import admin_pb2
from delayq.control.admin import AdminError
from delayq.control.insync import joiners, leaver, may_remove
from delayq.control.keeper import KeeperSettings, ShardKeeper
from delayq.control.record import ShardRecord
from delayq.control.views import Answer, Replica, Watch, node_status, shard_view
from delayq.failover import MASTER, REPLICA, Fence, Follow, Nothing, Promote, Stuck
from delayq.replication.lease import LEASE_SHARE

LEASE = 3000


# -- views


def test_an_answer_is_read_off_the_status_response() -> None:
    r = admin_pb2.StatusResponse(
        name="node-0", shard=1, role="master", epoch=3, fenced=False, lease_valid=True,
        log_end=900, flushed=800, high_water=700, insync=["node-1", "node-0"],
        replicas=[admin_pb2.ReplicaState(name="node-1", written=850, flushed=700,
                                         lag_bytes=50, lag_ms=12, connected=True, insync=True)],
        replication="sync", min_insync=2, failovers=1, recovering=False,
    )  # fmt: skip
    a = Answer.from_proto(r)
    assert (a.name, a.role, a.epoch, a.log_end, a.flushed, a.high_water) == (
        "node-0", MASTER, 3, 900, 800, 700
    )  # fmt: skip
    assert a.insync == {"node-0", "node-1"} and a.failovers == 1 and a.min_insync == 2
    assert a.replica("node-1") == Replica(
        name="node-1", written=850, flushed=700, lag_bytes=50, lag_ms=12, connected=True,
        insync=True,
    )  # fmt: skip
    assert a.replica("node-2") is None
    assert Answer.from_proto(admin_pb2.StatusResponse(name="x", role="")).role == REPLICA


def test_node_statuses_from_watches() -> None:
    never = Watch(name="a", address="h:1", seen_ms=100, in_ms=100)
    assert node_status(never, 5000) == node_status(never, 9) != None  # noqa: E711
    s = node_status(never, 5000)
    assert (s.reachable, s.seen_ms, s.role, s.epoch) == (False, 100, REPLICA, 0)

    starting = Watch(name="a", address="h:1", seen_ms=100, in_ms=100, starting=True)
    s = node_status(starting, 5000)
    assert (s.reachable, s.seen_ms, s.role, s.fenced) == (False, 5000, MASTER, False)

    w = Watch(name="b", address="h:2", seen_ms=0, in_ms=0)
    w.observe(Answer(name="b", role=MASTER, epoch=2, log_end=10, flushed=8, high_water=5,
                     insync=frozenset({"b"})), 40)  # fmt: skip
    s = node_status(w, 50)
    assert (s.reachable, s.seen_ms, s.epoch, s.flushed, s.high_water, s.insync) == (
        True, 40, 2, 8, 5, {"b"}
    )  # fmt: skip
    w.observe(Answer(name="b", role=REPLICA, epoch=2, insync=frozenset({"x"}), high_water=9), 60)
    s = node_status(w, 70)
    assert s.insync == frozenset() and s.high_water == 0, "a replica's are ignored"


def test_seen_counts_from_the_receipt_of_the_last_answer_and_its_token_is_handed_back() -> None:
    w = Watch(name="m", address="h:1", seen_ms=0, in_ms=0)
    assert w.lease_token == 0, "a node never answered is granted nothing"
    w.observe(Answer(name="m", role=MASTER, epoch=1, lease_token=7), 100)
    assert (w.seen_ms, w.lease_token) == (100, 7)
    # later probes go unanswered: they can only grant from answer 7 (given before 100)
    w.observe(None, 350)
    w.observe(None, 600)
    assert (w.seen_ms, w.reachable, w.lease_token) == (100, False, 7)
    s = node_status(w, 4000)
    assert (s.reachable, s.seen_ms, s.role) == (False, 100, MASTER)
    w.observe(Answer(name="m", role=MASTER, epoch=1, lease_token=9, recovering=True), 700)
    assert (w.seen_ms, w.reachable, w.lease_token) == (100, False, 7), "recovering: no answer"


def test_a_master_started_by_the_supervisor_counts_as_delivering_until_leased() -> None:
    w = Watch(name="m", address="h:1", seen_ms=0, in_ms=0, starting=True)
    w.observe(Answer(name="m", role=MASTER, epoch=3), 100)  # answered, holds no lease yet
    w.observe(None, 350)
    assert w.starting and node_status(w, 99_000).seen_ms == 99_000, "may never lapse"
    w.observe(Answer(name="m", role=MASTER, epoch=3, leased=True), 850)
    assert not w.starting
    w.starting = True
    w.observe(Answer(name="m", role=REPLICA, epoch=2), 900)
    assert not w.starting, "a replica becomes a master only by a Promote, with a lease"


def test_the_view_carries_the_record_and_the_options() -> None:
    rec = ShardRecord(shard=0, epoch=4, master="a", insync=frozenset({"a", "b"}))
    ws = [Watch(name=n, address=n, seen_ms=0, in_ms=0) for n in ("a", "b")]
    v = shard_view(rec, ws, now_ms=77, lease_ms=900, min_insync=2)
    assert (v.epoch, v.master, v.insync, v.now_ms, v.lease_ms, v.min_insync) == (
        4, "a", {"a", "b"}, 77, 900, 2
    )  # fmt: skip
    assert [n.name for n in v.nodes] == ["a", "b"]


# -- the in-sync set's rules


def _master(high_water: int, **replicas: tuple[int, bool]) -> Answer:
    return Answer(
        name="m", role=MASTER, epoch=2, flushed=1000, log_end=1000, high_water=high_water,
        replicas=tuple(Replica(name=n, flushed=f, connected=c) for n, (f, c) in replicas.items()),
    )  # fmt: skip


def test_a_connected_replica_at_the_high_water_mark_joins() -> None:
    m = _master(500, a=(500, True), b=(499, True), c=(900, False), d=(900, True))
    answers: dict[str, Answer | None] = {
        "a": Answer(name="a", epoch=2),
        "b": Answer(name="b", epoch=2),
        "c": Answer(name="c", epoch=2),
        "d": Answer(name="d", epoch=1),  # not yet at the master's epoch
    }
    assert joiners(2, "m", frozenset({"m"}), m, answers) == {"a"}
    assert joiners(2, "m", frozenset({"m", "a"}), m, answers) == frozenset()
    fenced = {**answers, "a": Answer(name="a", epoch=2, fenced=True)}
    assert joiners(2, "m", frozenset({"m"}), m, fenced) == frozenset()
    assert joiners(2, "m", frozenset({"m"}), m, {**answers, "a": None}) == frozenset()


def test_a_member_leaves_only_if_min_insync_others_hold_what_may_depend_on_it() -> None:
    members = {"m", "a", "x"}
    # sync, min_insync 2: x fsynced 100 with the master; a is at 50. A write at 80
    # may have been acked by m and x alone: dropping x would leave it on m only,
    # though every remaining member is at or above the high-water mark (50).
    held = {"m": 100, "a": 50}
    assert not may_remove("x", members, held, name_flushed=100, high_water=50, min_insync=2,
                          sync=True)  # fmt: skip
    held["a"] = 100  # a caught up: everything x may have helped ack is on two others
    assert may_remove("x", members, held, name_flushed=100, high_water=50, min_insync=2,
                      sync=True)  # fmt: skip
    # async acks on the master's append: only the high-water mark must be held
    assert may_remove("x", members, {"m": 100, "a": 50}, name_flushed=100, high_water=50,
                      min_insync=1, sync=False)  # fmt: skip
    assert not may_remove("x", {"m", "x"}, {"m": 40}, name_flushed=100, high_water=50,
                          min_insync=1, sync=False)  # fmt: skip
    # sync with two members left needs both: never below min_insync
    assert not may_remove("a", {"m", "a"}, {"m": 100}, name_flushed=0, high_water=0,
                          min_insync=2, sync=True)  # fmt: skip


def test_the_leaver_is_a_member_out_of_touch_for_longer_than_the_lease() -> None:
    m = _master(100, a=(300, True), x=(200, False))
    ws = {
        "m": Watch(name="m", address="", seen_ms=0, in_ms=10_000),
        "a": Watch(name="a", address="", seen_ms=0, in_ms=10_000),
        "x": Watch(name="x", address="", seen_ms=0, in_ms=7_000),
    }
    ws["a"].observe(Answer(name="a", epoch=2, flushed=300, log_end=300), 10_000)
    ws["x"].note_flushed(2, 200)
    insync = frozenset({"m", "a", "x"})

    def out(now: int, sync: bool = True) -> str | None:
        return leaver(2, "m", insync, m, ws, now_ms=now, lease_ms=LEASE, min_insync=2,
                      sync=sync)  # fmt: skip

    assert out(10_000) is None, "out for exactly the lease: not yet"
    assert out(10_001) == "x"
    ws["x"].note_flushed(2, 400)  # x once held more than a has now
    assert out(10_001) is None
    assert out(10_001, sync=False) == "x", "async: only the high-water mark must be held"
    ws["m"].in_ms = 0
    assert out(20_000) is None, "the master never leaves"


# -- the keeper on a simulated shard


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


def test_a_healthy_shard_gets_leases_and_its_caught_up_replicas_join_the_in_sync_set() -> None:
    h = Harness(3)
    h.writes(100)
    h.shard.nodes["node-2"].flushed = 60  # written, not yet fsynced
    assert isinstance(h.tick(), Nothing)
    first = [c for c in h.shard.calls if c[0] == "Status"]
    assert first == [("Status", f"node-{i}", 1, LEASE, ("node-0",)) for i in range(3)]
    assert h.shard.grants == [(f"node-{i}", 0) for i in range(3)], "no answer yet: no token"
    assert h.shard.nodes["node-0"].lease_until == -1, "a token it never gave grants nothing"
    # node-1, connected and at the high-water mark, is recorded; node-2 is behind it
    assert h.keeper.record.insync == {"node-0", "node-1"}
    assert h.shard.calls[-1] == ("store", 1, "node-0", ("node-0", "node-1"))
    assert h.shard.nodes["node-0"].insync == {"node-0"}, "told only by the next probe"
    h.shard.calls.clear()
    h.shard.grants.clear()
    h.shard.nodes["node-2"].flushed = 100
    assert isinstance(h.tick(), Nothing)
    # the nodes answered before, so now the probe renews and tells the recorded set
    assert h.shard.calls[0] == ("Status", "node-0", 1, LEASE, ("node-0", "node-1"))
    m, token = h.shard.nodes["node-0"], h.shard.grants[0][1]
    assert token and m.lease_until == m.minted[token] + int(LEASE * LEASE_SHARE), (
        "renewed from the time of the answer the token names"
    )
    assert h.shard.nodes["node-0"].insync == {"node-0", "node-1"}
    assert h.keeper.record.insync == {"node-0", "node-1", "node-2"}
    h.tick()
    assert h.shard.nodes["node-0"].insync == {"node-0", "node-1", "node-2"}
    assert h.keeper.ready()


def test_a_silent_master_is_failed_over_after_its_lease_record_first() -> None:
    h = Harness(3)
    for _ in range(3):
        h.writes(10)
        h.tick()
    assert h.keeper.record.insync == {"node-0", "node-1", "node-2"}
    h.shard.nodes["node-0"].up = False
    h.shard.calls.clear()
    h.shard.grants.clear()
    actions = [h.tick() for _ in range(11)]  # 2750 ms: the lease has not run out
    assert all(isinstance(a, Nothing) for a in actions), actions
    assert not [c for c in h.shard.calls if c[0] in ("store", "Promote", "Fence")]
    tokens = {t for n, t in h.shard.grants if n == "node-0"}
    assert len(tokens) == 1, "every probe grants from the last answer received, no later"
    h.shard.calls.clear()
    while not isinstance(action := h.tick(), Promote):
        assert isinstance(action, Nothing), action
    assert action == Promote("node-1", 2, (("node-2", "node-1"),))
    assert h.clock[0] - 250 > LEASE, "no promotion inside the lease"
    done = [c for c in h.shard.calls if c[0] != "Status"]
    assert done == [
        ("store", 2, "node-1", ("node-1",)),  # recorded before anything is sent
        ("Promote", "node-1", 2),
        ("store", 2, "node-1", ("node-1",)),  # (it took office)
        ("Follow", "node-2", 2),
        ("publish", 2, "node-1"),
    ]
    assert h.stored[-1] == ShardRecord(
        shard=0, epoch=2, master="node-1", insync=frozenset({"node-1"}), failovers=1,
        in_office=True,
    )  # fmt: skip
    assert h.stored[-2] == dataclasses.replace(h.stored[-1], in_office=False), (
        "recorded before the Promote as not yet in office, then once it answered so"
    )
    assert h.shard.nodes["node-2"].following == "h:1"
    # the next ticks keep the new master and grow its set back
    h.writes(5)
    assert isinstance(h.tick(), Nothing) and h.keeper.record.insync == {"node-1", "node-2"}
    # the old master comes back as it was (a master at epoch 1): it is told to follow
    h.shard.nodes["node-0"].up = True
    assert h.tick() == Follow("node-0", "node-1", 2)
    assert h.shard.nodes["node-0"].following == "h:1"


def test_a_failover_tells_its_story_in_events() -> None:
    h = Harness(3)
    for _ in range(3):
        h.writes(10)
        h.tick()
    h.shard.nodes["node-0"].cut = True  # alive and unreachable: waited out, not fenced
    h.shard.nodes["node-2"].role = MASTER  # a stray master that answers: fenced
    h.shard.nodes["node-2"].lease_until = h.clock[0] + LEASE
    h.events.clear()
    while not isinstance(h.tick(), Promote):
        pass
    reasons = [r for r, _ in h.events]
    assert reasons[0] == "MasterLost" and reasons.count("MasterLost") == 1, reasons
    assert "Fenced" in reasons and reasons[-1] == "Promoted", reasons
    assert "node-0 of epoch 1 lost" in h.events[0][1]
    assert h.events[-1][1] == "shard 0: node-1 is the master at epoch 2, was node-0 at epoch 1"
    for _ in range(3):
        h.writes(5)
        h.tick()
    joined = [m for r, m in h.events if r == "InSyncChanged"]
    assert joined and "joined" in joined[0]


def test_a_new_shard_waits_for_every_node_then_promotes_its_recorded_master() -> None:
    h = Harness(3, new=True)
    h.shard.nodes["node-2"].up = False  # still starting
    for _ in range(4):
        action = h.tick()
        assert isinstance(action, Nothing) and "node-2" in action.reason, action
    assert not [c for c in h.shard.calls if c[0] in ("store", "Promote", "Follow")]
    h.shard.nodes["node-2"].up = True
    assert h.tick() == Promote("node-0", 1, (("node-1", "node-0"), ("node-2", "node-0")))
    assert (
        h.stored
        == [dataclasses.replace(h.keeper.record, in_office=True)]
        == [ShardRecord(shard=0, epoch=1, master="node-0", insync=frozenset({"node-0"}))]
    ), "the record already named it: only its taking office is recorded"
    assert h.shard.nodes["node-1"].following == "h:0" and h.shard.nodes["node-0"].role == MASTER
    assert h.events[-1] == ("Promoted", "shard 0: node-0 is the master at epoch 1, a new shard")
    h.writes(10)
    assert isinstance(h.tick(), Nothing) and h.keeper.record.failovers == 0
    assert h.keeper.record.insync == {"node-0", "node-1", "node-2"}


def test_a_new_record_on_kept_volumes_promotes_the_most_caught_up_node_above_its_epoch() -> None:
    h = Harness(3, new=True)
    h.shard.nodes["node-1"].epoch, h.shard.nodes["node-1"].log_end = 5, 100
    h.shard.nodes["node-1"].flushed = 100
    h.shard.nodes["node-2"].epoch = 5
    h.shard.nodes["node-2"].log_end = h.shard.nodes["node-2"].flushed = 40
    assert h.tick() == Promote("node-1", 6, (("node-0", "node-1"), ("node-2", "node-1")))
    assert h.stored[0] == ShardRecord(
        shard=0, epoch=6, master="node-1", insync=frozenset({"node-1"}), in_office=False
    ), "recorded before the Promote was sent"
    assert [c[0] for c in h.shard.calls if c[0] != "Status"][:2] == ["store", "Promote"]
    assert h.keeper.record.in_office and h.shard.nodes["node-1"].epoch == 6


def _master_lost(h: Harness) -> Harness:
    """A shard settled on node-0 with some writes, then node-0 gone silent."""
    h.writes(10)
    h.tick()
    h.tick()
    h.shard.nodes["node-0"].up = False
    h.tick()
    return h


def test_a_promotion_that_cannot_be_recorded_is_not_sent() -> None:
    h = _master_lost(Harness(2))
    h.fail_store = True
    h.clock[0] += LEASE
    assert isinstance(h.tick(), Promote)
    assert not [c for c in h.shard.calls if c[0] == "Promote"]
    assert h.keeper.record.epoch == 1 and h.keeper.record.master == "node-0"
    h.fail_store = False
    assert isinstance(h.tick(), Promote) and h.keeper.record.epoch == 2
    assert h.shard.nodes["node-1"].role == MASTER


def test_a_promotion_that_never_landed_is_made_again_higher() -> None:
    h = _master_lost(Harness(2))
    h.clock[0] += LEASE
    n1 = h.shard.nodes["node-1"]

    def refuse(*a: Any, **k: Any) -> Answer:
        raise AdminError("DEADLINE_EXCEEDED", "lost")

    real = h.shard.command
    h.shard.command = refuse  # type: ignore[method-assign]
    assert isinstance(h.tick(), Promote)
    assert h.keeper.record.epoch == 2 and n1.role == REPLICA and not h.published
    assert h.keeper.start_target("node-1") == (True, "h:0"), (
        "the recorded master that never took office restarts as a replica"
    )
    h.shard.command = real  # type: ignore[method-assign]
    action = h.tick()
    assert action == Promote("node-1", 3, ()), "never took office: a candidate again"
    assert h.keeper.record.epoch == 3 and n1.role == MASTER and n1.epoch == 3
    assert h.published[-1].epoch == 3
    assert h.keeper.start_target("node-1") == (True, None)


def test_a_master_that_answers_unfenced_elsewhere_is_fenced_before_any_promotion() -> None:
    h = Harness(3)
    h.writes(10)
    h.tick()
    h.tick()
    h.shard.nodes["node-0"].fenced = True  # e.g. its disk refused writes
    h.shard.nodes["node-2"].role = MASTER  # a stray master at epoch 1
    assert h.tick() == Fence("node-2", 1)
    assert h.shard.nodes["node-2"].fenced
    action = h.tick()
    assert isinstance(action, Promote) and action.node == "node-1" and action.new_epoch == 2


def test_stuck_is_logged_once_and_recorded_and_cleared(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(2)
    h.tick()
    h.tick()  # node-1 never joins: nothing written, but the set is recorded only on a join
    h.keeper._record = ShardRecord(shard=0, epoch=1, master="node-0", insync=frozenset({"node-0"}))
    h.shard.nodes["node-0"].up = False
    h.tick()
    h.clock[0] += LEASE
    caplog.set_level("ERROR", "delayq.cluster")
    for _ in range(4):
        assert isinstance(h.tick(), Stuck)
    assert len([r for r in caplog.records if "stuck" in r.getMessage()]) == 1
    assert h.keeper.record.stuck.startswith("master node-0 has not answered")
    assert len([r for r in h.stored if r.stuck]) == 1, "recorded once, not every tick"
    h.shard.nodes["node-0"].up = True
    assert isinstance(h.tick(), Nothing) and h.keeper.record.stuck == ""


def test_a_member_out_of_touch_leaves_the_set_master_told_first() -> None:
    h = Harness(3, sync=True, min_insync=2)
    for _ in range(3):
        h.writes(10)
        h.tick()
    assert h.keeper.record.insync == {"node-0", "node-1", "node-2"}
    h.shard.nodes["node-2"].up = False
    h.writes(10)  # node-1 goes on: it holds everything node-2 may have helped ack
    h.shard.calls.clear()
    while h.keeper.record.insync == {"node-0", "node-1", "node-2"}:
        h.tick()
        assert h.clock[0] < 10_000
    tell = ("Status", "node-0", 1, LEASE, ("node-0", "node-1"))
    record = ("store", 1, "node-0", ("node-0", "node-1"))
    assert h.shard.calls.index(tell) < h.shard.calls.index(record)
    assert h.shard.nodes["node-0"].insync == {"node-0", "node-1"}
    # node-1 cannot leave too: min_insync 2 would not be met
    h.shard.nodes["node-1"].up = False
    for _ in range(20):
        h.tick()
    assert h.keeper.record.insync == {"node-0", "node-1"}


def test_a_shrink_the_master_did_not_confirm_is_not_recorded() -> None:
    h = Harness(2)
    for _ in range(3):
        h.writes(10)
        h.tick()
    assert h.keeper.record.insync == {"node-0", "node-1"}
    h.shard.nodes["node-1"].up = False
    real = h.shard.statuses

    def lose_smaller(requests: Mapping[str, Any], timeout_s: float) -> dict[str, Answer | None]:
        got = real(requests, timeout_s)
        return {n: (None if tuple(r.insync) == ("node-0",) else got[n]) for n, r in
                requests.items()}  # fmt: skip

    h.shard.statuses = lose_smaller  # type: ignore[method-assign]
    for _ in range(20):
        h.tick()
    assert h.keeper.record.insync == {"node-0", "node-1"}, "told, never confirmed"
    h.shard.statuses = real  # type: ignore[method-assign]
    for _ in range(3):
        h.tick()
    assert h.keeper.record.insync == {"node-0"}


def test_how_a_dead_node_starts_again() -> None:
    h = Harness(3)
    h.tick()
    assert h.keeper.start_target("node-0") == (True, None)
    assert h.keeper.start_target("node-2") == (True, "h:0")
    # started as master and not heard from: the decision waits for it, past its lease
    h.shard.nodes["node-0"].up = False
    h.clock[0] += 10 * LEASE
    assert isinstance(h.tick(), Nothing)
    # its process is gone: its last lease counts again, granted from its last answer
    # received (long ago); the probes it missed could grant no later
    h.keeper.stopped("node-0")
    assert isinstance(h.tick(), Promote)
    assert h.keeper.start_target("node-0") == (True, "h:1"), "a replaced master follows"
    with h.keeper.lock:
        assert h.keeper.start_target("node-2", blocking=False) == (False, None)


def test_a_recorded_master_still_recovering_at_a_start_is_waited_for() -> None:
    """A whole shard started again: the recorded master replays its logs for many
    leases while its replicas already answer; what it reports meanwhile (its
    start-up epoch 0) is no answer, so nothing is fenced or promoted, and it is
    leased once it has recovered."""
    h = Harness(3, sync=True, min_insync=2)
    for _ in range(3):
        h.writes(10)
        h.tick()
    assert h.keeper.record.insync == {"node-0", "node-1", "node-2"}
    h.keeper.stopped("node-0")  # the cluster stopped ...
    h.shard.nodes["node-0"].recovering = True  # ... and started again
    assert h.keeper.start_target("node-0") == (True, None), "the recorded master, as master"
    h.shard.calls.clear()
    actions = [h.tick() for _ in range(10 * LEASE // 250)]
    assert all(isinstance(a, Nothing) for a in actions), actions
    assert not [c for c in h.shard.calls if c[0] in ("store", "Promote", "Fence", "Follow")]
    h.shard.nodes["node-0"].recovering = False
    h.tick()
    h.tick()
    assert h.shard.nodes["node-0"].delivering(h.clock[0]), "leased once it recovered"
    assert h.keeper.record.master == "node-0" and h.keeper.record.epoch == 1


def test_settings_refuse_a_lease_no_longer_than_a_probe_round() -> None:
    for lease in (600, 800):  # 800: the master's 600 ms would lapse between probes
        with pytest.raises(ValueError, match="must outlast a probe interval plus a probe"):
            KeeperSettings(lease_ms=lease, probe_interval_ms=250, probe_timeout_ms=400)
    KeeperSettings(lease_ms=1000, probe_interval_ms=100, probe_timeout_ms=400)


EVENTS = ("down", "restart", "cut", "heal", "lose", "answer", "write", "write", "lag", "tick")


@settings(max_examples=150, deadline=None)
@given(
    count=st.sampled_from((2, 3)),
    sync=st.booleans(),
    steps=st.lists(
        st.tuples(st.sampled_from(EVENTS), st.integers(0, 2), st.sampled_from((0, 250, 1500))),
        min_size=10,
        max_size=60,
    ),
)
def test_the_keeper_on_a_faulty_shard_keeps_one_deliverer_and_records_first(
    count: int, sync: bool, steps: list[tuple[str, int, int]]
) -> None:
    """Crashes and restarts (as the supervisor would: ``start_target``), partitions,
    lost answers (the lease renewed all the same) and lagging replicas: at most one
    node delivers at any time, a master at the recorded epoch never counts a member
    the record lacks, every promotion was recorded before it was sent, epochs rise,
    and once everything heals the shard settles on one master."""
    h = Harness(count, sync=sync, min_insync=2 if sync else 1)
    names = list(h.shard.nodes)

    def check() -> None:
        now = h.clock[0]
        delivering = [n.name for n in h.shard.nodes.values() if n.delivering(now)]
        assert len(delivering) <= 1, (delivering, h.shard.calls[-12:])
        rec = h.keeper.record
        for n in h.shard.nodes.values():
            if n.role == MASTER and n.epoch == rec.epoch and n.up:
                assert n.insync <= rec.insync, (n.name, n.insync, rec)

    for kind, i, advance in steps:
        n = h.shard.nodes[names[i % count]]
        if kind == "down" and n.up:
            n.up, n.lease_until = False, -1
            h.keeper.stopped(n.name)
        elif kind == "restart" and not n.up:
            ok, follow = h.keeper.start_target(n.name)
            assert ok
            n.up, n.fenced, n.insync = True, False, set()
            if follow is None:  # as it was: a master never given a lease never lapses
                n.role, n.following, n.lease_until = MASTER, "", UNBOUNDED
            else:
                n.role, n.following, n.lease_until = REPLICA, follow, -1
        elif kind in ("cut", "heal"):
            n.cut = kind == "cut"
        elif kind in ("lose", "answer"):
            n.lose_answers = kind == "lose"
        elif kind == "write" and any(x.delivering(h.clock[0]) for x in h.shard.nodes.values()):
            h.writes(1 + i)
        elif kind == "lag" and n.role == REPLICA:
            n.flushed = max(0, n.flushed - 1)
        check()
        h.tick(advance)
        check()

    promotes = [c for c in h.shard.calls if c[0] == "Promote"]
    for call in promotes:
        at = h.shard.calls.index(call)
        assert [c for c in h.shard.calls[:at] if c[0] == "store" and c[1:3] == (call[2], call[1])]
    epochs = [c[2] for c in promotes]
    assert epochs == sorted(epochs)

    for n in h.shard.nodes.values():  # heal: every node back, reachable, answering
        n.cut = n.lose_answers = False
        if not n.up:
            ok, follow = h.keeper.start_target(n.name)
            n.up, n.fenced = True, False
            n.role, n.following = (MASTER, "") if follow is None else (REPLICA, follow)
            n.lease_until = UNBOUNDED if follow is None else -1
    for _ in range(60):
        h.tick()
        check()
        h.writes(1)
    rec = h.keeper.record
    assert h.keeper.last_action == Nothing(f"master {rec.master} is healthy at epoch {rec.epoch}")
    m = h.shard.nodes[rec.master]
    assert m.role == MASTER and m.epoch == rec.epoch and not m.fenced
    others = [n for n in h.shard.nodes.values() if n is not m]
    assert all(n.following == h.shard.address(m.name) and n.epoch == rec.epoch for n in others)


def test_ready_once_the_master_holds_a_lease_and_sync_acks_are_possible() -> None:
    h = Harness(3, sync=True, min_insync=2)
    h.keeper.start_target("node-0")  # started as master by the supervisor: no lease
    h.shard.nodes["node-0"].lease_until = UNBOUNDED
    h.shard.nodes["node-0"].lose_answers = True
    h.tick()  # the probe bounded its lease, but its answer (saying so) was lost
    assert not h.keeper.ready()
    h.shard.nodes["node-0"].lose_answers = False
    h.tick()
    assert h.keeper.record.insync == {"node-0", "node-1", "node-2"}
    assert h.keeper.ready()


def _settled(h: Harness) -> Harness:
    for _ in range(3):
        h.writes(10)
        h.tick()
    assert h.keeper.record.insync == set(h.shard.nodes)
    return h


def test_a_retiring_member_leaves_the_in_sync_set_at_once_and_stays_out() -> None:
    h = _settled(Harness(3, sync=True, min_insync=2))
    h.keeper.retire(frozenset({"node-2"}))
    for _ in range(3):
        h.writes(10)
        assert isinstance(h.tick(), Nothing)
    assert h.keeper.record.insync == {"node-0", "node-1"}, "out, though still in touch"
    assert h.shard.nodes["node-0"].insync == {"node-0", "node-1"}, "the master was told"


def test_a_retiring_master_hands_over_to_a_member_that_stays() -> None:
    h = _settled(Harness(3))
    h.shard.nodes["node-1"].flushed += 5  # node-1 ranks first: but it goes away too
    h.shard.nodes["node-1"].log_end += 5
    h.keeper.retire(frozenset({"node-0", "node-1"}))
    assert h.tick() == Fence("node-0", 1), "fenced on purpose, no lease to wait for"
    assert [r for r, _ in h.events][-2:] == ["HandOver", "Fenced"]
    action = h.tick()
    assert isinstance(action, Promote) and action.node == "node-2", action
    assert (h.keeper.record.master, h.keeper.record.epoch) == ("node-2", 2)
    assert not h.shard.nodes["node-0"].delivering(h.clock[0])
    assert "MasterLost" not in [r for r, _ in h.events]


def test_a_retiring_master_with_no_heir_stays_in_office() -> None:
    h = _settled(Harness(2))
    h.keeper.retire(frozenset({"node-0", "node-1"}))
    assert isinstance(h.tick(), Nothing) and h.keeper.record.master == "node-0"


def test_a_replica_at_the_recorded_epoch_that_follows_no_one_is_told_to_follow() -> None:
    """A pod restarts as a replica of no one; if it had adopted the recorded epoch
    before, the decision sees nothing stray in it: the keeper tells it anyway."""
    h = _settled(Harness(3))
    h.shard.nodes["node-2"].following = ""  # restarted: --role replica, epoch kept
    assert h.tick() == Follow("node-2", "node-0", 1)
    assert h.shard.nodes["node-2"].following == "h:0"
    h.writes(5)
    assert isinstance(h.tick(), Nothing)
