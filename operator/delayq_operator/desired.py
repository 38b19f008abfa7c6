"""What a DelayTopic should own, as plain dicts (pure: no cluster, no I/O).

For a DelayTopic ``t`` with N shards, shard ``i`` gets:
  Service       t-shard-i-pods     headless, for stable pod DNS names; also exposes
                                   the metrics port (a ServiceMonitor's targets)
                                   (``services``)
  Service       t-shard-i          selects the shard's current master (label), for
                                   people (``kubectl port-forward``); clients use the map
  PodDisruptionBudget t-shard-i    at most one replica down at a time (``budget``)
  StatefulSet   t-shard-i          replicas = replicasPerShard, one PVC template,
                                   probes, anti-affinity (``statefulset``)
and the topic gets one ConfigMap ``t-shard-map`` with the shard map
(``shardmaps``). Every object carries an owner reference to the DelayTopic and
its labels (``crd.owned_meta``). The topic's Spark jobs are ``jobs``', its
NetworkPolicy ``netpolicy``'s. Each builder takes the parsed spec
(``spec.DelayTopicSpec``); this module puts them together in creation order.
"""

from __future__ import annotations

from typing import Any

from delayq.shardmap import ShardMap

from .budget import disruption_budget
from .services import headless_service, master_service
from .shardmaps import shard_map, topology
from .spec import TOPIC_DEFAULTS, DelayTopicSpec, TopicDefaults, parse_spec
from .statefulset import statefulset

__all__ = ["desired_objects", "shard_objects"]


def shard_objects(body: dict[str, Any], spec: DelayTopicSpec, shard: int) -> list[dict[str, Any]]:
    """What shard ``shard`` owns, in creation order (its pods last)."""
    return [
        headless_service(body, spec, shard),
        master_service(body, spec, shard),
        disruption_budget(body, spec, shard),
        statefulset(body, spec, shard),
    ]


def desired_objects(
    body: dict[str, Any],
    *,
    topology_map: ShardMap | None = None,
    defaults: TopicDefaults = TOPIC_DEFAULTS,
) -> list[dict[str, Any]]:
    """Every object the DelayTopic should own for the shards ``topology_map``
    lists (joining and leaving ones too), in creation order (the map before the
    pods that mount it). ``topology_map`` is the map to write, from ``topology``
    (the handler builds it on the map that exists); without it, a new topic's
    of ``spec.shards``."""
    spec = parse_spec(body, defaults)
    meta = body["metadata"]
    topo = topology_map or topology(meta["name"], meta["namespace"], spec)
    out = [shard_map(body, topo)]
    for shard in range(topo.count):
        out += shard_objects(body, spec, shard)
    return out
