"""The operator's side effects on the cluster: the only module that imports the
``kubernetes`` client (its errors are named through here: ``ApiException``,
``ConfigException``).

Server-side apply (field manager ``delayq-operator``: idempotent, other managers'
fields left alone); the shard StatefulSets and pods read back as ``status``'s
views; ConfigMaps read, the shard map written by compare-and-set; role labels;
the topic's status (``patch_status``, the one writer, plain or by compare-and-set
on the resource version for the keepers' records); the topic's Jobs, a removed
shard's objects, a disabled NetworkPolicy; the certificates' Secrets and the CA
bundle's ConfigMap; events. Nothing here decides anything: the pure modules do.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.dynamic import DynamicClient

from delayq.control.record import ShardRecord

from .certificates import StoredSecret
from .crd import (
    GROUP,
    LABEL_ROLE,
    LABEL_SHARD,
    LABEL_TOPIC,
    MANAGER,
    PLURAL,
    VERSION,
    shard_map_name,
    shard_name,
)
from .records import doc_of, record_of
from .shardmaps import SHARD_MAP_KEY
from .status import PodView, ShardView

__all__ = [
    "ApiException",
    "Cluster",
    "ConfigException",
    "MapChanged",
    "NotOurs",
    "RecordChanged",
    "load_client",
    "now",
]


def load_client() -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig
    (``KUBECONFIG`` or ~/.kube/config)."""
    try:
        config.load_incluster_config()
    except ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def now() -> str:
    """The time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class RecordChanged(OSError):
    """A shard's record is not the one the swap expected: someone else wrote it."""


class NotOurs(OSError):
    """An object of one of the operator's names exists without its label."""


def _managed(obj: Any) -> bool:
    return bool((obj.metadata.labels or {}).get("app.kubernetes.io/managed-by") == MANAGER)


def _stored(secret: Any) -> StoredSecret:
    return StoredSecret(
        {k: base64.b64decode(v) for k, v in (secret.data or {}).items()},
        dict(secret.metadata.annotations or {}),
        str(secret.metadata.resource_version or ""),
    )


class MapChanged(OSError):
    """The shard map is not the one a write expected: someone else wrote it."""


def _unless_missing(read: Callable[[], Any]) -> Any:
    """``read()``, or None when the object does not exist (404)."""
    try:
        return read()
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _ready(pod: Any) -> bool:
    conditions = (pod.status and pod.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _ordinal(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class Cluster:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._dynamic: DynamicClient | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:  # discovery costs requests: only when first needed
            self._dynamic = DynamicClient(self.api)
        return self._dynamic

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply each object, in order."""
        for obj in objects:
            resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            self.dynamic.server_side_apply(
                resource,
                body=obj,
                namespace=obj["metadata"]["namespace"],
                field_manager=MANAGER,
                force_conflicts=True,
            )

    def shard_views(self, namespace: str, topic: str) -> list[ShardView]:
        """The topic's shards as they are: StatefulSet counts and pod readiness."""
        selector = f"{LABEL_TOPIC}={topic},app.kubernetes.io/managed-by={MANAGER}"
        sets: list[Any] = self.apps.list_namespaced_stateful_set(
            namespace, label_selector=selector
        ).items
        pods: list[Any] = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        by_shard: dict[str, list[PodView]] = {}
        for pod in pods:
            labels = pod.metadata.labels or {}
            by_shard.setdefault(labels.get(LABEL_SHARD, ""), []).append(
                PodView(
                    name=pod.metadata.name,
                    ordinal=_ordinal(pod.metadata.name),
                    ready=_ready(pod),
                    role=labels.get(LABEL_ROLE),
                    deleting=pod.metadata.deletion_timestamp is not None,
                    ip=(pod.status and pod.status.pod_ip) or None,
                )
            )
        views = []
        for sts in sets:
            shard = (sts.metadata.labels or {}).get(LABEL_SHARD, "")
            if not shard.isdigit():
                continue
            members = sorted(by_shard.get(shard, []), key=lambda p: p.ordinal)
            views.append(
                ShardView(
                    index=int(shard),
                    replicas=sts.spec.replicas or 0,
                    # counted from the pods just listed, not the StatefulSet's status,
                    # which lags them: status and roles then agree with each other
                    ready_replicas=sum(p.ready and not p.deleting for p in members),
                    pods=tuple(members),
                )
            )
        return sorted(views, key=lambda v: v.index)

    def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's ``data``, or None when there is no such ConfigMap."""
        cm = self._config_map(namespace, name)
        return None if cm is None else dict(cm.data or {})

    def _config_map(self, namespace: str, name: str) -> Any:
        return _unless_missing(lambda: self.core.read_namespaced_config_map(name, namespace))

    def shard_map(self, namespace: str, topic: str) -> tuple[str, str] | None:
        """The topic's shard map text and its ConfigMap's resource version (for
        ``write_map``), or None when there is none."""
        cm = self._config_map(namespace, shard_map_name(topic))
        text = None if cm is None else (cm.data or {}).get(SHARD_MAP_KEY)
        return None if text is None else (text, str(cm.metadata.resource_version))

    def write_map(self, config_map: dict[str, Any], expected_version: str) -> None:
        """Apply the shard-map ConfigMap if it is still at ``expected_version``
        (``MapChanged`` when it is not)."""
        obj = {**config_map, "metadata": {**config_map["metadata"]}}
        obj["metadata"]["resourceVersion"] = expected_version
        try:
            self.apply([obj])
        except ApiException as e:
            if e.status == 409:
                raise MapChanged(f"{obj['metadata']['name']} changed meanwhile") from e
            raise

    def _list(
        self, call: Callable[..., Any], namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        resp = call(namespace, label_selector=selector, _preload_content=False)
        return list(json.loads(resp.data)["items"])

    def jobs(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """Jobs with these labels, as plain dicts."""
        return self._list(self.batch.list_namespaced_job, namespace, _selector(labels))

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """A Job's pods (the Job controller labels them ``job-name``), oldest first."""
        pods = self._list(self.core.list_namespaced_pod, namespace, f"job-name={job}")
        return sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a Job and (in the background) its pods; gone already is fine."""
        _unless_missing(
            lambda: self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background"
            )
        )

    def delete_cronjob(self, namespace: str, name: str) -> bool:
        """Delete a CronJob (its Jobs follow); False when there was none."""
        gone = _unless_missing(
            lambda: self.batch.delete_namespaced_cron_job(
                name, namespace, propagation_policy="Background"
            )
        )
        return gone is not None

    def secret(self, namespace: str, name: str, *, ours: bool = True) -> StoredSecret | None:
        """A Secret, None when there is none; ``ours``: ``NotOurs`` unless the
        operator's label is on it."""
        found = _unless_missing(lambda: self.core.read_namespaced_secret(name, namespace))
        if found is None:
            return None
        if ours and not _managed(found):
            raise NotOurs(
                f"Secret {namespace}/{name} exists and is not the operator's (no "
                f"app.kubernetes.io/managed-by={MANAGER} label): rename or delete it"
            )
        return _stored(found)

    def secrets(self, namespace: str, labels: dict[str, str]) -> list[StoredSecret]:
        """The Secrets with these labels."""
        found = self.core.list_namespaced_secret(namespace, label_selector=_selector(labels)).items
        return [_stored(s) for s in found]

    def write_secret(self, meta: dict[str, Any], data: dict[str, bytes], version: str) -> bool:
        """Create the Secret of ``meta`` (``version`` empty) or replace it at
        ``version``; False when it was made or changed meanwhile (409)."""
        body: Any = {  # (the client takes plain dicts as well as its models)
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {**meta, **({"resourceVersion": version} if version else {})},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            if version:
                self.core.replace_namespaced_secret(meta["name"], meta["namespace"], body)
            else:
                self.core.create_namespaced_secret(meta["namespace"], body)
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    def publish_config_map(self, meta: dict[str, Any], data: dict[str, str]) -> None:
        """Create the ConfigMap of ``meta`` or patch its data when it differs;
        ``NotOurs`` when one without the operator's label is there."""
        namespace, name = meta["namespace"], meta["name"]
        body: Any = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
        found = self._config_map(namespace, name)
        if found is None:
            self.core.create_namespaced_config_map(namespace, body)
        elif not _managed(found):
            raise NotOurs(f"ConfigMap {namespace}/{name} exists and is not the operator's")
        elif dict(found.data or {}) != data:
            self.core.patch_namespaced_config_map(name, namespace, body)

    def delete_network_policy(self, namespace: str, name: str) -> bool:
        """Delete a NetworkPolicy; False when there was none."""
        gone = _unless_missing(
            lambda: self.networking.delete_namespaced_network_policy(name, namespace)
        )
        return gone is not None

    def delete_shard(self, namespace: str, topic: str, shard: int) -> None:
        """Delete what a removed shard owned: its StatefulSet (its pods; its
        volume claims as its ``persistentVolumeClaimRetentionPolicy`` says),
        Services and disruption budget. Gone already is fine."""
        name = shard_name(topic, shard)
        for delete in (
            lambda: self.apps.delete_namespaced_stateful_set(
                name, namespace, propagation_policy="Background"
            ),
            lambda: self.core.delete_namespaced_service(name, namespace),
            lambda: self.core.delete_namespaced_service(f"{name}-pods", namespace),
            lambda: self.policy.delete_namespaced_pod_disruption_budget(name, namespace),
        ):
            _unless_missing(delete)

    def set_role(self, namespace: str, pod: str, role: str) -> None:
        self.core.patch_namespaced_pod(pod, namespace, {"metadata": {"labels": {LABEL_ROLE: role}}})

    def get_topic(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = _unless_missing(
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        )
        return None if obj is None else dict(obj)

    def drop_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        """Take ``finalizer`` off the topic (a merge patch at the resource version
        read: 409 when it changed meanwhile); False when it was not there or the
        topic is gone."""
        topic = self.get_topic(namespace, name)
        meta = (topic or {}).get("metadata") or {}
        held = list(meta.get("finalizers") or [])
        if finalizer not in held:
            return False
        kept = [f for f in held if f != finalizer]
        patch = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
        gone = _unless_missing(
            lambda: self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, patch
            )
        )
        return gone is not None

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], *, version: str = ""
    ) -> None:
        """Merge ``status`` into the topic's; with ``version``, only at that resource
        version (409 when it changed). Every status write goes through here: the
        status writer's (``statuswriter``) and the keepers' records'."""
        body: dict[str, Any] = {"status": status}
        if version:
            body["metadata"] = {"resourceVersion": version}
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, body
        )

    def swap_record(
        self,
        namespace: str,
        name: str,
        shard: int,
        expected: ShardRecord | None,
        new: ShardRecord,
        *,
        tries: int = 5,
    ) -> None:
        """Write ``new`` as shard ``shard``'s record in the topic's status if the
        record there is ``expected`` (None: there is none), by compare-and-set on
        the resource version (another status write in between: read and compare
        again). ``RecordChanged`` when it is not; ``OSError`` when the API fails.
        A record with more failovers than ``expected`` gets ``lastFailover``."""
        for _ in range(tries):
            try:
                topic = self.get_topic(namespace, name)
                if topic is None:
                    raise RecordChanged(f"{namespace}/{name} is gone")
                docs = (topic.get("status") or {}).get("replication") or {}
                doc = docs.get(str(shard))
                try:
                    held = None if doc is None else record_of(shard, doc)
                except ValueError as exc:
                    raise RecordChanged(str(exc)) from None
                if held != expected:
                    raise RecordChanged(
                        f"shard {shard}: the recorded {held} is not the expected {expected}"
                    )
                entry = doc_of(new)
                if expected is not None and new.failovers > expected.failovers:
                    entry["lastFailover"] = now()
                version = topic["metadata"]["resourceVersion"]
                self.patch_status(
                    namespace, name, {"replication": {str(shard): entry}}, version=version
                )
                return
            except ApiException as e:
                if e.status != 409:
                    raise OSError(f"writing shard {shard}'s record: {e.status} {e.reason}") from e
        raise OSError(f"writing shard {shard}'s record: conflicts {tries} times in a row")

    def drop_records(self, namespace: str, name: str, shards: Iterable[int]) -> None:
        """Remove removed shards' records from the topic's status, by
        compare-and-set on the resource version (a shard added again later is
        founded afresh)."""
        for _ in range(5):
            topic = self.get_topic(namespace, name)
            if topic is None:
                return
            docs = (topic.get("status") or {}).get("replication") or {}
            gone = {str(s): None for s in shards if str(s) in docs}
            if not gone:
                return
            version = topic["metadata"]["resourceVersion"]
            try:
                self.patch_status(namespace, name, {"replication": gone}, version=version)
                return
            except ApiException as e:
                if e.status != 409:
                    raise
        raise OSError(f"dropping records of {name}: conflicts 5 times in a row")

    def post_event(self, topic: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """An event about the topic (``kubectl describe dt`` shows it)."""
        meta = topic["metadata"]
        stamp = datetime.datetime.now(datetime.UTC)
        self.core.create_namespaced_event(
            meta["namespace"],
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}."),
                involved_object=client.V1ObjectReference(
                    api_version=f"{GROUP}/{VERSION}",
                    kind="DelayTopic",
                    name=meta["name"],
                    namespace=meta["namespace"],
                    uid=meta["uid"],
                ),
                type=type_,
                reason=reason,
                message=message[:1024],
                first_timestamp=stamp,
                last_timestamp=stamp,
                count=1,
                source=client.V1EventSource(component=MANAGER),
            ),
        )
