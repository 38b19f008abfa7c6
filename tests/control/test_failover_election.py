"""The failover decision (``delayq.control.failover``) about whom it elects, one example
test a rule or more (the rules are numbered as in the module's notes): rule 4,
elect only from the recorded in-sync set; rule 5, epochs only rise; rule 6, no
unclean election; rule 7, followers."""

from __future__ import annotations

import dataclasses

from delayq.control.failover import (
    MASTER,
    Fence,
    Nothing,
    Promote,
    Stuck,
    decide,
)
from tests.control.failover_views import NOW, gone, master, node, view

# -- rule 4: elect only from the recorded in-sync set --------------------------------


def test_the_highest_epoch_then_the_most_flushed_is_elected() -> None:
    v = view(
        gone(),
        node("b", epoch=2, end=500),
        node("c", end=200, flushed=120),
        node("d", end=130, flushed=110),
        insync=("a", "b", "c", "d"),
    )
    assert decide(v) == Promote("c", 4, (("b", "c"), ("d", "c")))


def test_a_tie_goes_to_the_lowest_name() -> None:
    assert decide(view(gone(), node("c"), node("b"))) == Promote("b", 4, (("c", "b"),))


def test_a_node_outside_the_in_sync_set_is_never_elected() -> None:
    v = view(gone(), node("b", end=10), node("d", end=999))
    assert decide(v) == Promote("b", 4, (("d", "b"),))


def test_an_unreachable_member_is_never_elected() -> None:
    v = view(gone(), node("b", up=False, seen=NOW, end=999), node("c", end=10))
    assert decide(v) == Promote("c", 4, ())


def test_the_old_master_is_never_elected_even_with_the_most_data() -> None:
    v = view(master(fenced=True, end=999), node("b", end=10))
    assert decide(v) == Promote("b", 4, (("a", "b"),))


def test_a_member_below_the_masters_high_water_mark_is_never_elected() -> None:
    # b lost fsynced data (its flushed is below what the master saw every member reach)
    v = view(gone(hw=150), node("b", end=200, flushed=100), node("c", end=160))
    assert decide(v) == Promote("c", 4, (("b", "c"),))


def test_a_fenced_old_masters_high_water_mark_still_counts() -> None:
    # c (recorded, never took office) was wiped back to flushed 40; a saw 150 on all
    v = view(
        node("a", role=MASTER, fenced=True, epoch=3, hw=150),
        node("c", epoch=3, end=40),
        master="c",
        epoch=4,
        insync=("c",),
    )
    action = decide(v)
    assert isinstance(action, Stuck) and "high-water mark 150" in action.reason


def test_a_member_that_lost_its_disk_is_never_elected() -> None:
    # epoch 0: no epoch history, so none of the records either (a fresh or wiped node)
    v = view(gone(), node("b", epoch=0, end=0), node("c", up=False, seen=0))
    action = decide(v)
    assert isinstance(action, Stuck) and "b epoch 0 flushed 0" in action.reason


def test_a_recorded_master_that_lost_its_disk_is_not_promoted_again() -> None:
    v = view(
        node("a", role=MASTER, fenced=True), node("b", epoch=0), master="b", epoch=4, insync=("b",)
    )
    action = decide(v)
    assert isinstance(action, Stuck) and "master b reports epoch 0" in action.reason
    assert "no member but the old master" in action.reason


def test_a_recorded_promotion_that_never_landed_is_made_again_at_a_new_epoch() -> None:
    # recorded: b masters epoch 4 with in-sync set {b}, but b never got its Promote
    v = view(
        node("a", role=MASTER, fenced=True),
        node("b", epoch=3),
        node("c"),
        master="b",
        epoch=4,
        insync=("b",),
    )
    assert decide(v) == Promote("b", 5, (("a", "b"), ("c", "b")))


# -- rule 5: epochs only rise --------------------------------------------------------


def test_a_lone_master_that_restarted_as_a_replica_is_promoted_again() -> None:
    # a shard of one pod (a DelayTopic's default): its pod restarts as a replica of
    # the recorded epoch with its log; nobody else can be elected
    back = node("a", end=500)
    assert decide(view(back, insync=("a",))) == Promote("a", 4, ())
    # so in sync mode, with the other member down: it fsynced every write it acked
    v = view(back, node("b", up=False, seen=0), insync=("a", "b"), min_insync=2)
    assert decide(v) == Promote("a", 4, ())


def test_a_master_that_came_back_is_only_the_last_resort() -> None:
    # another member that can be elected is, as for a master that stayed away
    v = view(node("a", end=500), node("b", end=400), insync=("a", "b"))
    assert decide(v) == Promote("b", 4, (("a", "b"),))
    # nor is it promoted again when it lost its disk, is fenced, or is out of sync
    for back in (node("a", epoch=0, end=0), node("a", fenced=True)):
        assert isinstance(decide(view(back, insync=("a",))), Stuck)
    assert isinstance(decide(view(node("a"), node("b", up=False, seen=0), insync=("b",))), Stuck)
    # nor when a node reports a later epoch: b wrote at epoch 4 what a never held
    later = node("b", up=False, seen=0, role=MASTER, epoch=4, end=500)
    assert isinstance(decide(view(node("a"), later, insync=("a", "b"))), Stuck)


def test_the_new_epoch_is_above_every_epoch_any_node_reports() -> None:
    v = view(gone(), node("b"), node("c", up=False, seen=0, epoch=7))
    assert decide(v) == Promote("b", 8, ())


def test_a_record_behind_the_nodes_fences_its_master_then_elects_above_them() -> None:
    v = view(master(), node("b", epoch=6), node("c"))
    action = decide(v)
    assert action == Fence("a", 6)
    v2 = view(master(fenced=True), node("b", epoch=6), node("c"))
    assert decide(v2) == Promote("b", 7, (("a", "b"), ("c", "b")))


# -- rule 6: no unclean election -----------------------------------------------------


def test_stuck_when_no_in_sync_member_answers() -> None:
    v = view(gone(), node("b", up=False, seen=0), node("d", end=999), insync=("a", "b"))
    action = decide(v)
    assert isinstance(action, Stuck)
    assert "no member of the in-sync set ['a', 'b'] but the old master answers" in action.reason
    assert "never automatic" in action.reason


def test_stuck_when_the_in_sync_set_is_the_old_master_alone() -> None:
    action = decide(view(gone(), node("b"), insync=("a",)))
    assert isinstance(action, Stuck) and "no member but the old master" in action.reason


def test_stuck_when_every_answering_member_lost_committed_data() -> None:
    action = decide(view(gone(hw=150), node("b", flushed=100, end=100)))
    assert isinstance(action, Stuck)
    assert "the high-water mark 150 fsynced are needed): b epoch 3 flushed 100" in action.reason


def test_sync_mode_needs_enough_of_the_in_sync_set_to_answer() -> None:
    # a write acked by 2 of {a, b, c} may be on a and c alone: b cannot be trusted
    one_down = view(gone(), node("b"), node("c", up=False, seen=0), min_insync=2)
    action = decide(one_down)
    assert isinstance(action, Stuck) and "so 2 must" in action.reason
    all_up = view(gone(), node("b"), node("c", end=90), min_insync=2)
    assert decide(all_up) == Promote("b", 4, (("c", "b"),))
    # with every member needed for an ack, any one of them holds every acked write
    assert decide(dataclasses.replace(one_down, min_insync=3)) == Promote("b", 4, ())


def test_async_mode_fails_over_to_any_answering_member() -> None:
    v = view(gone(), node("b"), node("c", up=False, seen=0), min_insync=1)
    assert decide(v) == Promote("b", 4, ())


def test_stuck_waits_for_the_lease_first() -> None:
    action = decide(view(gone(seen_ago=10), node("b"), insync=("a",)))
    assert isinstance(action, Nothing)


# -- rule 7: followers ---------------------------------------------------------------


def test_every_other_answering_node_follows_the_new_master() -> None:
    v = view(
        master(fenced=True),
        node("b"),
        node("c", up=False, seen=0),
        node("d", epoch=1, end=3),
        insync=("a", "b", "c"),
    )
    action = decide(v)
    assert action == Promote("b", 4, (("a", "b"), ("d", "b")))
    assert isinstance(action, Promote) and action.insync == frozenset({"b"})
