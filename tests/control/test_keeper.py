"""The supervisor's failover loop without servers: ``ShardKeeper`` driving a
simulated shard (``fakeshard.py``) on a fake clock: what it sends, in which
order, and what it records first. (The views it builds from admin answers:
``test_views.py``; the in-sync set's rules: ``test_insync.py``.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.control.admin import AdminError
from delayq.control.failover import MASTER, REPLICA, Fence, Follow, Nothing, Promote, Stuck
from delayq.control.keeper import KeeperSettings
from delayq.control.record import ShardRecord
from delayq.control.views import Answer
from delayq.replication.lease import LEASE_SHARE
from tests.control.fakeshard import LEASE, UNBOUNDED, Harness


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
    h.keeper._ledger._record = ShardRecord(
        shard=0, epoch=1, master="node-0", insync=frozenset({"node-0"})
    )
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
