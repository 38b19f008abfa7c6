"""A DelayTopic's observed state, role labels and conditions (pure: no cluster).

Inputs are plain views of the shard StatefulSets and pods the operator lists,
with each shard's replication record (``records``) and what its keeper last
heard (lag); outputs are the ``status`` dict to write and the role label each
pod should carry. The master is the recorded one, never chosen here (the
keepers choose, through ``delayq.control.failover``): its pod is labelled ``master``,
every other ``replica``. A shard is ready when its recorded master has taken
office, its pod is ready, and all its pods are ready. While the shard count
changes, the phase is the change's (``changes.Progress.phase``: Rebalancing,
RebalanceFailed, Draining) and ``rebalance`` shows its progress.
Condition ``lastTransitionTime`` changes only when the condition's status does.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from delayq.control.record import ShardRecord
from delayq.role import Role

from .certificates import stamp
from .spec import TlsSpec

__all__ = [
    "PodView",
    "ShardView",
    "condition",
    "merge_condition",
    "pod_roles",
    "reconciled_condition",
    "tls_condition",
    "tls_status",
    "tls_warning",
    "topic_status",
]

OBSOLETE_CONDITIONS = frozenset({"ScaleDownRefused"})
"""Conditions earlier operators wrote that no longer mean anything: dropped (a
smaller spec.shards is now a rebalance, not a refusal)."""


@dataclass(frozen=True)
class PodView:
    name: str
    ordinal: int
    ready: bool
    role: str | None = None  # current value of the role label
    deleting: bool = False
    ip: str | None = None


@dataclass(frozen=True)
class ShardView:
    index: int
    replicas: int  # desired (StatefulSet spec)
    ready_replicas: int
    pods: tuple[PodView, ...] = ()
    record: ShardRecord | None = None
    last_failover: str = ""
    lag_bytes: int = 0
    """The furthest behind of the master's replicas, as the keeper last heard."""
    lag_ms: int = 0

    def serving(self) -> bool:
        """The recorded master took office and its pod is ready."""
        rec = self.record
        if rec is None or not rec.in_office:
            return False
        return any(p.name == rec.master and p.ready and not p.deleting for p in self.pods)


def pod_roles(shard: ShardView) -> dict[str, Role]:
    """Role label changes to make: pod name -> new role (only pods that differ;
    none before the shard has a record, or while a pod is going away)."""
    if shard.record is None:
        return {}
    master = shard.record.master
    changes = {}
    for p in shard.pods:
        want = Role.MASTER if p.name == master else Role.REPLICA
        if p.role != want and not p.deleting:
            changes[p.name] = want
    return changes


def merge_condition(
    conditions: list[dict[str, Any]], new: dict[str, Any], now: str
) -> list[dict[str, Any]]:
    """Conditions with ``new`` replacing the one of its type (standard shape:
    type, status, reason, message, lastTransitionTime)."""
    out = []
    old = None
    for c in conditions:
        if c.get("type") == new["type"]:
            old = c
        else:
            out.append(c)
    changed = old is None or old.get("status") != new["status"]
    stamp = now if changed or old is None else old.get("lastTransitionTime", now)
    out.append({**new, "lastTransitionTime": stamp})
    return sorted(out, key=lambda c: str(c["type"]))


def condition(type_: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
    """A condition of the standard shape (``merge_condition`` stamps its time)."""
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
    }


def topic_status(
    *,
    wanted_shards: int,
    shards: list[ShardView],
    conditions: list[dict[str, Any]],
    generation: int | None,
    now: str,
    updates: tuple[dict[str, Any], ...] = (),
    topology_epoch: int | None = None,
    recorded_epoch: int = 0,
    rebalance: dict[str, Any] | None = None,
    changing: str | None = None,
) -> dict[str, Any]:
    """The status to write: ``conditions`` are the current ones, ``updates``
    replace those of their types (the reconcile handler's Reconciled, the
    resharding driver's Rebalanced); Ready is always recomputed.
    ``observedGeneration`` and ``topologyEpoch`` (of the shard map just
    applied) are written only when given (by the map's writers), and
    ``topologyEpoch`` never below ``recorded_epoch``, the one the status holds: a
    writer reports after it let go of the topic's lock, so a newer map's writer
    may have recorded a higher epoch meanwhile, and the recorded epoch is the
    floor of the next map (a lower one would let a deleted map come back at an
    epoch the servers already saw).
    ``rebalance`` is the change of the shard count's progress and ``changing``
    its phase while it runs (``changes.Progress``)."""
    rows = []
    masters = 0
    ready = 0
    for shard in sorted(shards, key=lambda s: s.index):
        serving = shard.serving()
        shard_ready = serving and shard.ready_replicas >= shard.replicas
        masters += serving
        ready += shard_ready
        rec = shard.record
        row: dict[str, Any] = {
            "index": shard.index,
            "replicas": shard.replicas,
            "readyReplicas": shard.ready_replicas,
            "master": rec.master if rec else "",
            "epoch": rec.epoch if rec else 0,
            "inSync": sorted(rec.insync) if rec else [],
            "lagBytes": shard.lag_bytes,
            "lagMs": shard.lag_ms,
            "failovers": rec.failovers if rec else 0,
            "ready": shard_ready,
        }
        if shard.last_failover:
            row["lastFailover"] = shard.last_failover
        if rec and rec.stuck:
            row["stuck"] = rec.stuck
        rows.append(row)
    total = max(wanted_shards, len(shards))
    all_ready = ready == total and total > 0
    conds = [c for c in conditions if c.get("type") not in OBSOLETE_CONDITIONS]
    for update in updates:
        conds = merge_condition(conds, update, now)
    conds = merge_condition(
        conds,
        condition(
            "Ready",
            all_ready,
            "AllShardsReady" if all_ready else "ShardsNotReady",
            f"{ready}/{total} shards ready, {masters} with a master in office",
        ),
        now,
    )
    failed = any(c["type"] == "Reconciled" and c["status"] == "False" for c in conds)
    if failed:
        phase = "Failed"
    elif changing:
        phase = changing
    elif all_ready:
        phase = "Ready"
    elif not shards:
        phase = "Pending"
    else:
        phase = "Progressing"
    status: dict[str, Any] = {
        "phase": phase,
        "readyShards": f"{ready}/{total}",
        "masters": masters,
        "shards": rows,
        "conditions": conds,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    if topology_epoch is not None:
        status["topologyEpoch"] = max(topology_epoch, recorded_epoch)
    if rebalance is not None:
        status["rebalance"] = rebalance
    return status


def tls_condition(mode: str, secret: str, warning: str) -> dict[str, Any]:
    """The AdminTLS condition: True while the admin port takes only the control
    plane's client certificates and its certificate is not about to expire; False
    when TLS is disabled (the admin API is open) or an expiry that renewal has not
    fixed is near (``warning``)."""
    if mode == "disabled":
        return condition(
            "AdminTLS",
            False,
            "Disabled",
            "spec.tls.mode is disabled: the admin API (Promote, Fence, the replication "
            "stream with every message) is open to any pod that reaches port 7422",
        )
    if warning:
        return condition("AdminTLS", False, "CertificateExpiring", f"{secret}: {warning}")
    how = "the operator's CA" if mode == "operator" else "the user's Secret"
    return condition("AdminTLS", True, "MutualTLS", f"{secret}, from {how}")


def tls_warning(condition: Mapping[str, Any], before: Iterable[Mapping[str, Any]]) -> bool:
    """Whether an AdminTLS ``condition`` deserves a Warning event: it is False and
    says something else than the one the status holds (``before``: its conditions)."""
    said = next((c for c in before if c.get("type") == "AdminTLS"), {})
    if condition["status"] != "False":
        return False
    return (said.get("reason"), said.get("message")) != (condition["reason"], condition["message"])


def tls_status(
    tls: TlsSpec,
    secret: str,
    not_after: datetime.datetime | None,
    renew_at: datetime.datetime | None,
) -> dict[str, Any]:
    """``status.tls``: the mode, whether the public ports serve TLS, the Secret the
    pods mount, when it (or its CA) expires, and when the operator renews it (its
    own certificates only)."""
    doc: dict[str, Any] = {"mode": tls.mode.value, "publicTls": tls.public}
    if secret:
        doc["secretName"] = secret
    if not_after is not None:
        doc["notAfter"] = stamp(not_after)
    if renew_at is not None and tls.issued:
        doc["renewAt"] = stamp(renew_at)
    return doc


def reconciled_condition(ok: bool, reason: str, message: str) -> dict[str, Any]:
    """The Reconciled condition: the spec was applied, or why not."""
    return condition("Reconciled", ok, reason, message)
