"""A topic's shard map and the ConfigMap that holds it (pure: no cluster, no I/O).

The ConfigMap ``t-shard-map`` holds ``shards.json``, written with
``delayq.shardmap``, the schema the server reads through ``--shard-map``: each
shard's master is its recorded master pod's own address, with the shard's
replication epoch; its replicas every pod of the shard.

The map's ``topology_epoch`` rises whenever its content changes and never goes
down (the servers refuse a map that lowers it): ``topology`` takes the map that
exists (the handler reads it from the ConfigMap) and the epoch last recorded in
the topic's status, and keeps the epoch when nothing changed, so re-applying is
idempotent. It keeps the shards the map lists, each in its state (``joining``
or ``leaving`` during a change of the shard count, which only the resharding
driver makes, step by step through ``delayq.control.resharding``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from delayq.addresses import ADMIN_PORT, ROCKETMQ_PORT
from delayq.shardmap import ACTIVE, ShardEntry, ShardMap

from .crd import owned_meta, pod_address, pod_name, shard_map_name
from .spec import DelayTopicSpec

__all__ = [
    "SHARD_MAP_DIR",
    "SHARD_MAP_FILE",
    "SHARD_MAP_KEY",
    "next_epoch",
    "shard_entry",
    "shard_map",
    "topology",
]

# The shard-map ConfigMap, mounted in every pod as a directory (not a subPath:
# the kubelet swaps a directory's files in place, so the server re-reads the new
# map and adding a shard restarts no pod).
SHARD_MAP_KEY = "shards.json"
SHARD_MAP_DIR = "/etc/delayq"
SHARD_MAP_FILE = f"{SHARD_MAP_DIR}/{SHARD_MAP_KEY}"


def shard_entry(
    topic: str,
    namespace: str,
    spec: DelayTopicSpec,
    shard: int,
    masters: Mapping[int, tuple[str, int]] | None = None,
    state: str = ACTIVE,
) -> ShardEntry:
    """Shard ``shard``'s map entry: its master the pod ``masters`` records for it,
    at that replication epoch (pod name, epoch; default: pod 0 at epoch 1), its
    replicas every pod of the shard, by their DNS names through the headless
    Service."""
    master, epoch = (masters or {}).get(shard, (pod_name(topic, shard, 0), 1))
    return ShardEntry(
        index=shard,
        master=pod_address(topic, namespace, shard, master, spec.port),
        replicas=tuple(
            pod_address(topic, namespace, shard, pod_name(topic, shard, r), spec.port)
            for r in range(spec.replicas_per_shard)
        ),
        epoch=epoch,
        state=state,
        admin=pod_address(topic, namespace, shard, master, ADMIN_PORT),
        rocketmq=pod_address(topic, namespace, shard, master, ROCKETMQ_PORT),
    )


def topology(
    topic: str,
    namespace: str,
    spec: DelayTopicSpec,
    current: ShardMap | None = None,
    *,
    floor: int = 0,
    masters: Mapping[int, tuple[str, int]] | None = None,
) -> ShardMap:
    """The topic's shard map of ``spec.shards`` shards (``shard_entry`` each),
    each in the state ``current`` gives it (active when it lists no such
    shard). ``topology_epoch`` is ``current``'s when nothing else differs, else
    one more than the higher of ``current``'s and ``floor`` (the epoch the
    topic's status recorded: a ConfigMap deleted or made unreadable never takes
    the epoch back down); 1 for a new topic."""
    states = {e.index: e.state for e in current.shards} if current is not None else {}
    shards = tuple(
        shard_entry(topic, namespace, spec, i, masters, states.get(i, ACTIVE))
        for i in range(spec.shards)
    )
    if current is not None and current.topology_epoch >= floor:
        same = ShardMap(topology_epoch=current.topology_epoch, shards=shards, topic=topic)
        if same == current:
            return same
    return ShardMap(topology_epoch=next_epoch(current, floor), shards=shards, topic=topic)


def next_epoch(current: ShardMap | None, floor: int) -> int:
    """The topology epoch of a map that replaces ``current``: above it and above
    the epoch the status recorded (``floor``)."""
    return max(current.topology_epoch if current else 0, floor) + 1


def shard_map(body: dict[str, Any], topo: ShardMap) -> dict[str, Any]:
    """The ConfigMap holding the map as ``shards.json``."""
    meta = body["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_meta(shard_map_name(meta["name"]), body, {}),
        "data": {SHARD_MAP_KEY: topo.dumps()},
    }
