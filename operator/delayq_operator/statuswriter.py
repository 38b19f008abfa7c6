"""The one writer of a DelayTopic's status and its pods' role labels (I/O,
through ``kube``).

``StatusWriter.write(namespace, name, update)`` is what every handler, the
topic's daemon, its keepers (on a new master) and its resharding driver call:
under the topic's lock it reads the topic and its shards, labels each pod with
its recorded role (``status.pod_roles``) and patches the status
``statusupdate.next_status`` computes, when it differs. Nothing else patches a
topic's status but the keepers' compare-and-set of their records
(``status.replication``, ``kube.Cluster.swap_record``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .kube import Cluster, now
from .status import pod_roles
from .statusupdate import StatusUpdate, next_status, observed

__all__ = ["StatusWriter"]

Lag = Callable[[str, str, int], tuple[int, int]]
"""A shard's replication lag (bytes, ms) as its keeper last heard: (namespace,
topic, shard)."""


class StatusWriter:
    """Thread-safe: a topic's writes take its lock (``lock(namespace, name)``),
    which its shard map's writers hold too."""

    def __init__(
        self, cluster: Cluster, lock: Callable[[str, str], threading.RLock], lag: Lag
    ) -> None:
        self._cluster = cluster
        self._lock = lock
        self._lag = lag

    def write(self, namespace: str, name: str, update: StatusUpdate | None = None) -> None:
        """Label the topic's pods with their recorded roles and write its status
        from what the cluster shows, the keepers last heard and ``update``."""
        cluster = self._cluster
        with self._lock(namespace, name):
            topic = cluster.get_topic(namespace, name)
            if topic is None:
                return
            shards = observed(
                cluster.shard_views(namespace, name),
                topic.get("status"),
                lambda shard: self._lag(namespace, name, shard),
            )
            for shard in shards:
                for pod, role in pod_roles(shard).items():
                    cluster.set_role(namespace, pod, role)
            status = next_status(topic, shards, update or StatusUpdate(), now())
            if status is not None:
                cluster.patch_status(namespace, name, status)
