"""Master choice, conditions and status of a DelayTopic, without a cluster."""

from __future__ import annotations

from typing import Any

from delayq_operator.desired import shard_count
from delayq_operator.status import (
    PodView,
    ShardView,
    choose_master,
    merge_condition,
    pod_roles,
    scale_condition,
    topic_status,
)


def pod(
    ordinal: int, ready: bool = True, role: str | None = None, deleting: bool = False
) -> PodView:
    return PodView(f"t-shard-0-{ordinal}", ordinal, ready, role, deleting)


def test_first_ready_pod_becomes_master_and_others_slaves() -> None:
    shard = ShardView(0, 3, 2, (pod(0, ready=False), pod(1), pod(2)))
    assert choose_master(shard.pods) == "t-shard-0-1"
    assert pod_roles(shard) == {
        "t-shard-0-0": "slave",
        "t-shard-0-1": "master",
        "t-shard-0-2": "slave",
    }


def test_a_ready_master_is_kept_even_if_a_lower_ordinal_is_ready() -> None:
    shard = ShardView(0, 2, 2, (pod(0, role="slave"), pod(1, role="master")))
    assert choose_master(shard.pods) == "t-shard-0-1"
    assert pod_roles(shard) == {}


def test_unready_master_moves_and_no_ready_pod_changes_nothing() -> None:
    moved = ShardView(0, 2, 1, (pod(0, ready=False, role="master"), pod(1, role="slave")))
    assert pod_roles(moved) == {"t-shard-0-0": "slave", "t-shard-0-1": "master"}
    dark = ShardView(0, 2, 0, (pod(0, False, "master"), pod(1, False, "slave")))
    assert choose_master(dark.pods) == "t-shard-0-0"
    assert pod_roles(dark) == {}
    assert choose_master([pod(0, deleting=True)]) is None


def test_condition_transition_time_changes_only_with_status() -> None:
    first = merge_condition([], {"type": "Ready", "status": "False", "reason": "a"}, "t1")
    same = merge_condition(first, {"type": "Ready", "status": "False", "reason": "b"}, "t2")
    flipped = merge_condition(same, {"type": "Ready", "status": "True", "reason": "c"}, "t3")
    assert [c["lastTransitionTime"] for c in (first[0], same[0], flipped[0])] == ["t1", "t1", "t3"]
    assert same[0]["reason"] == "b"


def test_status_phases_and_counts() -> None:
    ready = ShardView(0, 2, 2, (pod(0, role="master"), pod(1, role="slave")))
    half = ShardView(1, 2, 1, (PodView("t-shard-1-0", 0, True, "master"),))
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
        "ready": False,
    }
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


def test_scale_down_is_refused_and_keeps_existing_shards() -> None:
    assert shard_count(3, 2) == (3, False)
    assert shard_count(1, 3) == (3, True)
    assert scale_condition(1, 3)["status"] == "True"
    assert scale_condition(3, 3)["status"] == "False"


def test_topology_epoch_is_written_only_when_given() -> None:
    shards = [ShardView(0, 1, 1, (pod(0, role="master"),))]
    common: dict[str, Any] = {"wanted_shards": 1, "shards": shards, "conditions": []}
    assert "topologyEpoch" not in topic_status(**common, generation=None, now="t")
    assert topic_status(**common, generation=3, now="t", topology_epoch=2)["topologyEpoch"] == 2
