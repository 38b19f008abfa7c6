"""The resharding driver's decisions (``delayq.control.reshardingdriver``) over an
in-memory host that keeps the calls' order: the map lists new shards before they
start; the job starts only once every master serves the map; the map switches
only after the job succeeded, by compare-and-set on the map as it is then (a
failover published meanwhile is kept); a job that failed because a failover
moved the map on under it runs again at once, one that failed on its own map
does not; leaving shards stop only once every kept node serves the map without
them (or after the timeout); the job starts only once every listed shard holds
the groups' policies the others hold (copied, never overwritten); a paused group
holding a drain is named. The real processes: tests/spark/test_rebalance_failover.py
(local cluster) and tests/k8s/test_rebalance.py (operator)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

import pytest

from delayq.control.policyspread import HeldPolicy, disagreeing, missing
from delayq.control.resharding import Step
from delayq.control.reshardingdriver import ReshardingDriver, drain_report, unserved
from delayq.control.reshardinghost import JobRun, JobState, Milestone, Round
from delayq.control.stats import ShardStats
from delayq.shardmap import ACTIVE, JOINING, LEAVING, ShardEntry, ShardMap
from delayq.v1 import delayq_pb2 as pb


def stats(epoch: int, pending: int = 0) -> ShardStats:
    topics = ({"topic": "t", "pending": pending, "group_backlog": {}},)
    return ShardStats(shard=0, role="master", topology_epoch=epoch, topics=topics)


class MemoryHost:
    """A host whose nodes serve whatever ``served`` says (default: the map)."""

    def __init__(self, shards: int) -> None:
        self.map = ShardMap.of_masters([f"s{i}-a:1" for i in range(shards)], 5)
        self.running = shards
        self.calls: list[str] = []
        self.jobs: list[JobRun] = []
        self.served: dict[str, int] = {}  # node -> epoch it serves (else the map's)
        self.pending: dict[int, int] = {}
        self.milestones: list[Milestone] = []
        self.rounds: list[Round] = []
        self.policies: dict[int, list[HeldPolicy]] = {}  # shard -> set on its master
        self.refuse = ""  # what SetGroupPolicy answers (empty: done)

    def failover(self, shard: int) -> None:
        """What a keeper's publish does: a new master, the topology epoch + 1."""
        e = self.map.shards[shard]
        new = dataclasses.replace(e, master=e.master.replace("-a", "-b"), epoch=e.epoch + 1)
        shards = tuple(new if x.index == shard else x for x in self.map.shards)
        self.map = dataclasses.replace(
            self.map, shards=shards, topology_epoch=self.map.topology_epoch + 1
        )

    def _serves(self, node: str) -> int:
        return self.served.get(node, self.map.topology_epoch)

    # -- the protocol
    def read_map(self) -> ShardMap:
        return self.map

    def write_map(self, change: Callable[[ShardMap], ShardMap | None]) -> ShardMap | None:
        new = change(self.map)
        if new is not None:
            self.calls.append(f"map {new.topology_epoch}")
            self.map = new
        return new

    def add_shards(self, current: ShardMap, target: int) -> Sequence[ShardEntry]:
        return [ShardEntry(index=i, master=f"s{i}-a:1") for i in range(current.count, target)]

    def start_shards(self, first: int) -> None:
        self.calls.append(f"start {first}")
        self.running = self.map.count

    def unready(self, current: ShardMap) -> str:
        return ""

    def running_beyond(self, count: int) -> Sequence[int]:
        return list(range(count, self.running))

    def stop_shards(self, keep: int) -> None:
        self.calls.append(f"stop {keep}")
        self.running = keep

    def job(self, current: ShardMap, target: int) -> JobRun:
        return self.jobs[-1] if self.jobs else JobRun(state=JobState.NONE)

    def start_job(self, current: ShardMap, target: int) -> str:
        self.calls.append(f"job {current.topology_epoch}")
        self.jobs.append(
            JobRun(state=JobState.RUNNING, planned_epoch=current.topology_epoch, note="j")
        )
        return "started"

    def finish(self, state: JobState) -> None:
        self.jobs[-1] = dataclasses.replace(self.jobs[-1], state=state)

    def shard_stats(self, shard: int) -> ShardStats | None:
        return stats(self._serves(f"s{shard}-master"), self.pending.get(shard, 0))

    def group_policies(self, shard: int) -> Sequence[HeldPolicy] | None:
        return list(self.policies.get(shard, ()))

    def set_group_policy(self, shard: int, held: HeldPolicy) -> str:
        if not self.refuse:
            self.calls.append(f"policy {shard} {held.topic}/{held.group}")
            self.policies.setdefault(shard, []).append(held)
        return self.refuse

    def node_stats(self, shards: Sequence[int]) -> Mapping[str, ShardStats | None]:
        names = [f"s{s}-{n}" for s in shards for n in ("master", "replica")]
        return {n: stats(self._serves(n)) for n in names}

    def record(self, done: Round) -> None:
        self.rounds.append(done)

    def reached(self, milestone: Milestone, note: str) -> None:
        self.milestones.append(milestone)


def test_a_scale_up_lists_the_shards_before_they_start_and_switches_after_the_job() -> None:
    host = MemoryHost(2)
    d = ReshardingDriver(host, served_timeout_s=10)
    d.round(3)
    assert host.calls == ["map 6", "start 2"], "listed, then started"
    assert [e.state for e in host.map.shards] == [ACTIVE, ACTIVE, JOINING]
    host.served["s1-master"] = 5
    got = d.round(3)
    assert got is not None and got.waiting and "serves map epoch 5, not 6" in got.note
    assert not host.jobs, "no job while a master serves an older map"
    del host.served["s1-master"]
    d.round(3)
    assert host.calls[-1] == "job 6"
    d.round(3)
    assert host.map.changing == JOINING, "no switch while the job runs"
    host.finish(JobState.SUCCEEDED)
    got = d.round(3)
    assert got is not None and got.written is not None and host.map.owners == 3
    done = d.round(3)
    assert done is not None and done.done and done.step is Step.DONE


def test_a_job_failed_by_a_failover_runs_again_on_the_new_map() -> None:
    host = MemoryHost(2)
    d = ReshardingDriver(host, served_timeout_s=10)
    d.round(3)
    d.round(3)  # the job starts on epoch 6
    host.failover(0)  # epoch 7: shard 0 has a new master
    host.finish(JobState.FAILED)
    got = d.round(3)
    assert got is not None and not got.failed
    assert host.calls[-2:] == ["job 6", "job 7"], "again at once, on the map as it is"
    assert "a failover" in got.note
    host.failover(1)  # epoch 8, after the job's moves: the switch keeps it
    host.finish(JobState.SUCCEEDED)
    d.round(3)
    assert host.map.topology_epoch == 9 and host.map.owners == 3
    assert [e.master for e in host.map.shards] == ["s0-b:1", "s1-b:1", "s2-a:1"]


def test_a_job_failed_on_its_own_map_fails_the_change() -> None:
    host = MemoryHost(3)
    d = ReshardingDriver(host, served_timeout_s=10)
    d.round(2)
    host.finish(JobState.FAILED)
    before = host.map
    got = d.round(2)
    assert got is not None and got.failed == "j"
    assert host.map == before and host.calls == ["job 5"], "no switch, no rerun"


def test_a_host_retry_that_is_due_starts_a_job() -> None:
    host = MemoryHost(3)
    d = ReshardingDriver(host, served_timeout_s=10)
    d.round(2)
    host.jobs[-1] = dataclasses.replace(host.jobs[-1], state=JobState.FAILED, retry_due=True)
    d.round(2)
    assert host.calls == ["job 5", "job 5"]


def test_leaving_shards_stop_only_once_every_kept_node_serves_the_smaller_map() -> None:
    host = MemoryHost(3)
    now = [0.0]
    d = ReshardingDriver(host, served_timeout_s=10, clock=lambda: now[0])
    d.round(2)
    host.finish(JobState.SUCCEEDED)
    d.round(2)
    assert [e.state for e in host.map.shards] == [ACTIVE, ACTIVE, LEAVING]
    host.pending[2] = 4
    got = d.round(2)
    assert got is not None and got.note == "draining: shard 2: 4 pending, 0 delivered and not acked"
    host.pending[2] = 0
    d.round(2)
    assert host.map.count == 2 and host.running == 3, "dropped from the map, still running"
    host.served["s1-replica"] = 6
    got = d.round(2)
    assert got is not None and "not yet: s1-replica" in got.note and host.running == 3
    assert got.step is Step.DONE and got.shown == "drain", "shown as the drain's until stopped"
    now[0] = 5.0
    d.round(2)
    assert host.running == 3
    del host.served["s1-replica"]
    got = d.round(2)
    assert got is not None and got.done and host.calls[-1] == "stop 2"
    assert host.milestones[-2:] == [Milestone.DROPPED, Milestone.STOPPED]


def test_a_node_that_never_serves_the_map_holds_the_stop_only_so_long() -> None:
    host = MemoryHost(3)
    now = [0.0]
    d = ReshardingDriver(host, served_timeout_s=10, clock=lambda: now[0])
    d.round(2)
    host.finish(JobState.SUCCEEDED)
    d.round(2)
    d.round(2)  # drained: dropped
    host.served["s0-replica"] = 1
    d.round(2)
    assert host.running == 3
    now[0] = 10.5
    got = d.round(2)
    assert got is not None and got.done and host.running == 2


def test_the_map_is_never_written_over_another_step() -> None:
    host = MemoryHost(2)
    d = ReshardingDriver(host, served_timeout_s=10)
    d.round(3)
    d.round(3)
    host.finish(JobState.SUCCEEDED)
    real = host.read_map
    stale = host.map
    host.map = dataclasses.replace(  # someone else's step since the driver read it
        host.map,
        shards=(*host.map.shards[:2], dataclasses.replace(host.map.shards[2], state=ACTIVE)),
        topology_epoch=host.map.topology_epoch + 1,
    )
    after = host.map
    host.read_map = lambda: stale  # type: ignore[method-assign]
    got = d.round(3)
    host.read_map = real  # type: ignore[method-assign]
    assert got is not None and got.written is None and host.map == after


def test_the_job_waits_for_every_master_to_serve_the_map() -> None:
    m = ShardMap.of_masters(["a:1", "b:1", "c:1"], 5)
    ok = {0: stats(5), 1: stats(6), 2: stats(5)}
    assert unserved(m, ok) == ""
    assert unserved(m, {**ok, 1: stats(4)}) == "shard 1's master serves map epoch 4, not 5 yet"
    assert unserved(m, {**ok, 2: None}) == "shard 2's master does not answer"


def test_drained_means_nothing_pending_and_nothing_unacked() -> None:
    assert drain_report({2: stats(5)}) == (True, "")
    unacked = ShardStats(
        shard=2, role="master", topology_epoch=5,
        topics=({"topic": "t", "pending": 3, "group_backlog": {"g": 1}},),
    )  # fmt: skip
    assert drain_report({2: unacked, 3: stats(5)}) == (
        False,
        "shard 2: 3 pending, 1 delivered and not acked",
    )
    assert drain_report({2: None}) == (False, "shard 2's master does not answer")


def held(group: str, max_attempts: int, paused: bool = False) -> HeldPolicy:
    policy = pb.GroupPolicy(max_attempts=max_attempts, max_in_flight=9, paused=paused)
    return HeldPolicy(topic="t", group=group, policy=policy)


def test_the_groups_policies_reach_the_joining_shard_before_the_job() -> None:
    host = MemoryHost(2)
    host.policies = {0: [held("g", 4, paused=True), held("h", 2)], 1: [held("g", 4, True)]}
    d = ReshardingDriver(host, served_timeout_s=10)
    d.round(3)
    host.refuse = "UNAVAILABLE: recovering"
    got = d.round(3)
    assert got is not None and got.waiting and not host.jobs, "no job before the copy"
    assert "shard 1 refused group t/h's policy: UNAVAILABLE: recovering" in got.note
    host.refuse = ""
    d.round(3)
    assert host.calls[2:] == ["policy 1 t/h", "policy 2 t/g", "policy 2 t/h", "job 6"]
    assert host.policies[2] == [held("g", 4, paused=True), held("h", 2)], "paused stays paused"
    host.finish(JobState.FAILED)
    host.failover(0)  # the job runs again: nothing left to copy
    d.round(3)
    assert host.calls[-1] == "job 7" and host.calls[-2] == "job 6"


def test_a_policy_a_shard_holds_is_never_overwritten() -> None:
    have = {0: [held("g", 4)], 1: [held("g", 3)], 2: [held("g", 5)]}
    assert missing(have, [0, 1], [0, 1, 2]) == {}
    assert missing({**have, 2: []}, [0, 1], [0, 1, 2]) == {2: [held("g", 4)]}, "lowest source"
    assert disagreeing(have, [0, 1]) == ["t/g"] and disagreeing(have, [0]) == []


def test_a_paused_group_holding_a_drain_is_named() -> None:
    topic = {
        "topic": "t",
        "pending": 0,
        "group_backlog": {"g": 2, "h": 0},
        "groups": [{"group": "g", "paused": True}, {"group": "h", "paused": True}],
    }
    got = ShardStats(shard=2, role="master", topology_epoch=5, topics=(topic,))
    assert drain_report({2: got}) == (
        False,
        "shard 2: 0 pending, 2 delivered and not acked (paused, holding the drain until "
        "resumed and consumed: t/g)",
    )


def test_the_driver_warns_once_of_the_paused_groups_holding_a_drain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = MemoryHost(3)
    d = ReshardingDriver(host, served_timeout_s=10)
    d.round(2)
    host.finish(JobState.SUCCEEDED)
    d.round(2)
    assert host.map.changing == LEAVING
    topic = {
        "topic": "t",
        "pending": 0,
        "group_backlog": {"g": 2},
        "groups": [{"group": "g", "paused": True}],
    }
    host.shard_stats = lambda shard: ShardStats(  # type: ignore[method-assign]
        shard=shard, role="master", topology_epoch=host.map.topology_epoch, topics=(topic,)
    )
    with caplog.at_level(logging.WARNING, logger="delayq.control"):
        for _ in range(3):
            got = d.round(2)
            assert got is not None and got.step is Step.DRAIN and "t/g" in got.note
    warned = [r.getMessage() for r in caplog.records if "paused" in r.getMessage()]
    assert warned == [
        "the drain waits for paused group(s) t/g: a paused group is handed nothing; "
        "resume it (delayq group resume TOPIC GROUP) and let it consume"
    ]
