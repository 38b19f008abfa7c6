"""The supervisor's view of a shard (``delayq.control.views``): answers read off
the admin Status response, node statuses from the watches, when a node was last
seen and its lease token handed back, and the view built from the record."""

from __future__ import annotations

from delayq.admin.v1 import admin_pb2
from delayq.control.failover import MASTER, REPLICA
from delayq.control.record import ShardRecord
from delayq.control.views import Answer, Replica, Watch, node_status, shard_view


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
