"""kopf handlers: reconcile DelayTopics and keep their status and master roles.

- create/resume/update(spec): parse the spec (invalid -> Failed status, Warning
  event, no retries), build the shard map on the one that exists and the
  topology epoch the status recorded (``status.topologyEpoch``, written after
  each apply), server-side apply every owned object, never drop an existing
  shard (ScaleDownRefused condition instead), post events.
- events of owned StatefulSets and pods: choose masters (label
  ``delayq.io/role``), recompute status (ready shards, masters, conditions).
Deletion needs no handler and no finalizer: owner references let the garbage
collector remove what a DelayTopic owns; PVCs follow ``spec.pvcRetention``
through the StatefulSets' retention policy.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

import kopf
from kubernetes.client import ApiException

from delayq.shardmap import ShardMap, ShardMapError, parse

from .desired import (
    GROUP,
    IMAGE_DEFAULT,
    LABEL_TOPIC,
    MANAGER,
    SHARD_MAP_KEY,
    VERSION,
    SpecError,
    desired_objects,
    parse_spec,
    shard_count,
    shard_map_name,
    topology,
)
from .kube import PLURAL, Cluster, load_client
from .status import MASTER, pod_roles, reconciled_condition, scale_condition, topic_status

__all__ = ["reconcile"]

MANAGED = {"app.kubernetes.io/managed-by": MANAGER}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plain(value: Any) -> Any:
    """kopf's read-only body views as plain JSON-like values."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _lock(memo: kopf.Memo, namespace: str, name: str) -> threading.Lock:
    """One writer of a topic's status at a time (handlers run in threads)."""
    with memo.locks_guard:
        lock: threading.Lock = memo.locks.setdefault((namespace, name), threading.Lock())
        return lock


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300  # re-open quiet watches (kopf #1276)
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    memo.setdefault("default_image", IMAGE_DEFAULT)
    memo.setdefault("locks", {})
    memo.setdefault("locks_guard", threading.Lock())
    if "cluster" not in memo:
        memo.cluster = Cluster(load_client())


def refresh(
    memo: kopf.Memo,
    namespace: str,
    name: str,
    *,
    generation: int | None = None,
    updates: tuple[dict[str, Any], ...] = (),
    topology_epoch: int | None = None,
) -> None:
    """Label masters and write the topic's status from what the cluster shows."""
    cluster: Cluster = memo.cluster
    with _lock(memo, namespace, name):
        topic = cluster.get_topic(namespace, name)
        if topic is None:
            return
        # Status is computed from these views even after relabelling: choose_master
        # names the same pod before and after its label changes.
        shards = cluster.shard_views(namespace, name)
        for shard in shards:
            for pod, role in pod_roles(shard).items():
                cluster.set_role(namespace, pod, role)
                if role == MASTER:
                    kopf.info(
                        cast(kopf.Body, topic),
                        reason="MasterChosen",
                        message=f"shard {shard.index}: {pod} is the master",
                    )
        current = topic.get("status") or {}
        status = topic_status(
            wanted_shards=int((topic.get("spec") or {}).get("shards", 1)),
            shards=shards,
            conditions=list(current.get("conditions") or []),
            generation=generation,
            now=_now(),
            updates=updates,
            topology_epoch=topology_epoch,
        )
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
    existing = len(cluster.shard_views(namespace, name))
    count, refused = shard_count(spec.shards, existing)
    recorded = int((plain.get("status") or {}).get("topologyEpoch") or 0)
    current = _current_map(cluster, body, namespace, name)
    topo = topology(name, namespace, replace(spec, shards=count), current, floor=recorded)
    objects = desired_objects(
        plain, existing_shards=existing, topology_map=topo, default_image=memo.default_image
    )
    try:
        cluster.apply(objects)
    except ApiException as e:
        if e.status in (400, 403, 422):
            _refuse(memo, body, "ApplyFailed", f"{e.status} {e.reason}: {e.body}", generation)
        raise kopf.TemporaryError(f"apply failed ({e.status} {e.reason}); retrying", delay=5) from e
    if count > existing:
        added = ", ".join(str(i) for i in range(existing, count))
        kopf.info(body, reason="ShardsCreated", message=f"created shard(s) {added} of {count}")
    scale = scale_condition(spec.shards, existing)
    if refused:
        kopf.warn(body, reason="ScaleDownRefused", message=scale["message"])
    logger.info("reconciled %s/%s: %d shard(s), %d existing", namespace, name, count, existing)
    applied = reconciled_condition(True, "Applied", f"{count} shard(s) applied")
    refresh(
        memo,
        namespace,
        name,
        generation=generation,
        updates=(applied, scale),
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
