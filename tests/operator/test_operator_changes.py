"""The resharding driver's decisions for one round (``delayq_operator.changes``),
without a cluster: the target, what the rebalance Job waits for, what to do
about the change's Jobs, whether leaving shards are drained, and the progress
as the status shows it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from delayq.control import resharding
from delayq.control.record import ShardRecord
from delayq.control.resharding import ChangeError, Step
from delayq.shardmap import ShardMap
from delayq_operator import changes, parse_spec
from delayq_operator.changes import JobView, Progress
from delayq_operator.jobs import JobState
from delayq_operator.shardmaps import shard_entry, topology
from delayq_operator.status import PodView, ShardView

SPEC = parse_spec({"metadata": {"name": "t"}, "spec": {"shards": 2}})


def active(n: int) -> ShardMap:
    return topology("t", "ns", parse_spec({"spec": {"shards": n}}))


def joining(n: int, to: int) -> ShardMap:
    return resharding.joining(active(n), [shard_entry("t", "ns", SPEC, i) for i in range(n, to)])


def test_the_target_is_spec_shards_unless_a_change_is_under_way() -> None:
    assert changes.target(active(2), 3) == (3, "")
    assert changes.target(active(3), 1) == (1, "")
    to, why = changes.target(joining(2, 3), 2)
    assert to == 3, "a scale-up under way is finished first (joining shards hold messages)"
    assert "spec.shards=2 waits" in why and "finishing the change to 3 first" in why
    leaving = resharding.switched(active(3), 2)
    assert changes.target(leaving, 4)[0] == 2
    with pytest.raises(ChangeError):
        changes.target(active(2), 0)


def view(
    shard: int, *, ready: bool = True, in_office: bool = True
) -> tuple[ShardView, ShardRecord]:
    master = f"t-shard-{shard}-0"
    rec = ShardRecord(
        shard=shard, epoch=1, master=master, insync=frozenset({master}), in_office=in_office
    )
    v = ShardView(shard, 1, int(ready), (PodView(master, 0, ready, ip="127.1.0.9"),), record=rec)
    return v, rec


def test_the_job_waits_for_every_listed_shard_to_serve_under_the_map() -> None:
    m = joining(2, 3)
    pairs = [view(0), view(1), view(2, in_office=False)]
    views = {v.index: v for v, _ in pairs}
    records = {r.shard: r for _, r in pairs}
    assert changes.unready(m, views, records) == "shard 2 has no master in office yet"
    views[2], records[2] = view(2)
    assert changes.unready(m, views, records) == ""
    bare = {i: dataclasses.replace(v, record=None) for i, v in views.items()}
    assert changes.unready(m, bare, records) == "", "the records count, not the views'"
    del views[1]
    assert changes.unready(m, views, records) == "shard 1 has no StatefulSet yet"
    views[1], _ = view(1)
    records[1] = ShardRecord(shard=1, epoch=2, master="t-shard-1-0", insync=frozenset())
    views[1] = ShardView(1, 1, 1, views[1].pods, record=records[1])
    assert changes.unready(m, views, records) == (
        "the map does not name shard 1's master t-shard-1-0 yet"
    ), "promoted at epoch 2: the map must say so before the job reads it"


def jv(retry: int, state: JobState, **kw: Any) -> JobView:
    return JobView(name=f"j{retry}", retry=retry, state=state, **kw)


def test_the_newest_job_decides() -> None:
    assert changes.next_action([], now=100).kind == "create"
    running = changes.next_action(
        [jv(0, JobState.FAILED, failed_at=1), jv(1, JobState.RUNNING)], 100
    )
    assert (running.kind, running.retry) == ("wait", 1)
    done = changes.next_action([jv(0, JobState.SUCCEEDED)], 100)
    assert (done.kind, done.job and done.job.name) == ("switch", "j0")


def test_a_failed_job_is_retried_after_its_back_off_or_at_once_when_outdated() -> None:
    failed = jv(1, JobState.FAILED, failed_at=1000.0)
    hold = changes.next_action([jv(0, JobState.FAILED, failed_at=900.0), failed], now=1010.0)
    assert (hold.kind, hold.retry_at) == ("hold", 1060.0), "retry 1 waits 60 s"
    again = changes.next_action([failed], now=1060.0)
    assert (again.kind, again.retry) == ("create", 2)
    fixed = changes.next_action([jv(1, JobState.FAILED, failed_at=1000.0, outdated=True)], 1001.0)
    assert (fixed.kind, fixed.retry) == ("create", 2), "the spec changed: no need to wait"


def test_progress_round_trips_through_the_status_and_gives_the_phase() -> None:
    p = Progress.begin(Step.ADD, active(2), 3)
    assert (p.shards_from, p.shards_to, p.epoch, p.step) == (2, 3, 1, "add")
    assert Progress.of(p.doc()) == p
    assert Progress.of(None) is None and Progress.of({"step": "add"}) is None
    assert p.phase == "Rebalancing"
    assert p.condition() == {
        "type": "Rebalanced",
        "status": "False",
        "reason": "AddingShards",
        "message": "2 -> 3 shards: add",
    }
    failed = p.but(step="rebalance", failed=True, last_error="no master (exit code 1)")
    assert failed.phase == "RebalanceFailed"
    assert failed.condition()["reason"] == "JobFailed"
    assert failed.condition()["message"] == "2 -> 3 shards: rebalance; no master (exit code 1)"
    assert p.but(step="drain").phase == "Draining"
    done = p.but(step="done", message="3 shards active")
    assert done.phase is None
    assert (done.condition()["status"], done.condition()["reason"]) == ("True", "Done")
