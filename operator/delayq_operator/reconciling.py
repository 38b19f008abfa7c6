"""What the reconcile handler decides from a topic's spec and status (pure: no
cluster, no I/O).

``refusal``: a spec the operator cannot serve (a user's TLS Secret while it has
no client certificate). ``shard_count``: how many shards to apply: the ones the
shard map lists (a change of their count is the daemon's, step by step), a new
topic's ``spec.shards``, or the StatefulSets there are when the map was lost.
``topic_topology``: the map to write, on the one that exists, each shard's
master and epoch as recorded, never below the topology epoch the status
recorded. ``reconciliation``: everything to apply, in order (the
NetworkPolicy before the pods it selects, the map before the pods that mount
it), what to delete, and what to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from delayq.shardmap import ShardMap

from .desired import desired_objects
from .jobs import compaction_cronjob
from .netpolicy import OperatorPods, network_policy
from .records import records_of
from .shardmaps import topology
from .spec import DelayTopicSpec, TopicDefaults
from .status import reconciled_condition

__all__ = [
    "NO_CLIENT_CERT",
    "Reconciliation",
    "reconciliation",
    "refusal",
    "shard_count",
    "topic_topology",
]

NO_CLIENT_CERT = (
    "spec.tls.secretName: the operator has no client certificate for the shards' admin "
    "API (delayq-operator --tls-cert/--tls-key/--tls-ca; the chart's operator.tls.secretName)"
)


def refusal(spec: DelayTopicSpec, *, client_cert: bool) -> tuple[str, str] | None:
    """(reason, message) when the operator cannot keep a topic of ``spec``:
    the user's Secret while it has no client certificate (``client_cert``)."""
    if spec.tls.enabled and not spec.tls.issued and not client_cert:
        return "NoClientCertificate", NO_CLIENT_CERT
    return None


def shard_count(spec: DelayTopicSpec, current: ShardMap | None, existing: int) -> int:
    """The shards to apply: those ``current`` (the map that exists) lists; a new
    topic's ``spec.shards``; a lost map's, the ``existing`` StatefulSets."""
    return current.count if current else existing or spec.shards


def topic_topology(
    topic: Mapping[str, Any], spec: DelayTopicSpec, current: ShardMap | None
) -> ShardMap:
    """The shard map of ``spec.shards`` shards on ``current``: each shard's master
    and epoch as the status records them, never below its recorded topology epoch."""
    meta = topic["metadata"]
    status = topic.get("status") or {}
    masters = {i: (r.master, r.epoch) for i, r in records_of(status).items()}
    return topology(
        meta["name"],
        meta["namespace"],
        spec,
        current,
        floor=int(status.get("topologyEpoch") or 0),
        masters=masters,
    )


@dataclass(frozen=True)
class Reconciliation:
    count: int
    """Shards applied."""
    topology: ShardMap
    """The shard map written."""
    objects: list[dict[str, Any]]
    """Everything to apply, in order."""
    cronjob: bool
    """The compaction CronJob is among them (else: delete it)."""
    network_policy: bool
    """The NetworkPolicy is among them (else: delete it)."""
    created: str
    """The ShardsCreated event's message; "" when no shard is new."""
    applied: dict[str, Any]
    """The Reconciled condition to write."""


def reconciliation(
    body: dict[str, Any],
    topic: Mapping[str, Any],
    spec: DelayTopicSpec,
    current: ShardMap | None,
    existing: int,
    *,
    operator_pods: OperatorPods,
    defaults: TopicDefaults,
) -> Reconciliation:
    """What to apply for ``body`` (the topic as kopf gave it, plain) and ``spec``,
    on ``topic`` as read now (its status' records), ``current`` (the map there
    is) and ``existing`` StatefulSets."""
    count = shard_count(spec, current, existing)
    topo = topic_topology(topic, replace(spec, shards=count), current)
    objects = desired_objects(body, topology_map=topo, defaults=defaults)
    cron = compaction_cronjob(body, spec)
    netpol = network_policy(body, spec, operator_pods)
    created = ""
    if count > existing:
        added = ", ".join(str(i) for i in range(existing, count))
        created = f"created shard(s) {added} of {count}"
    changing = "" if count == spec.shards else f"; changing to {spec.shards} (status.rebalance)"
    return Reconciliation(
        count=count,
        topology=topo,
        objects=([netpol] if netpol else []) + objects + ([cron] if cron else []),
        cronjob=cron is not None,
        network_policy=netpol is not None,
        created=created,
        applied=reconciled_condition(True, "Applied", f"{count} shard(s) applied{changing}"),
    )
