"""The failover decision (``delayq.control.failover``) about the master, one example test a
rule or more (the rules are numbered as in the module's notes): rule 1, keep a
live master; rule 2, fail over only a master that is gone or unfit; rule 3,
fence, then promote."""

from __future__ import annotations

import dataclasses

from delayq.control.failover import (
    MASTER,
    Fence,
    Follow,
    Nothing,
    Promote,
    decide,
)
from tests.control.failover_views import LEASE, NOW, gone, master, node, view

# -- rule 1: keep a live master ------------------------------------------------------


def test_a_healthy_master_is_kept() -> None:
    v = view(master(), node("b", end=90), node("c", end=80))
    assert decide(v) == Nothing("master a is healthy at epoch 3")


def test_a_healthy_master_is_kept_however_many_replicas_are_down() -> None:
    v = view(master(), node("b", up=False, seen=0), node("c", up=False, seen=0))
    assert isinstance(decide(v), Nothing)


def test_a_replica_catching_up_at_the_recorded_epoch_is_left_alone() -> None:
    v = view(master(), node("b"), node("d", end=10), insync=("a", "b"))
    assert isinstance(decide(v), Nothing)


def test_a_returning_old_master_is_told_to_follow() -> None:
    v = view(master("b", epoch=4), node("a", role=MASTER, fenced=True), master="b", epoch=4)
    assert decide(v) == Follow("a", "b", 4)


def test_a_returning_old_master_that_forgot_its_fence_is_told_to_follow_too() -> None:
    v = view(master("b", epoch=4), node("a", role=MASTER), master="b", epoch=4)
    assert decide(v) == Follow("a", "b", 4)


def test_a_replica_of_an_older_epoch_is_told_to_follow() -> None:
    v = view(master(), node("b", epoch=2))
    assert decide(v) == Follow("b", "a", 3)


def test_strays_are_told_one_at_a_time_lowest_name_first() -> None:
    v = view(master(), node("d", epoch=1), node("c", epoch=2), node("b"))
    assert decide(v) == Follow("c", "a", 3)


def test_an_unreachable_stray_is_not_told_anything() -> None:
    v = view(master(), node("b", up=False, seen=0, role=MASTER, epoch=2))
    assert isinstance(decide(v), Nothing)


# -- rule 2: fail over only a master that is gone or unfit ---------------------------


def test_an_unreachable_master_is_waited_for_until_its_lease_has_run_out() -> None:
    for silent in (1, LEASE - 1, LEASE):
        action = decide(view(gone(silent), node("b"), node("c")))
        assert isinstance(action, Nothing)
        assert "a to stop" in action.reason and f"{LEASE - silent + 1} ms" in action.reason
    assert decide(view(gone(LEASE + 1), node("b"), node("c"))) == Promote("b", 4, (("c", "b"),))


def test_a_master_that_reports_itself_fenced_is_failed_over_at_once() -> None:
    v = view(master(fenced=True), node("b"), node("c", end=90))
    assert decide(v) == Promote("b", 4, (("a", "b"), ("c", "b")))


def test_a_master_that_reports_role_replica_is_failed_over() -> None:
    v = view(node("a"), node("b"), node("c", end=90))
    assert decide(v) == Promote("b", 4, (("a", "b"), ("c", "b")))


def test_an_unreachable_master_last_seen_fenced_is_not_waited_for() -> None:
    v = view(gone(seen_ago=10, fenced=True), node("b"))
    assert decide(v) == Promote("b", 4, ())


# -- rule 3: fence, then promote -----------------------------------------------------


def test_a_reachable_master_at_a_lower_epoch_is_fenced_first_then_replaced() -> None:
    stale = view(master(epoch=2), node("b"), node("c"))
    assert decide(stale) == Fence("a", 3)
    fenced = view(master(epoch=2, fenced=True), node("b"), node("c"))
    assert decide(fenced) == Promote("b", 4, (("a", "b"), ("c", "b")))


def test_a_reachable_stray_master_is_fenced_before_any_promotion() -> None:
    v = view(gone(), node("b"), node("c", role=MASTER, epoch=2, end=50), insync=("a", "b"))
    assert decide(v) == Fence("c", 3)


def test_an_unreachable_stray_master_inside_its_lease_is_waited_out() -> None:
    stray = node("c", up=False, seen=NOW - 100, role=MASTER, epoch=2)
    action = decide(view(gone(), node("b"), stray, insync=("a", "b")))
    assert isinstance(action, Nothing) and "c to stop" in action.reason
    expired = dataclasses.replace(stray, seen_ms=NOW - LEASE - 1)
    assert isinstance(decide(view(gone(), node("b"), expired, insync=("a", "b"))), Promote)


def test_the_unreachable_recorded_master_is_waited_for_even_if_last_seen_as_a_replica() -> None:
    # its Promote (epoch 3) may have landed after the answer that said replica, epoch 2
    last = node("a", up=False, seen=NOW - 10, epoch=2)
    action = decide(view(last, node("b")))
    assert isinstance(action, Nothing) and "a to stop" in action.reason


def test_fence_carries_the_highest_epoch_known() -> None:
    v = view(master(), node("b"), node("c", up=False, seen=0, epoch=5))
    assert decide(v) == Fence("a", 5)
