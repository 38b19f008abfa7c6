"""The shard keepers of one DelayTopic: its replication control plane.

One ``delayq.control.keeper.ShardKeeper`` a shard, each in its own thread, probes the
shard's pods through the admin ``Status`` RPC (at their pod IPs: the operator
may not resolve pod DNS names), applies ``delayq.control.failover.decide`` and carries
out its action. What it needs from Kubernetes is wired here:

* ``store``: the shard's record in ``status.replication``, swapped by
  compare-and-set on the resource version (``Cluster.swap_record``), expecting
  the record the keeper holds. A record somebody else changed is not
  overwritten: the keeper logs it and the topic's keepers start afresh from
  what is recorded.
* ``publish``: a master change goes into the shard map and the role labels
  (the caller's ``publish``, under the topic's lock).
* ``on_event``: events on the DelayTopic (``MasterLost``, ``Fenced``,
  ``Promoted``, ``FailoverStuck``, ``InSyncChanged``).
* followers are told the master's pod DNS name (its ``--advertise``).
* a topic with TLS (the default) is dialled over TLS with the client certificate
  ``tls`` gives for its spec (the namespace's control certificate, or the
  operator's own for a user's Secret), each pod's certificate verified for its DNS
  name though dialled at its IP; a renewed certificate or trust bundle is dialled
  afresh (``GrpcAdmin.set_tls``); without a certificate its shards are not kept
  (the reconcile handler reports why).

``sync`` (the topic's daemon calls it every second) creates a missing shard's
first record, starts a keeper for each shard that has one, gives the keepers
the pods' current IPs and the pods that are going away (being deleted, or above
a smaller ``replicasPerShard``: ``ShardKeeper.retire``), and restarts a keeper
whose pod set or replication mode changed. A shard's pods are
``<shard>-0 .. <shard>-(replicas-1)``; a pod not created yet simply does not
answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from delayq.addresses import ADMIN_PORT
from delayq.control.admin import GrpcAdmin
from delayq.control.keeper import KeeperSettings, ShardKeeper
from delayq.control.record import ShardRecord
from delayq.tls import TlsConfig

from .crd import pod_address, pod_name
from .kube import Cluster, RecordChanged
from .records import first_record, leaving, records_of
from .spec import DelayTopicSpec, SpecError, TopicDefaults, min_insync, parse_spec
from .status import ShardView

__all__ = ["WARNING_REASONS", "TopicKeepers"]

log = logging.getLogger("delayq_operator.keepers")

WARNING_REASONS = frozenset({"MasterLost", "Fenced", "FailoverStuck"})


@dataclass
class _Running:
    keeper: ShardKeeper
    admin: GrpcAdmin
    nodes: tuple[str, ...]
    settings: KeeperSettings
    tls: bool
    """The topic's pods serve TLS (a change restarts the keeper)."""


class TopicKeepers:
    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        name: str,
        *,
        base: KeeperSettings,
        publish: Callable[[ShardRecord], None],
        defaults: TopicDefaults,
        tls: Callable[[DelayTopicSpec], TlsConfig | None] = lambda _: None,
    ) -> None:
        """``base``: probe interval, timeouts and lease (the replication mode and
        ``min_insync`` come from each topic's spec); ``tls``: the client
        certificate to call a topic's pods with as it is now (None: none yet)."""
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.base = base
        self._publish = publish
        self._defaults = defaults
        self._tls = tls
        self._running: dict[int, _Running] = {}
        self._stale: set[int] = set()
        self._lock = threading.Lock()

    # -- the daemon's round
    def sync(self) -> dict[str, Any] | None:
        """One round; the topic as read (None: it is gone)."""
        topic = self.cluster.get_topic(self.namespace, self.name)
        if topic is None or topic["metadata"].get("deletionTimestamp"):
            return topic
        try:
            spec = parse_spec(topic, self._defaults)
        except SpecError:
            return topic  # the reconcile handler reports it
        views = self.cluster.shard_views(self.namespace, self.name)
        records = records_of(topic.get("status"))
        tls = self._tls(spec) if spec.tls.enabled else None
        if spec.tls.enabled and tls is None:
            return topic  # no certificate to call its pods with (the reconcile handler says so)
        with self._lock:
            for shard in self._stale & set(self._running):
                self._running.pop(shard).keeper.stop()
            self._stale.clear()
            for view in views:
                self._sync_shard(topic, spec, view, records.get(view.index), tls)
            for gone in set(self._running) - {v.index for v in views}:
                self._running.pop(gone).keeper.stop()
        return topic

    def _sync_shard(
        self,
        topic: dict[str, Any],
        spec: DelayTopicSpec,
        view: ShardView,
        rec: ShardRecord | None,
        tls: TlsConfig | None,
    ) -> None:
        shard = view.index
        if rec is None:
            try:
                new = first_record(self.name, shard)
                self.cluster.swap_record(self.namespace, self.name, shard, None, new)
            except RecordChanged:
                pass  # written meanwhile: the next round reads it
            return
        nodes = tuple(pod_name(self.name, shard, r) for r in range(max(view.replicas, 1)))
        settings = replace(self.base, sync=spec.replication == "sync", min_insync=min_insync(spec))
        secure = spec.tls.enabled
        run = self._running.get(shard)
        if run is not None and (run.nodes, run.settings, run.tls) != (nodes, settings, secure):
            if rec.master not in nodes:
                log.warning(
                    "%s/%s shard %d: %s, the master, is not among the pods %s; keeping the "
                    "pods as they were until it is not the master",
                    self.namespace, self.name, shard, rec.master, list(nodes),
                )  # fmt: skip
            else:
                self._running.pop(shard).keeper.stop()
                run = None
        if run is None:
            run = self._start(topic, spec, shard, nodes, settings, rec, tls)
            self._running[shard] = run
        run.admin.set_tls(tls)
        for pod in view.pods:
            address = f"{pod.ip}:{ADMIN_PORT}" if pod.ip else None
            dns = pod_address(self.name, self.namespace, shard, pod.name, ADMIN_PORT)
            run.admin.set_address(pod.name, address, server_name=dns.rpartition(":")[0])
        deleting = {p.name for p in view.pods if p.deleting}
        gone = leaving(self.name, shard, spec.replicas_per_shard, view.replicas)
        run.keeper.retire(frozenset(deleting) | gone)

    def _start(
        self,
        topic: dict[str, Any],
        spec: DelayTopicSpec,
        shard: int,
        nodes: tuple[str, ...],
        settings: KeeperSettings,
        rec: ShardRecord,
        tls: TlsConfig | None,
    ) -> _Running:
        admin = GrpcAdmin(dict.fromkeys(nodes), tls=tls)

        def store(new: ShardRecord) -> None:
            # the keeper calls it before it holds ``new``: the record it holds is
            # the one expected in the status
            try:
                self.cluster.swap_record(self.namespace, self.name, shard, keeper.record, new)
            except RecordChanged:
                self._stale.add(shard)  # start afresh from the record as it is
                raise

        def on_event(reason: str, message: str) -> None:
            kind = "Warning" if reason in WARNING_REASONS else "Normal"
            try:
                self.cluster.post_event(topic, kind, reason, message)
            except Exception as exc:  # an event is worth a log line, never a failover
                log.warning("cannot post event %s: %s", reason, exc)

        keeper = ShardKeeper(
            shard=shard,
            nodes=[
                (n, pod_address(self.name, self.namespace, shard, n, ADMIN_PORT)) for n in nodes
            ],
            record=rec,
            settings=settings,
            admin=admin,
            store=store,
            publish=self._publish,
            on_event=on_event,
        )
        keeper.start()
        log.info(
            "%s/%s shard %d: keeping %s (%s replication, min in-sync %d), recorded %s",
            self.namespace, self.name, shard, list(nodes), spec.replication,
            settings.min_insync, rec,
        )  # fmt: skip
        return _Running(
            keeper=keeper, admin=admin, nodes=nodes, settings=settings, tls=spec.tls.enabled
        )

    def stop(self) -> None:
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for run in running:
            run.keeper.stop()

    # -- for the status rows
    def lag(self, shard: int) -> tuple[int, int]:
        """(bytes, ms) the furthest-behind replica of shard ``shard`` trails its
        master by, as last heard; (0, 0) when unknown."""
        run = self._running.get(shard)
        if run is None:
            return 0, 0
        master = run.keeper.answers().get(run.keeper.record.master)
        if master is None or not master.replicas:
            return 0, 0
        return (
            max(r.lag_bytes for r in master.replicas),
            max(r.lag_ms for r in master.replicas),
        )
