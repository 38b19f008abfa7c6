"""What the reconcile handler decides from a topic's spec and status
(``reconciling``), and what a status write becomes (``statusupdate``), without
a cluster."""

from __future__ import annotations

from typing import Any

from delayq import shardmap
from delayq.control.record import ShardRecord
from delayq.control.resharding import Step
from delayq_operator import parse_spec
from delayq_operator.changes import Progress
from delayq_operator.netpolicy import OperatorPods
from delayq_operator.reconciling import (
    NO_CLIENT_CERT,
    reconciliation,
    refusal,
    shard_count,
    topic_topology,
)
from delayq_operator.records import doc_of
from delayq_operator.spec import TopicDefaults
from delayq_operator.status import PodView, ShardView, tls_status, tls_warning
from delayq_operator.statusupdate import StatusUpdate, next_status, observed
from tests.operator.test_operator_desired import topic

PODS = OperatorPods()


def plan(body: dict[str, Any], current: shardmap.ShardMap | None = None, existing: int = 0) -> Any:
    spec = parse_spec(body)
    return reconciliation(
        body, body, spec, current, existing, operator_pods=PODS, defaults=TopicDefaults(image="img")
    )


def test_a_new_topic_gets_its_shards_the_policy_first_and_the_cronjob_last() -> None:
    got = plan(topic(shards=2, compaction={"schedule": "@daily"}))
    assert got.count == 2
    kinds = [o["kind"] for o in got.objects]
    assert kinds[:2] == ["NetworkPolicy", "ConfigMap"], "the policy and the map before the pods"
    assert kinds[-1] == "CronJob"
    assert kinds.count("StatefulSet") == 2
    assert (got.cronjob, got.network_policy) == (True, True)
    assert got.created == "created shard(s) 0, 1 of 2"
    assert got.topology.topology_epoch == 1
    assert (got.applied["status"], got.applied["message"]) == ("True", "2 shard(s) applied")


def test_what_the_spec_turns_off_is_to_be_deleted() -> None:
    got = plan(topic(networkPolicy={"enabled": False}))
    assert (got.cronjob, got.network_policy) == (False, False)
    assert {o["kind"] for o in got.objects} == {
        "ConfigMap", "Service", "PodDisruptionBudget", "StatefulSet",
    }  # fmt: skip


def test_an_existing_topic_keeps_the_shards_its_map_lists_the_daemon_changes_them() -> None:
    body = topic(shards=3)
    current = plan(topic(shards=2)).topology
    got = plan(body, current, existing=2)
    assert got.count == 2, "a change of the count is the resharding driver's"
    assert got.created == ""
    assert got.applied["message"] == "2 shard(s) applied; changing to 3 (status.rebalance)"
    assert got.topology == current, "nothing changed: the same map at the same epoch"


def test_a_lost_map_is_rebuilt_from_the_statefulsets_there_are() -> None:
    spec = parse_spec(topic(shards=1))
    assert shard_count(spec, None, 3) == 3
    assert shard_count(spec, None, 0) == 1, "a new topic: spec.shards"


def test_the_map_follows_the_records_and_never_goes_below_the_recorded_epoch() -> None:
    body = topic(shards=1, replicasPerShard=2)
    record = ShardRecord(shard=0, epoch=3, master="orders-shard-0-1", insync=frozenset())
    body["status"] = {"topologyEpoch": 7, "replication": {"0": doc_of(record)}}
    topo = topic_topology(body, parse_spec(body), None)
    assert topo.topology_epoch == 8, "a lost map comes back above the epoch recorded"
    (entry,) = topo.shards
    assert entry.master.startswith("orders-shard-0-1.orders-shard-0-pods.prod.svc:")
    assert entry.epoch == 3
    again = topic_topology(body, parse_spec(body), topo)
    assert again == topo, "re-applying keeps the map and its epoch"


def test_a_users_secret_needs_the_operators_client_certificate() -> None:
    users = parse_spec(topic(tls={"secretName": "orders-tls"}))
    assert refusal(users, client_cert=False) == ("NoClientCertificate", NO_CLIENT_CERT)
    assert refusal(users, client_cert=True) is None
    assert refusal(parse_spec(topic()), client_cert=False) is None, "the operator's own CA"
    disabled = parse_spec(topic(tls={"mode": "disabled"}))
    assert refusal(disabled, client_cert=False) is None


def shard(index: int = 0, ready: bool = True) -> ShardView:
    pods = (PodView(f"orders-shard-{index}-0", 0, ready),)
    return ShardView(index, 1, 1 if ready else 0, pods)


def served(topic_: dict[str, Any]) -> list[ShardView]:
    return observed([shard()], topic_.get("status"), lambda _: (0, 0))


def test_a_status_write_that_changes_nothing_is_not_made() -> None:
    body = topic(shards=1)
    record = ShardRecord(shard=0, epoch=2, master="orders-shard-0-0", insync=frozenset())
    body["status"] = {"replication": {"0": {**doc_of(record), "inOffice": True}}}
    first = next_status(body, served(body), StatusUpdate(topology_epoch=1), "t1")
    assert first is not None and first["phase"] == "Ready"
    body["status"].update(first)
    assert next_status(body, served(body), StatusUpdate(), "t2") is None
    assert next_status(body, served(body), StatusUpdate(topology_epoch=1), "t2") is None


def test_the_recorded_topology_epoch_is_a_floor_and_tls_is_kept_unless_given() -> None:
    body = topic(shards=1)
    body["status"] = {"topologyEpoch": 9, "tls": {"mode": "operator"}}
    got = next_status(body, served(body), StatusUpdate(topology_epoch=4), "t")
    assert got is not None and got["topologyEpoch"] == 9
    assert "tls" not in got, "kept as the status holds it"
    doc = {"mode": "disabled", "publicTls": False}
    got = next_status(body, served(body), StatusUpdate(tls=doc), "t")
    assert got is not None and got["tls"] == doc


def test_a_changes_progress_sets_the_phase_and_is_kept_as_recorded() -> None:
    body = topic(shards=3)
    current = plan(topic(shards=2)).topology
    progress = Progress.begin(Step.ADD, current, 3)
    got = next_status(body, served(body), StatusUpdate(progress=progress), "t")
    assert got is not None
    assert (got["phase"], got["rebalance"]) == ("Rebalancing", progress.doc())
    (rebalanced,) = [c for c in got["conditions"] if c["type"] == "Rebalanced"]
    assert rebalanced["status"] == "False"
    body["status"] = got
    assert next_status(body, served(body), StatusUpdate(), "t") is None
    again = next_status(body, served(body), StatusUpdate(topology_epoch=2), "t")
    assert again is not None, "a new epoch to record"
    assert (again["phase"], again["rebalance"]) == ("Rebalancing", progress.doc()), (
        "a writer that says nothing of the change keeps its progress as recorded"
    )


def test_observed_shards_carry_their_record_last_failover_and_lag() -> None:
    record = ShardRecord(shard=0, epoch=5, master="orders-shard-0-0", insync=frozenset())
    status = {"replication": {"0": {**doc_of(record), "lastFailover": "2026-01-01T00:00:00Z"}}}
    (got,) = observed([shard()], status, lambda i: (100 + i, 7))
    assert got.record is not None and got.record.epoch == 5
    assert (got.last_failover, got.lag_bytes, got.lag_ms) == ("2026-01-01T00:00:00Z", 100, 7)
    (bare,) = observed([shard()], None, lambda _: (0, 0))
    assert (bare.record, bare.last_failover) == (None, "")


def test_admin_tls_warns_once_per_new_reason_and_the_tls_status_names_the_secret() -> None:
    falsy = {"type": "AdminTLS", "status": "False", "reason": "Disabled", "message": "open"}
    assert tls_warning(falsy, [])
    assert not tls_warning(falsy, [falsy]), "said already"
    assert tls_warning(falsy, [{**falsy, "message": "other"}])
    assert not tls_warning({**falsy, "status": "True"}, [])
    issued = parse_spec(topic())
    doc = tls_status(issued.tls, "orders-shard-tls", None, None)
    assert doc == {"mode": "operator", "publicTls": False, "secretName": "orders-shard-tls"}


def test_groups_are_kept_unless_given_and_an_unchanged_round_writes_nothing() -> None:
    body = topic(shards=1)
    entries = ({"name": "billing", "applied": True, "paused": False, "inFlight": 3},)
    body["status"] = {"topologyEpoch": 1, "groups": list(entries)}
    got = next_status(body, served(body), StatusUpdate(), "t")
    assert got is not None and "groups" not in got, "kept as the status holds it"
    body["status"].update(got)
    assert next_status(body, served(body), StatusUpdate(groups=entries), "t") is None
    moved = ({**entries[0], "inFlight": 4},)
    got = next_status(body, served(body), StatusUpdate(groups=moved), "t")
    assert got is not None and got["groups"] == list(moved)
