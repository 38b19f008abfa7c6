"""The resharding driver's rounds against an in-memory cluster (``MemoryCluster``:
the topic, its shard map with a resource version, Jobs), for what the real
control plane test (tests/k8s/test_rebalance.py) does not reach: the map is
never written while the change's Job runs or failed, only after it succeeded
and only by compare-and-set; a change given up stops its running Job."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import threading
from typing import Any

import pytest
from kubernetes.client import ApiException

from delayq.control import resharding
from delayq.control.stats import ShardStats
from delayq.shardmap import LEAVING, ShardMap, parse
from delayq_operator import jobs, parse_spec
from delayq_operator.changes import PLANNED_EPOCH, Progress
from delayq_operator.kube import MapChanged
from delayq_operator.resharder import Resharder
from delayq_operator.shardmaps import shard_map, topology
from delayq_operator.spec import TopicDefaults
from delayq_operator.status import PodView, ShardView


def _job_status(state: str) -> dict[str, Any]:
    if state == "running":
        return {"active": 1}
    kind = {"succeeded": "Complete", "failed": "Failed"}[state]
    stamp = "2026-11-26T10:00:00Z"
    return {
        "failed" if state == "failed" else "succeeded": 1,
        "conditions": [{"type": kind, "status": "True", "lastTransitionTime": stamp}],
    }


class MemoryCluster:
    """The calls the driver makes, on plain dicts (not thread-safe)."""

    def __init__(self, shards: int, records: int) -> None:
        self.topic: dict[str, Any] = {
            "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
            "spec": {"shards": shards},
            "status": {"replication": {}},
        }
        for i in range(records):
            master = f"t-shard-{i}-0"
            self.topic["status"]["replication"][str(i)] = {
                "epoch": 2, "master": master, "insync": [master], "inOffice": True,
            }  # fmt: skip
        masters = {i: (f"t-shard-{i}-0", 2) for i in range(records)}
        spec = parse_spec({"spec": {"shards": records}})
        self.map = topology("t", "ns", spec, masters=masters)
        self.version = 1
        self.jobs_: dict[str, dict[str, Any]] = {}
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.events: list[str] = []

    # the driver's calls
    def get_topic(self, namespace: str, name: str) -> dict[str, Any]:
        return self.topic

    def shard_map(self, namespace: str, topic: str) -> tuple[str, str]:
        return self.map.dumps(), str(self.version)

    def write_map(self, config_map: dict[str, Any], expected_version: str) -> None:
        if expected_version != str(self.version):
            raise MapChanged("changed")
        self.map = parse(config_map["data"]["shards.json"])
        self.version += 1

    def jobs(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        return [
            j
            for j in self.jobs_.values()
            if all(j["metadata"]["labels"].get(k) == v for k, v in labels.items())
        ]

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return []

    def delete_job(self, namespace: str, name: str) -> None:
        self.deleted.append(name)
        self.jobs_.pop(name, None)

    def apply(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            if obj["kind"] == "Job":
                self.jobs_[obj["metadata"]["name"]] = {**obj, "status": {"active": 1}}
            self.applied.append(obj)

    def shard_views(self, namespace: str, topic: str) -> list[ShardView]:
        return [
            ShardView(i, 1, 1, (PodView(f"t-shard-{i}-0", 0, True, ip=None),))
            for i in range(self.map.count)
        ]

    def post_event(self, topic: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append(reason)

    def drop_records(self, namespace: str, topic: str, shards: list[int]) -> None:
        for shard in shards:
            self.topic["status"]["replication"].pop(str(shard), None)

    # the test's
    def finish(self, name: str, state: str) -> None:
        self.jobs_[name]["status"] = _job_status(state)


FAILED_AT = datetime.datetime(2026, 11, 26, 10, 0, tzinfo=datetime.UTC).timestamp()


def driver(
    cluster: MemoryCluster, now: list[float] | None = None
) -> tuple[Resharder, list[Progress]]:
    """The driver on ``cluster``; ``now[0]`` is its clock (10 s after the test
    Jobs fail, unless set)."""
    reports: list[Progress] = []
    clock = now if now is not None else [FAILED_AT + 10]

    def report(p: Progress, epoch: int | None) -> None:
        reports.append(p)
        cluster.topic["status"]["rebalance"] = p.doc()
        if epoch is not None:
            cluster.topic["status"]["topologyEpoch"] = epoch

    r = Resharder(
        cluster,  # type: ignore[arg-type]
        "ns",
        "t",
        defaults=TopicDefaults(image="delayq:0.1.0"),
        lock=threading.RLock(),
        report=report,
        clock=lambda: clock[0],
    )
    return r, reports


def serving(monkeypatch: pytest.MonkeyPatch, r: Resharder, cluster: MemoryCluster) -> None:
    """Every master answers ``Stats``, serving the map as it is then, and
    ``ListGroups``, holding no group's policy (the pods here have no IPs to ask)."""

    def stats(shard: int) -> ShardStats:
        epoch = cluster.map.topology_epoch
        return ShardStats(shard=shard, role="master", topology_epoch=epoch, topics=())

    monkeypatch.setattr(r, "shard_stats", stats)
    monkeypatch.setattr(r, "group_policies", lambda shard: [])


def scale_down(cluster: MemoryCluster, now: list[float] | None = None) -> tuple[Resharder, str]:
    """3 -> 2 with the Job started (the masters' Stats are not asked: the
    change's Job exists, so readiness is not checked again)."""
    r, _ = driver(cluster, now)
    change = jobs.change_id(cluster.map.topology_epoch, 2)
    body = {**cluster.topic, "spec": {"shards": 2}}
    job = jobs.rebalance_job(body, parse_spec(body), epoch=cluster.map.topology_epoch, target=2)
    cluster.apply([job])
    cluster.topic["status"]["rebalance"] = Progress.begin(
        resharding.Step.REBALANCE, cluster.map, 2
    ).doc()
    assert job["metadata"]["labels"][jobs.LABEL_CHANGE] == change
    return r, job["metadata"]["name"]


def test_the_map_switches_only_after_the_job_succeeded() -> None:
    cluster = MemoryCluster(shards=2, records=3)
    now = [FAILED_AT + 10]
    r, name = scale_down(cluster, now)
    before: ShardMap = cluster.map
    r.round()
    assert cluster.map == before, "running: no switch"
    cluster.finish(name, "failed")
    r.round()
    r.round()
    assert cluster.map == before, "failed: no switch"
    assert cluster.events.count("RebalanceFailed") == 1, "reported once"
    status = cluster.topic["status"]["rebalance"]
    assert (status["failed"], status["retryAt"]) == (True, "2026-11-26T10:00:30Z")
    now[0] = FAILED_AT + 31  # the retry is due; it waits for the masters to answer
    r.round()
    assert cluster.map == before and list(cluster.jobs_) == [name]
    assert cluster.topic["status"]["rebalance"]["message"].startswith("waiting: ")
    cluster.jobs_[name]["status"] = _job_status("succeeded")  # (as if the retry had)
    r.round()
    assert cluster.map.changing == LEAVING and cluster.map.owners == 2
    assert cluster.map.topology_epoch == before.topology_epoch + 1
    assert "RebalanceSucceeded" in cluster.events


def test_a_failure_seen_late_is_still_reported() -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, name = scale_down(cluster, [FAILED_AT + 3600])
    cluster.finish(name, "failed")
    r.round()
    assert cluster.events == ["RebalanceFailed"]
    assert cluster.topic["status"]["rebalance"]["failed"] is True


def test_a_switch_is_compare_and_set_on_the_map() -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, name = scale_down(cluster)
    cluster.finish(name, "succeeded")
    real = cluster.write_map

    def raced(config_map: dict[str, Any], expected_version: str) -> None:
        cluster.version += 1  # written by someone else since it was read
        real(config_map, expected_version)

    cluster.write_map = raced  # type: ignore[method-assign]
    before = cluster.map
    with contextlib.suppress(MapChanged):
        r.round()
    assert cluster.map == before


def test_raising_spec_shards_before_a_scale_down_switched_stops_its_job() -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, name = scale_down(cluster)
    cluster.topic["spec"]["shards"] = 4
    r.round()
    assert name in cluster.deleted, "two rebalances never run side by side"
    assert cluster.map.count == 4 and cluster.map.owners == 3, "then shard 3 joins"


def test_setting_spec_shards_back_gives_the_change_up() -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, name = scale_down(cluster)
    cluster.topic["spec"]["shards"] = 3
    before = cluster.map
    r.round()
    assert name in cluster.deleted and cluster.map == before
    assert cluster.topic["status"]["rebalance"]["step"] == "done"


def test_a_scale_up_adds_joining_shards_before_their_objects() -> None:
    cluster = MemoryCluster(shards=3, records=2)
    r, reports = driver(cluster)
    r.round()
    assert (cluster.map.count, cluster.map.owners) == (3, 2)
    kinds = [o["kind"] for o in cluster.applied]
    assert kinds == ["Service", "Service", "PodDisruptionBudget", "StatefulSet"]
    assert cluster.applied[-1]["metadata"]["name"] == "t-shard-2"
    assert "ShardsAdded" in cluster.events
    assert reports[-1].step == "add" and reports[-1].shards_to == 3
    assert shard_map(cluster.topic, cluster.map)["metadata"]["name"] == "t-shard-map"


def test_a_job_the_api_server_refuses_is_reported_once_as_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, _ = driver(cluster)
    serving(monkeypatch, r, cluster)
    body = '{"kind": "Status", "message": "spec.template.spec.containers[0].resources: bad"}'

    def refuse(objects: list[dict[str, Any]]) -> None:
        refusal = ApiException(status=422, reason="Unprocessable Entity")
        refusal.body = body
        raise refusal

    monkeypatch.setattr(cluster, "apply", refuse)
    before = cluster.map
    r.round()
    r.round()
    status = cluster.topic["status"]["rebalance"]
    assert status["failed"] is True and cluster.map == before
    assert status["lastError"] == (
        "the Job was refused: 422 Unprocessable Entity: "
        "spec.template.spec.containers[0].resources: bad"
    )
    assert cluster.events == ["RebalanceFailed"], "said once"


def test_a_job_a_failover_failed_runs_again_at_once_on_the_map_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, name = scale_down(cluster)
    serving(monkeypatch, r, cluster)
    planned = cluster.map.topology_epoch
    cluster.jobs_[name]["metadata"]["annotations"][PLANNED_EPOCH] = str(planned)
    moved = cluster.map.shards[0]  # a failover: shard 0's master moves, the epoch rises
    other = dataclasses.replace(moved, master=moved.master.replace("-0.", "-1."), epoch=3)
    cluster.map = dataclasses.replace(
        cluster.map, shards=(other, *cluster.map.shards[1:]), topology_epoch=planned + 1
    )
    cluster.version += 1
    cluster.topic["status"]["replication"]["0"] = {
        "epoch": 3, "master": "t-shard-0-1", "insync": ["t-shard-0-1"], "inOffice": True,
    }  # fmt: skip
    views = cluster.shard_views("ns", "t")
    pods = (PodView("t-shard-0-0", 0, True, ip=None), PodView("t-shard-0-1", 1, True, ip=None))
    views[0] = dataclasses.replace(views[0], replicas=2, pods=pods)
    monkeypatch.setattr(cluster, "shard_views", lambda ns, t: views)
    cluster.finish(name, "failed")
    r.round()
    assert "RebalanceFailed" in cluster.events, "the failure is said"
    rerun = [n for n in cluster.jobs_ if n != name]
    assert len(rerun) == 1, "run again at once, not after the back-off"
    job = cluster.jobs_[rerun[0]]
    assert job["metadata"]["annotations"][PLANNED_EPOCH] == str(planned + 1)
    assert job["metadata"]["labels"][jobs.LABEL_RETRY] == "1"
    status = cluster.topic["status"]["rebalance"]
    assert status["failed"] is False and "a failover" in status["message"]
    cluster.finish(rerun[0], "succeeded")
    r.round()
    assert cluster.map.changing == LEAVING, "switched"
    assert cluster.map.shards[0].master == other.master, "keeping the failover"


def test_a_job_failed_on_its_own_map_waits_out_its_back_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, name = scale_down(cluster)
    serving(monkeypatch, r, cluster)
    epoch = str(cluster.map.topology_epoch)
    cluster.jobs_[name]["metadata"]["annotations"][PLANNED_EPOCH] = epoch
    cluster.finish(name, "failed")
    r.round()
    assert list(cluster.jobs_) == [name]


def test_a_drained_shard_is_deleted_only_once_every_kept_pod_serves_the_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = MemoryCluster(shards=2, records=3)
    r, name = scale_down(cluster)
    serving(monkeypatch, r, cluster)
    cluster.finish(name, "succeeded")
    r.round()  # switched: shard 2 leaving
    deleted: list[int] = []
    monkeypatch.setattr(
        cluster, "delete_shard", lambda ns, t, shard: deleted.append(shard), raising=False
    )
    pods = {i: (PodView(f"t-shard-{i}-0", 0, True, ip=None),) for i in range(3)}
    monkeypatch.setattr(  # shard 2's StatefulSet is there until deleted
        cluster,
        "shard_views",
        lambda ns, t: [ShardView(i, 1, 1, pods[i]) for i in range(3) if i not in deleted],
    )
    served = {"t-shard-0-0": 0, "t-shard-1-0": 0}  # what each kept pod serves

    def node_stats(shards: list[int]) -> dict[str, ShardStats | None]:
        return {
            p: ShardStats(shard=0, role="master", topology_epoch=e, topics=())
            for p, e in served.items()
        }

    monkeypatch.setattr(r, "node_stats", node_stats)
    r.round()  # drained: dropped from the map
    assert cluster.map.count == 2 and "ShardsDrained" in cluster.events
    r.round()
    assert deleted == [], "a kept pod still serves the old map: clients may fetch it there"
    assert "not yet: t-shard-0-0, t-shard-1-0" in cluster.topic["status"]["rebalance"]["message"]
    served["t-shard-0-0"] = served["t-shard-1-0"] = cluster.map.topology_epoch
    r.round()
    assert deleted == [2]
    assert cluster.topic["status"]["rebalance"]["step"] == "done"
    assert "2" not in cluster.topic["status"]["replication"], "its record dropped"
