"""A DelayTopic's observed state, master choice and conditions (pure: no cluster).

Inputs are plain views of the shard StatefulSets and pods the operator lists;
outputs are the ``status`` dict to write and the role each pod should carry.
Invariants: a shard has at most one master; a ready master is never moved
(no flapping); when the master is not ready, the ready pod with the lowest
ordinal takes over; with no ready pod the labels stay as they are.
Condition ``lastTransitionTime`` changes only when the condition's status does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "PodView",
    "ShardView",
    "choose_master",
    "merge_condition",
    "pod_roles",
    "reconciled_condition",
    "scale_condition",
    "topic_status",
]

MASTER = "master"
SLAVE = "slave"


@dataclass(frozen=True)
class PodView:
    name: str
    ordinal: int
    ready: bool
    role: str | None = None  # current value of the role label
    deleting: bool = False


@dataclass(frozen=True)
class ShardView:
    index: int
    replicas: int  # desired (StatefulSet spec)
    ready_replicas: int
    pods: tuple[PodView, ...] = ()


def choose_master(pods: tuple[PodView, ...] | list[PodView]) -> str | None:
    """The pod that should be the shard's master, or None if no pod is ready."""
    live = [p for p in pods if p.ready and not p.deleting]
    current = [p for p in live if p.role == MASTER]
    if current:
        return min(current, key=lambda p: p.ordinal).name
    if not live:
        labelled = [p for p in pods if p.role == MASTER and not p.deleting]
        return min(labelled, key=lambda p: p.ordinal).name if labelled else None
    return min(live, key=lambda p: p.ordinal).name


def pod_roles(shard: ShardView) -> dict[str, str]:
    """Role label changes to make: pod name -> new role (only pods that differ)."""
    master = choose_master(shard.pods)
    if master is None:
        return {}
    changes = {}
    for p in shard.pods:
        want = MASTER if p.name == master else SLAVE
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


def _condition(type_: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
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
) -> dict[str, Any]:
    """The status to write: ``conditions`` are the current ones, ``updates``
    replace those of their types (the reconcile handler's Reconciled and
    ScaleDownRefused); Ready is always recomputed. ``observedGeneration`` and
    ``topologyEpoch`` (of the shard map just applied) are written only when
    given (by the reconcile handler)."""
    rows = []
    masters = 0
    ready = 0
    for shard in sorted(shards, key=lambda s: s.index):
        master = choose_master(shard.pods)
        master_ready = any(p.name == master and p.ready for p in shard.pods)
        shard_ready = master_ready and shard.ready_replicas >= shard.replicas
        masters += master_ready
        ready += shard_ready
        rows.append(
            {
                "index": shard.index,
                "replicas": shard.replicas,
                "readyReplicas": shard.ready_replicas,
                "master": master or "",
                "ready": shard_ready,
            }
        )
    total = max(wanted_shards, len(shards))
    all_ready = ready == total and total > 0
    conds = list(conditions)
    for update in updates:
        conds = merge_condition(conds, update, now)
    conds = merge_condition(
        conds,
        _condition(
            "Ready",
            all_ready,
            "AllShardsReady" if all_ready else "ShardsNotReady",
            f"{ready}/{total} shards ready, {masters} with a ready master",
        ),
        now,
    )
    failed = any(c["type"] == "Reconciled" and c["status"] == "False" for c in conds)
    if failed:
        phase = "Failed"
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
        status["topologyEpoch"] = topology_epoch
    return status


def reconciled_condition(ok: bool, reason: str, message: str) -> dict[str, Any]:
    """The Reconciled condition: the spec was applied, or why not."""
    return _condition("Reconciled", ok, reason, message)


def scale_condition(wanted: int, existing: int) -> dict[str, Any]:
    """The ScaleDownRefused condition for ``spec.shards`` vs existing shards."""
    if wanted < existing:
        return _condition(
            "ScaleDownRefused",
            True,
            "ShardsHoldData",
            f"spec.shards={wanted} is below the {existing} existing shards; removing a "
            "shard would drop its messages, so all are kept (rebalancing comes later)",
        )
    return _condition("ScaleDownRefused", False, "NoScaleDown", "no shard removal requested")
