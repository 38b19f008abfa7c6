"""Role labels, conditions and status of a DelayTopic, and its replication
records in status form, without a cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from delayq.control.record import ShardRecord
from delayq_operator.records import (
    doc_of,
    first_record,
    leaving,
    record_of,
    records_of,
    scale_down_waits,
)
from delayq_operator.status import (
    PodView,
    ShardView,
    merge_condition,
    pod_roles,
    topic_status,
)


def pod(
    ordinal: int, ready: bool = True, role: str | None = None, deleting: bool = False
) -> PodView:
    return PodView(f"t-shard-0-{ordinal}", ordinal, ready, role, deleting)


def rec(master: str = "t-shard-0-0", **kw: Any) -> ShardRecord:
    return ShardRecord(shard=0, epoch=1, master=master, insync=frozenset({master}), **kw)


def test_the_recorded_master_is_labelled_master_and_every_other_pod_replica() -> None:
    pods = (pod(0, ready=False), pod(1, role="master"), pod(2, role="replica"))
    shard = ShardView(0, 3, 2, pods, record=rec("t-shard-0-0"))
    assert pod_roles(shard) == {"t-shard-0-0": "master", "t-shard-0-1": "replica"}, (
        "the record decides, not readiness: an unready master keeps its label"
    )
    assert pod_roles(replace(shard, record=None)) == {}, "no record yet: no labels"
    leaving = ShardView(0, 1, 0, (pod(0, deleting=True),), record=rec("t-shard-0-1"))
    assert pod_roles(leaving) == {}, "a pod going away is not relabelled"


def test_a_shard_serves_once_its_recorded_master_took_office_and_is_ready() -> None:
    pods = (pod(0), pod(1))
    assert not ShardView(0, 2, 2, pods).serving(), "no record"
    assert not ShardView(0, 2, 2, pods, record=rec(in_office=False)).serving()
    assert ShardView(0, 2, 2, pods, record=rec()).serving()
    assert not ShardView(0, 2, 1, (pod(0, ready=False), pod(1)), record=rec()).serving()


def test_records_round_trip_through_the_status_and_bad_ones_are_named() -> None:
    r = ShardRecord(
        shard=3, epoch=4, master="t-shard-3-1", insync=frozenset({"t-shard-3-1", "t-shard-3-0"}),
        failovers=2, stuck="why", in_office=False,
    )  # fmt: skip
    doc = doc_of(r)
    assert doc == {
        "epoch": 4, "master": "t-shard-3-1", "insync": ["t-shard-3-0", "t-shard-3-1"],
        "failovers": 2, "inOffice": False, "stuck": "why",
    }  # fmt: skip
    assert record_of(3, {**doc, "lastFailover": "2026-11-25T04:00:00Z"}) == r
    with pytest.raises(ValueError, match=r"status.replication.3: .*epoch"):
        record_of(3, {**doc, "epoch": "four"})
    got = records_of({"replication": {"3": doc, "4": {"epoch": 1}, "x": doc}})
    assert got == {3: r}, "unreadable and misnamed entries are left out"
    assert records_of(None) == {} == records_of({})
    first = first_record("orders", 2)
    assert (first.master, first.epoch, first.insync, first.in_office, first.failovers) == (
        "orders-shard-2-0", 1, {"orders-shard-2-0"}, False, 0
    )  # fmt: skip


def test_condition_transition_time_changes_only_with_status() -> None:
    first = merge_condition([], {"type": "Ready", "status": "False", "reason": "a"}, "t1")
    same = merge_condition(first, {"type": "Ready", "status": "False", "reason": "b"}, "t2")
    flipped = merge_condition(same, {"type": "Ready", "status": "True", "reason": "c"}, "t3")
    assert [c["lastTransitionTime"] for c in (first[0], same[0], flipped[0])] == ["t1", "t1", "t3"]
    assert same[0]["reason"] == "b"


def test_status_phases_and_counts() -> None:
    ready = ShardView(0, 2, 2, (pod(0, role="master"), pod(1, role="replica")), record=rec())
    one = ShardRecord(
        shard=1, epoch=3, master="t-shard-1-0", insync=frozenset({"t-shard-1-0"}), failovers=2
    )
    half = ShardView(
        1, 2, 1, (PodView("t-shard-1-0", 0, True, "master"),), record=one,
        last_failover="2026-11-25T04:00:00Z", lag_bytes=10, lag_ms=3,
    )  # fmt: skip
    s = topic_status(wanted_shards=2, shards=[half, ready], conditions=[], generation=3, now="t")
    assert (s["phase"], s["readyShards"], s["masters"], s["observedGeneration"]) == (
        "Progressing",
        "1/2",
        2,
        3,
    )
    assert [r["index"] for r in s["shards"]] == [0, 1]
    assert s["shards"][1] == {
        "index": 1,
        "replicas": 2,
        "readyReplicas": 1,
        "master": "t-shard-1-0",
        "epoch": 3,
        "inSync": ["t-shard-1-0"],
        "lagBytes": 10,
        "lagMs": 3,
        "failovers": 2,
        "lastFailover": "2026-11-25T04:00:00Z",
        "ready": False,
    }
    founding = replace(ready, record=rec(in_office=False))
    s = topic_status(wanted_shards=1, shards=[founding], conditions=[], generation=1, now="t")
    assert (s["phase"], s["masters"]) == ("Progressing", 0), "no master in office yet"
    full = topic_status(wanted_shards=1, shards=[ready], conditions=[], generation=None, now="t")
    assert full["phase"] == "Ready" and "observedGeneration" not in full
    assert (
        topic_status(wanted_shards=1, shards=[], conditions=[], generation=1, now="t")["phase"]
        == "Pending"
    )
    failed = {"type": "Reconciled", "status": "False", "reason": "InvalidSpec", "message": "x"}
    s = topic_status(
        wanted_shards=1, shards=[ready], conditions=[], generation=1, now="t", updates=(failed,)
    )
    assert s["phase"] == "Failed"
    assert {c["type"] for c in s["conditions"]} == {"Ready", "Reconciled"}


def test_a_change_of_the_shard_count_sets_the_phase_and_the_old_refusal_goes() -> None:
    ready = ShardView(0, 1, 1, (pod(0, role="master"),), record=rec())
    refused = {"type": "ScaleDownRefused", "status": "True", "reason": "x", "message": "y"}
    common: dict[str, Any] = {"wanted_shards": 1, "shards": [ready], "generation": None}
    doc = {"step": "rebalance", "from": 2, "to": 1, "epoch": 4}
    s = topic_status(**common, conditions=[refused], now="t", rebalance=doc, changing="Rebalancing")
    assert (s["phase"], s["rebalance"]) == ("Rebalancing", doc)
    assert [c["type"] for c in s["conditions"]] == ["Ready"], "ScaleDownRefused is obsolete"
    s = topic_status(**common, conditions=[], now="t")
    assert s["phase"] == "Ready" and "rebalance" not in s


def test_topology_epoch_is_written_only_when_given() -> None:
    shards = [ShardView(0, 1, 1, (pod(0, role="master"),), record=rec())]
    common: dict[str, Any] = {"wanted_shards": 1, "shards": shards, "conditions": []}
    assert "topologyEpoch" not in topic_status(**common, generation=None, now="t")
    assert topic_status(**common, generation=3, now="t", topology_epoch=2)["topologyEpoch"] == 2


def test_the_recorded_topology_epoch_never_goes_down() -> None:
    """A writer reporting the map it wrote after a newer one was recorded (the
    reconcile handler's map 1 after a keeper's map 2) keeps the higher epoch."""
    shards = [ShardView(0, 1, 1, (pod(0, role="master"),), record=rec())]
    common: dict[str, Any] = {"wanted_shards": 1, "shards": shards, "conditions": []}
    late = topic_status(**common, generation=1, now="t", topology_epoch=1, recorded_epoch=2)
    assert late["topologyEpoch"] == 2
    newer = topic_status(**common, generation=1, now="t", topology_epoch=3, recorded_epoch=2)
    assert newer["topologyEpoch"] == 3


def test_a_scale_down_waits_while_a_pod_to_go_is_master_or_in_sync() -> None:
    rec0 = ShardRecord(
        shard=0, epoch=3, master="t-shard-0-2", insync=frozenset({"t-shard-0-2", "t-shard-0-0"})
    )
    rec1 = ShardRecord(
        shard=1, epoch=2, master="t-shard-1-0", insync=frozenset({"t-shard-1-0", "t-shard-1-1"})
    )
    records = {0: rec0, 1: rec1}
    assert leaving("t", 0, 1, 3) == {"t-shard-0-1", "t-shard-0-2"}
    assert scale_down_waits("t", 1, {0: 3, 1: 3}, records) == [
        "shard 0: t-shard-0-2, to be removed, is the master",
        "shard 1: t-shard-1-1, to be removed, still in the in-sync set",
    ]
    assert scale_down_waits("t", 2, {0: 3, 1: 3}, {1: rec1}) == [], "pod 2 holds nothing"
    assert scale_down_waits("t", 3, {0: 3, 1: 3}, records) == [], "nothing goes"
