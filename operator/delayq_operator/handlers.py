"""kopf handlers: reconcile DelayTopics and keep their status and master roles.

- create/resume/update(spec): parse the spec (invalid -> Failed status, Warning
  event, no retries), build the shard map on the one that exists (the shards
  it lists, each in its state) and the topology epoch the status recorded
  (``status.topologyEpoch``, written after each apply), server-side apply
  every owned object (the compaction CronJob when ``spec.compaction.schedule``
  is set, deleted when not; the NetworkPolicy, ``netpolicy``, first, unless
  ``spec.networkPolicy.enabled`` is false: then deleted), post events. Before
  any of it, the topic's certificates (``topiccerts``) are issued or renewed
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
- when ``spec.groups`` changes and every ``GROUPS_EVERY_S`` (``keep_groups``):
  the declared consumer groups' policies set on every shard through the typed
  client (``groupkeeper``), ``status.groups``, retried while the shards do not
  serve yet.
- events of owned StatefulSets and pods, and every few seconds from the
  daemon: label pods with their recorded role (``delayq.io/role``), recompute
  status (ready shards, masters in office, per shard epoch, in-sync set, lag,
  failovers, conditions).
DelaySchedules' handlers are ``schedulehandlers``' (imported here, so
``kopf run -m delayq_operator.handlers`` registers them too).
Every topic's status write goes through ``statuswriter.StatusWriter`` (the typed memo's
``status``, ``memo.Memo``, which the startup handler fills once); what the
reconcile handler decides is ``reconciling``'s (pure).
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
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

import kopf

from delayq.control.record import ShardRecord
from delayq.shardmap import ShardMap, ShardMapError, parse

from . import schedulehandlers  # noqa: F401 - importing registers the DelaySchedules' handlers
from .certificates import CertSettings
from .changes import Progress
from .crd import GROUP, LABEL_TOPIC, MANAGER, PLURAL, VERSION, shard_map_name
from .groupkeeper import GROUPS_EVERY_S, keep_groups
from .jobs import compaction_name
from .keepers import TopicKeepers
from .kube import ApiException, Cluster, NotOurs
from .memo import Memo
from .netpolicy import network_policy_name
from .plain import as_plain
from .reconciling import reconciliation, refusal, topic_topology
from .records import records_of, scale_down_waits
from .resharder import Resharder
from .shardmaps import SHARD_MAP_KEY, shard_map
from .spec import DelayTopicSpec, SpecError, parse_spec
from .status import reconciled_condition
from .statusupdate import StatusUpdate
from .topiccerts import certificates, client_tls

__all__ = ["groups_changed", "groups_round", "keep_shards", "reconcile"]

MANAGED = {"app.kubernetes.io/managed-by": MANAGER}
DAEMON_ROUND_S = 1.0
"""How often a topic's daemon re-reads its pods (new IPs, new shards)."""
STATUS_EVERY_S = 5.0
"""How often the daemon rewrites the status rows (lag changes without events)."""
FINALIZER = f"{GROUP}/finalizer"
"""kopf's, on a topic while its daemon runs."""
CERT_PERIOD_MAX_S = 30.0
"""How often a topic's daemon renews its certificates at most (``cert_period``)."""


def cert_period(settings: CertSettings) -> float:
    """Seconds between certificate rounds: half the settle time, at most 30 s (a
    rotation waits out ``settle`` twice; with the defaults that is 5 minutes)."""
    return min(CERT_PERIOD_MAX_S, settings.settle.total_seconds() / 2)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """kopf's settings for delayq, and the typed memo, filled here once."""
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
    Memo.start(memo)


def _refuse(ours: Memo, body: Any, reason: str, message: str, generation: int) -> NoReturn:
    meta = body["metadata"]
    kopf.warn(body, reason=reason, message=message)
    condition = reconciled_condition(False, reason, message)
    update = StatusUpdate(generation=generation, conditions=(condition,))
    ours.status.write(meta["namespace"], meta["name"], update)
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


def _publisher(ours: Memo, namespace: str, name: str) -> Callable[[ShardRecord], None]:
    """A keeper's ``publish``: the shard map with the records as they are now,
    then the labels and status. Raises ``OSError`` (the keeper tries again on its
    next round)."""

    def publish(rec: ShardRecord) -> None:
        cluster = ours.cluster
        try:
            with ours.locks(namespace, name):
                topic = cluster.get_topic(namespace, name)
                text = (cluster.config_map_data(namespace, shard_map_name(name)) or {}).get(
                    SHARD_MAP_KEY
                )
                if topic is None or text is None:
                    return  # gone, or its first map is not written yet (reconcile does)
                spec = parse_spec(topic, ours.settings.topic_defaults)
                current = parse(text)
                topo = topic_topology(topic, replace(spec, shards=current.count), current)
                cluster.apply([shard_map(topic, topo)])
                update = StatusUpdate(topology_epoch=topo.topology_epoch)
                ours.status.write(namespace, name, update)
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
    ours = Memo.of(memo)
    namespace, name = str(meta["namespace"]), str(meta["name"])
    keepers = TopicKeepers(
        ours.cluster,
        namespace,
        name,
        base=ours.settings.keeper_settings,
        publish=_publisher(ours, namespace, name),
        defaults=ours.settings.topic_defaults,
        tls=client_tls(ours, namespace),
    )
    ours.keepers[(namespace, name)] = keepers

    def report(progress: Progress, topology_epoch: int | None) -> None:
        update = StatusUpdate(progress=progress, topology_epoch=topology_epoch)
        ours.status.write(namespace, name, update)

    def prepare(topic: dict[str, Any], spec: DelayTopicSpec, shards: int) -> None:
        try:
            certificates(ours, topic, spec, shards=shards)
        except NotOurs as exc:
            raise OSError(str(exc)) from exc

    resharder = Resharder(
        ours.cluster,
        namespace,
        name,
        defaults=ours.settings.topic_defaults,
        lock=ours.locks(namespace, name),
        report=report,
        prepare=prepare,
    )
    period = cert_period(ours.issuer.settings)
    last_status = last_certs = time.monotonic()  # (the reconcile handler just did both)
    deleted = False
    try:
        while not stopped:
            try:
                if time.monotonic() - last_certs >= period:
                    await asyncio.to_thread(_renew, ours, namespace, name, prepare)
                    last_certs = time.monotonic()
                topic = await asyncio.to_thread(keepers.sync)
                if topic is None or topic["metadata"].get("deletionTimestamp"):
                    deleted = topic is not None
                    break
                await asyncio.to_thread(resharder.round)
                if time.monotonic() - last_status >= STATUS_EVERY_S:
                    await asyncio.to_thread(ours.status.write, namespace, name)
                    last_status = time.monotonic()
            except (ApiException, OSError, ValueError) as exc:
                # (ValueError: a map or change refused by delayq.shardmap/resharding)
                logger.warning("topic daemon of %s/%s: %s; trying again", namespace, name, exc)
            await stopped.wait(DAEMON_ROUND_S)
    finally:
        logger.info("stopping the shard keepers of %s/%s", namespace, name)
        ours.keepers.pop((namespace, name), None)
        await asyncio.to_thread(keepers.stop)
        logger.info("stopped the shard keepers of %s/%s", namespace, name)
    if deleted:
        # kopf stops a daemon and takes its finalizer off when it sees the deletion;
        # in a namespace being deleted it may no longer watch, and the namespace
        # would wait for the finalizer for ever: the daemon, which saw it, does it
        try:
            if await asyncio.to_thread(ours.cluster.drop_finalizer, namespace, name, FINALIZER):
                logger.info("%s/%s deleted: finalizer removed", namespace, name)
        except ApiException as exc:  # (kopf's own removal, or the next daemon's)
            logger.warning("%s/%s deleted: finalizer left: %s", namespace, name, exc.reason)


def _renew(
    ours: Memo,
    namespace: str,
    name: str,
    prepare: Callable[[dict[str, Any], DelayTopicSpec, int], None],
) -> None:
    """The daemon's certificate round: for the shards that exist, at least."""
    topic = ours.cluster.get_topic(namespace, name)
    if topic is None or topic["metadata"].get("deletionTimestamp"):
        return
    try:
        spec = parse_spec(topic, ours.settings.topic_defaults)
    except SpecError:
        return  # the reconcile handler reports it
    prepare(topic, spec, len(ours.cluster.shard_views(namespace, name)))


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
    ours = Memo.of(memo)
    cluster = ours.cluster
    plain = as_plain(body)
    namespace, name = plain["metadata"]["namespace"], plain["metadata"]["name"]
    generation = int(plain["metadata"].get("generation", 0))
    try:
        spec = parse_spec(plain, ours.settings.topic_defaults)
    except SpecError as e:
        _refuse(ours, body, "InvalidSpec", str(e), generation)
    refused = refusal(spec, client_cert=ours.settings.admin_tls is not None)
    if refused is not None:
        _refuse(ours, body, *refused, generation)
    views = cluster.shard_views(namespace, name)
    try:
        with ours.locks(namespace, name):  # the map as the records say, now
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
            plan = reconciliation(
                plain,
                topic,
                spec,
                _current_map(cluster, body, namespace, name),
                len(views),
                operator_pods=ours.settings.operator_pods,
                defaults=ours.settings.topic_defaults,
            )
            certificates(ours, topic, spec, shards=plan.count)  # before the pods that mount them
            cluster.apply(plan.objects)
            if not plan.cronjob and cluster.delete_cronjob(namespace, compaction_name(name)):
                kopf.info(body, reason="CompactionUnscheduled", message="CronJob deleted")
            policy = network_policy_name(name)
            if not plan.network_policy and cluster.delete_network_policy(namespace, policy):
                kopf.info(body, reason="NetworkPolicyDeleted", message=f"{policy} deleted")
    except NotOurs as e:
        _refuse(ours, body, "CertificateConflict", str(e), generation)
    except ApiException as e:
        if e.status in (400, 403, 422):
            _refuse(ours, body, "ApplyFailed", f"{e.status} {e.reason}: {e.body}", generation)
        raise kopf.TemporaryError(f"apply failed ({e.status} {e.reason}); retrying", delay=5) from e
    if plan.created:
        kopf.info(body, reason="ShardsCreated", message=plan.created)
    logger.info(
        "reconciled %s/%s: %d shard(s), %d existing", namespace, name, plan.count, len(views)
    )
    update = StatusUpdate(
        generation=generation,
        conditions=(plan.applied,),
        topology_epoch=plan.topology.topology_epoch,
    )
    ours.status.write(namespace, name, update)


@kopf.on.field(GROUP, VERSION, PLURAL, field="spec.groups")
def groups_changed(
    *,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """``spec.groups`` changed (or the topic is new): a groups' round now."""
    keep_groups(Memo.of(memo), body, as_plain(body), logger)


@kopf.timer(GROUP, VERSION, PLURAL, interval=GROUPS_EVERY_S, initial_delay=GROUPS_EVERY_S)
def groups_round(
    *,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Every ``GROUPS_EVERY_S``: a groups' round (drift put right, in flight)."""
    keep_groups(Memo.of(memo), body, as_plain(body), logger)


@kopf.on.event("apps", "v1", "statefulsets", labels=MANAGED)
@kopf.on.event("", "v1", "pods", labels=MANAGED)
def observe(*, meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
    """An owned StatefulSet or pod changed: re-read the topic's shards."""
    topic = (meta.get("labels") or {}).get(LABEL_TOPIC)
    namespace = meta.get("namespace")
    if topic and namespace:
        Memo.of(memo).status.write(namespace, topic)
