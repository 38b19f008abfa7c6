"""kopf handlers: reconcile DelayTopics and keep their status and master roles.

- create/resume/update(spec): parse the spec (invalid -> Failed status, Warning
  event, no retries), build the shard map on the one that exists (the shards
  it lists, each in its state) and the topology epoch the status recorded
  (``status.topologyEpoch``, written after each apply), server-side apply
  every owned object (the compaction CronJob when ``spec.compaction.schedule``
  is set, deleted when not; the NetworkPolicy, ``netpolicy``, first, unless
  ``spec.networkPolicy.enabled`` is false: then deleted), post events. Before
  any of it, the topic's certificates (``certificates``) are issued or renewed
  (``issuer``): no pod starts without the Secret it mounts. A new
  topic gets ``spec.shards`` shards at once; a change of an existing topic's
  count is the daemon's.
- a daemon per topic (``keep_shards``) runs its shard keepers (``keepers``):
  the replication control plane; a master change they make is published into
  the shard map and the role labels (``publish``); and its resharding driver
  (``resharder``): a change of ``spec.shards`` step by step (new shards
  joining, the rebalance Job, the map switch, draining and removing shards),
  its progress in ``status.rebalance`` (its new shards' names go into the
  topic's certificate before their pods are created); and every
  ``cert_period`` its certificates' renewal and rotation, ``status.tls`` and
  the AdminTLS condition.
- events of owned StatefulSets and pods, and every few seconds from the
  daemon: label pods with their recorded role (``delayq.io/role``), recompute
  status (ready shards, masters in office, per shard epoch, in-sync set, lag,
  failovers, conditions).
The shard map is written under the topic's lock by the reconcile handler,
``publish`` and the resharding driver alike, from the records
(``status.replication``) and the map as they are then.
Deletion needs no handler: owner references let the garbage collector remove
what a DelayTopic owns; PVCs follow ``spec.pvcRetention`` through the
StatefulSets' retention policy. (kopf puts its finalizer on a topic while its
daemon runs, and takes it off once the daemon has stopped its keepers; the
daemon, which reads its topic every second, stops on a deletion itself and
takes the finalizer off when kopf has not: kopf may stop watching a namespace
being deleted, which would then wait for the finalizer for ever.)
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import kopf
from kubernetes.client import ApiException

from delayq.control.keeper import KeeperSettings
from delayq.control.record import ShardRecord
from delayq.shardmap import ShardMap, ShardMapError, parse
from delayq.tls import TlsConfig

from .certificates import CertSettings, stamp
from .changes import Progress
from .crd import GROUP, LABEL_TOPIC, MANAGER, PLURAL, VERSION, shard_map_name
from .desired import desired_objects
from .issuer import Issuer, TopicCerts
from .jobs import compaction_cronjob, compaction_name
from .keepers import TopicKeepers
from .kube import Cluster, NotOurs, load_client, now
from .netpolicy import OperatorPods, network_policy, network_policy_name
from .records import records_of, scale_down_waits
from .resharder import Resharder
from .shardmaps import SHARD_MAP_KEY, shard_map, topology
from .spec import IMAGE_DEFAULT, DelayTopicSpec, SpecError, parse_spec
from .status import pod_roles, reconciled_condition, tls_condition, topic_status

__all__ = ["keep_shards", "reconcile"]

MANAGED = {"app.kubernetes.io/managed-by": MANAGER}
DAEMON_ROUND_S = 1.0
"""How often a topic's daemon re-reads its pods (new IPs, new shards)."""
STATUS_EVERY_S = 5.0
"""How often the daemon rewrites the status rows (lag changes without events)."""
NO_CLIENT_CERT = (
    "spec.tls.secretName: the operator has no client certificate for the shards' admin "
    "API (delayq-operator --tls-cert/--tls-key/--tls-ca; the chart's operator.tls.secretName)"
)
FINALIZER = f"{GROUP}/finalizer"
"""kopf's, on a topic while its daemon runs."""
CERT_PERIOD_MAX_S = 30.0
"""How often a topic's daemon renews its certificates at most (``cert_period``)."""


def cert_period(settings: CertSettings) -> float:
    """Seconds between certificate rounds: half the settle time, at most 30 s (a
    rotation waits out ``settle`` twice; with the defaults that is 5 minutes)."""
    return min(CERT_PERIOD_MAX_S, settings.settle.total_seconds() / 2)


def _plain(value: Any) -> Any:
    """kopf's read-only body views as plain JSON-like values."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _lock(memo: kopf.Memo, namespace: str, name: str) -> threading.RLock:
    """One writer of a topic's status and shard map at a time (handlers, daemons
    and keepers run in threads)."""
    with memo.locks_guard:
        lock: threading.RLock = memo.locks.setdefault((namespace, name), threading.RLock())
        return lock


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300  # re-open quiet watches (kopf #1276)
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # a topic's daemon stops its keepers within about two seconds of being told:
    # waited for as an "instant" exit, a deleted topic's finalizer goes at once
    # (else kopf looks again only when the cancellation timeout is over)
    settings.background.instant_exit_timeout = 5.0
    memo.setdefault("default_image", IMAGE_DEFAULT)
    memo.setdefault("keeper_settings", KeeperSettings())
    memo.setdefault("admin_tls", None)
    memo.setdefault("operator_pods", OperatorPods())
    memo.setdefault("keepers", {})
    memo.setdefault("locks", {})
    memo.setdefault("locks_guard", threading.Lock())
    if "cluster" not in memo:
        memo.cluster = Cluster(load_client())
    if "issuer" not in memo:
        files = Path(tempfile.gettempdir()) / "delayq-operator-certs"
        memo.issuer = Issuer(memo.cluster, CertSettings(), files)


def _client_tls(memo: kopf.Memo, namespace: str) -> Callable[[DelayTopicSpec], TlsConfig | None]:
    """The keepers' client certificate for a topic's pods: the namespace's control
    certificate (the operator's CA), or the operator's own for a user's Secret."""

    def tls(spec: DelayTopicSpec) -> TlsConfig | None:
        if spec.tls.issued:
            issuer: Issuer = memo.issuer
            return issuer.control_tls(namespace)
        tls: TlsConfig | None = memo.admin_tls
        return tls

    return tls


def certificates(
    memo: kopf.Memo, topic: dict[str, Any], spec: DelayTopicSpec, *, shards: int = 0
) -> None:
    """The topic's TLS as its spec says: the operator's certificates issued or
    renewed for ``spec.shards`` (or ``shards`` when more) shards, or the user's
    Secret looked at; an event for each Secret written and for a change of the
    AdminTLS condition to False; ``status.tls``. Raises ``ApiException``, ``NotOurs``."""
    cluster: Cluster = memo.cluster
    issuer: Issuer = memo.issuer
    meta = topic["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    tls = spec.tls
    if tls.issued:
        certs = issuer.topic(topic, spec, shards=shards)
    elif tls.enabled:
        certs = issuer.users(namespace, tls.secret_name)
    else:
        certs = TopicCerts("")
    for reason, message in certs.changes:
        cluster.post_event(topic, "Normal", reason, message)
    condition = tls_condition(tls.mode.value, certs.secret, certs.warning)
    doc: dict[str, Any] = {"mode": tls.mode.value, "publicTls": tls.public}
    if certs.secret:
        doc["secretName"] = certs.secret
    if certs.not_after is not None:
        doc["notAfter"] = stamp(certs.not_after)
    if certs.renew_at is not None and tls.issued:
        doc["renewAt"] = stamp(certs.renew_at)
    before = [
        c
        for c in (topic.get("status") or {}).get("conditions") or []
        if c.get("type") == "AdminTLS"
    ]
    said = before[0] if before else {}
    if condition["status"] == "False" and (said.get("reason"), said.get("message")) != (
        condition["reason"],
        condition["message"],
    ):
        cluster.post_event(topic, "Warning", condition["reason"], condition["message"])
    refresh(memo, namespace, name, updates=(condition,), tls=doc)


def refresh(
    memo: kopf.Memo,
    namespace: str,
    name: str,
    *,
    generation: int | None = None,
    updates: tuple[dict[str, Any], ...] = (),
    topology_epoch: int | None = None,
    progress: Progress | None = None,
    tls: dict[str, Any] | None = None,
) -> None:
    """Label pods with their recorded roles and write the topic's status from what
    the cluster shows, the keepers last heard and, while the shard count
    changes, its ``progress`` (as given, else as the status holds it); ``tls``:
    ``status.tls`` (else kept)."""
    cluster: Cluster = memo.cluster
    with _lock(memo, namespace, name):
        topic = cluster.get_topic(namespace, name)
        if topic is None:
            return
        current = topic.get("status") or {}
        records = records_of(current)
        docs = current.get("replication") or {}
        keepers: TopicKeepers | None = memo.keepers.get((namespace, name))
        shards = []
        for view in cluster.shard_views(namespace, name):
            lag = keepers.lag(view.index) if keepers else (0, 0)
            last = (docs.get(str(view.index)) or {}).get("lastFailover") or ""
            shards.append(
                replace(
                    view,
                    record=records.get(view.index),
                    last_failover=str(last),
                    lag_bytes=lag[0],
                    lag_ms=lag[1],
                )
            )
        for shard in shards:
            for pod, role in pod_roles(shard).items():
                cluster.set_role(namespace, pod, role)
        if progress is not None:
            updates = (*updates, progress.condition())
        else:
            progress = Progress.of(current.get("rebalance"))
        status = topic_status(
            wanted_shards=int((topic.get("spec") or {}).get("shards", 1)),
            shards=shards,
            conditions=list(current.get("conditions") or []),
            generation=generation,
            now=now(),
            updates=updates,
            topology_epoch=topology_epoch,
            recorded_epoch=int(current.get("topologyEpoch") or 0),
            rebalance=progress.doc() if progress else None,
            changing=progress.phase if progress else None,
        )
        if tls is not None:
            status["tls"] = tls
        if any(current.get(k) != v for k, v in status.items()):
            cluster.patch_status(namespace, name, status)


def _refuse(memo: kopf.Memo, body: Any, reason: str, message: str, generation: int) -> None:
    meta = body["metadata"]
    kopf.warn(body, reason=reason, message=message)
    condition = reconciled_condition(False, reason, message)
    refresh(memo, meta["namespace"], meta["name"], generation=generation, updates=(condition,))
    raise kopf.PermanentError(message)


def _current_map(cluster: Cluster, body: kopf.Body, namespace: str, name: str) -> ShardMap | None:
    """The shard map the topic's ConfigMap holds, or None when there is none yet.
    One that does not parse (edited by hand) is reported and rewritten (its
    epoch then follows the one the status recorded)."""
    text = (cluster.config_map_data(namespace, shard_map_name(name)) or {}).get(SHARD_MAP_KEY)
    if text is None:
        return None
    try:
        return parse(text)
    except ShardMapError as e:
        message = f"{shard_map_name(name)}: {SHARD_MAP_KEY}: {e}; rewriting it"
        kopf.warn(body, reason="ShardMapUnreadable", message=message)
        return None


def _topology(topic: dict[str, Any], spec: DelayTopicSpec, current: ShardMap | None) -> ShardMap:
    """The shard map for ``spec``: on ``current`` (the one that exists), each
    shard's master and epoch as recorded, never below the topology epoch the
    status recorded."""
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


def _publisher(memo: kopf.Memo, namespace: str, name: str) -> Callable[[ShardRecord], None]:
    """A keeper's ``publish``: the shard map with the records as they are now,
    then the labels and status (``refresh``). Raises ``OSError`` (the keeper
    tries again on its next round)."""

    def publish(rec: ShardRecord) -> None:
        cluster: Cluster = memo.cluster
        try:
            with _lock(memo, namespace, name):
                topic = cluster.get_topic(namespace, name)
                text = (cluster.config_map_data(namespace, shard_map_name(name)) or {}).get(
                    SHARD_MAP_KEY
                )
                if topic is None or text is None:
                    return  # gone, or its first map is not written yet (reconcile does)
                spec = parse_spec(topic, memo.default_image)
                current = parse(text)
                topo = _topology(topic, replace(spec, shards=current.count), current)
                cluster.apply([shard_map(topic, topo)])
                refresh(memo, namespace, name, topology_epoch=topo.topology_epoch)
        except (ApiException, SpecError, ShardMapError) as exc:
            raise OSError(f"publishing shard {rec.shard}'s master: {exc}") from exc

    return publish


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=60)
async def keep_shards(
    *,
    stopped: kopf.DaemonStopped,
    meta: kopf.Meta,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Run the topic's shard keepers while it exists (and this operator is the
    active one): every second give them the pods as they are now, and take the
    change of the shard count a step further (``Resharder.round``). (Async: a sync
    daemon would hold one of kopf's few handler threads for the topic's life,
    and a few topics would starve every other handler. Its API calls run in
    threads of their own.)"""
    namespace, name = str(meta["namespace"]), str(meta["name"])
    keepers = TopicKeepers(
        memo.cluster,
        namespace,
        name,
        base=memo.keeper_settings,
        publish=_publisher(memo, namespace, name),
        default_image=memo.default_image,
        tls=_client_tls(memo, namespace),
    )
    memo.keepers[(namespace, name)] = keepers

    def report(progress: Progress, topology_epoch: int | None) -> None:
        refresh(memo, namespace, name, progress=progress, topology_epoch=topology_epoch)

    def prepare(topic: dict[str, Any], spec: DelayTopicSpec, shards: int) -> None:
        try:
            certificates(memo, topic, spec, shards=shards)
        except NotOurs as exc:
            raise OSError(str(exc)) from exc

    resharder = Resharder(
        memo.cluster,
        namespace,
        name,
        default_image=memo.default_image,
        lock=_lock(memo, namespace, name),
        report=report,
        prepare=prepare,
    )
    period = cert_period(memo.issuer.settings)
    last_status = last_certs = time.monotonic()  # (the reconcile handler just did both)
    deleted = False
    try:
        while not stopped:
            try:
                if time.monotonic() - last_certs >= period:
                    await asyncio.to_thread(_renew, memo, namespace, name, prepare)
                    last_certs = time.monotonic()
                topic = await asyncio.to_thread(keepers.sync)
                if topic is None or topic["metadata"].get("deletionTimestamp"):
                    deleted = topic is not None
                    break
                await asyncio.to_thread(resharder.round)
                if time.monotonic() - last_status >= STATUS_EVERY_S:
                    await asyncio.to_thread(refresh, memo, namespace, name)
                    last_status = time.monotonic()
            except (ApiException, OSError, ValueError) as exc:
                # (ValueError: a map or change refused by delayq.shardmap/resharding)
                logger.warning("topic daemon of %s/%s: %s; trying again", namespace, name, exc)
            await stopped.wait(DAEMON_ROUND_S)
    finally:
        logger.info("stopping the shard keepers of %s/%s", namespace, name)
        memo.keepers.pop((namespace, name), None)
        await asyncio.to_thread(keepers.stop)
        logger.info("stopped the shard keepers of %s/%s", namespace, name)
    if deleted:
        # kopf stops a daemon and takes its finalizer off when it sees the deletion;
        # in a namespace being deleted it may no longer watch, and the namespace
        # would wait for the finalizer for ever: the daemon, which saw it, does it
        cluster: Cluster = memo.cluster
        try:
            if await asyncio.to_thread(cluster.drop_finalizer, namespace, name, FINALIZER):
                logger.info("%s/%s deleted: finalizer removed", namespace, name)
        except ApiException as exc:  # (kopf's own removal, or the next daemon's)
            logger.warning("%s/%s deleted: finalizer left: %s", namespace, name, exc.reason)


def _renew(
    memo: kopf.Memo,
    namespace: str,
    name: str,
    prepare: Callable[[dict[str, Any], DelayTopicSpec, int], None],
) -> None:
    """The daemon's certificate round: for the shards that exist, at least."""
    cluster: Cluster = memo.cluster
    topic = cluster.get_topic(namespace, name)
    if topic is None or topic["metadata"].get("deletionTimestamp"):
        return
    try:
        spec = parse_spec(topic, memo.default_image)
    except SpecError:
        return  # the reconcile handler reports it
    prepare(topic, spec, len(cluster.shard_views(namespace, name)))


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile(
    *,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Make the owned objects match the spec (idempotent)."""
    cluster: Cluster = memo.cluster
    plain = _plain(body)
    namespace, name = plain["metadata"]["namespace"], plain["metadata"]["name"]
    generation = int(plain["metadata"].get("generation", 0))
    try:
        spec = parse_spec(plain, memo.default_image)
    except SpecError as e:
        _refuse(memo, body, "InvalidSpec", str(e), generation)
    if spec.tls.enabled and not spec.tls.issued and memo.admin_tls is None:
        _refuse(memo, body, "NoClientCertificate", NO_CLIENT_CERT, generation)
    views = cluster.shard_views(namespace, name)
    existing = len(views)
    try:
        with _lock(memo, namespace, name):  # the map as the records say, now
            topic = cluster.get_topic(namespace, name) or plain
            waits = scale_down_waits(
                name,
                spec.replicas_per_shard,
                {v.index: v.replicas for v in views},
                records_of(topic.get("status")),
            )
            if waits:  # the keepers move the master and the in-sync set off those pods first
                kopf.info(body, reason="ScaleDownWaiting", message="; ".join(waits))
                raise kopf.TemporaryError("; ".join(waits) + "; trying again", delay=3)
            current = _current_map(cluster, body, namespace, name)
            # the shards the map lists (a change of their count is the daemon's); a
            # new topic's spec.shards; a lost map's, the StatefulSets there are
            count = current.count if current else existing or spec.shards
            topo = _topology(topic, replace(spec, shards=count), current)
            certificates(memo, topic, spec, shards=count)  # before the pods that mount them
            objects = desired_objects(plain, topology_map=topo, default_image=memo.default_image)
            cron = compaction_cronjob(plain, spec)
            netpol = network_policy(plain, spec, memo.operator_pods)
            # the policy before the pods it selects
            cluster.apply(([netpol] if netpol else []) + objects + ([cron] if cron else []))
            if cron is None and cluster.delete_cronjob(namespace, compaction_name(name)):
                kopf.info(body, reason="CompactionUnscheduled", message="CronJob deleted")
            policy = network_policy_name(name)
            if netpol is None and cluster.delete_network_policy(namespace, policy):
                kopf.info(body, reason="NetworkPolicyDeleted", message=f"{policy} deleted")
    except NotOurs as e:
        _refuse(memo, body, "CertificateConflict", str(e), generation)
    except ApiException as e:
        if e.status in (400, 403, 422):
            _refuse(memo, body, "ApplyFailed", f"{e.status} {e.reason}: {e.body}", generation)
        raise kopf.TemporaryError(f"apply failed ({e.status} {e.reason}); retrying", delay=5) from e
    if count > existing:
        added = ", ".join(str(i) for i in range(existing, count))
        kopf.info(body, reason="ShardsCreated", message=f"created shard(s) {added} of {count}")
    logger.info("reconciled %s/%s: %d shard(s), %d existing", namespace, name, count, existing)
    changing = "" if count == spec.shards else f"; changing to {spec.shards} (status.rebalance)"
    applied = reconciled_condition(True, "Applied", f"{count} shard(s) applied{changing}")
    refresh(
        memo,
        namespace,
        name,
        generation=generation,
        updates=(applied,),
        topology_epoch=topo.topology_epoch,
    )


@kopf.on.event("apps", "v1", "statefulsets", labels=MANAGED)
@kopf.on.event("", "v1", "pods", labels=MANAGED)
def observe(*, meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
    """An owned StatefulSet or pod changed: re-read the topic's shards."""
    topic = (meta.get("labels") or {}).get(LABEL_TOPIC)
    namespace = meta.get("namespace")
    if topic and namespace:
        refresh(memo, namespace, topic)
