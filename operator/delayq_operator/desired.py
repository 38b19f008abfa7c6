"""What a DelayTopic should own, as plain dicts (pure: no cluster, no I/O).

For a DelayTopic ``t`` with N shards, shard ``i`` gets:
  StatefulSet   t-shard-i          replicas = replicasPerShard, one PVC template,
                                   startup/readiness/liveness probes on the gRPC
                                   health service, anti-affinity
  Service       t-shard-i-pods     headless, for stable pod DNS names; also exposes
                                   the metrics port (a ServiceMonitor's targets)
  Service       t-shard-i          selects the shard's current master (label), for
                                   people (``kubectl port-forward``); clients use the map
  PodDisruptionBudget t-shard-i    at most one replica down at a time
and the topic gets one ConfigMap ``t-shard-map`` with the shard map
(``shards.json``, written with ``delayq.shardmap``, the schema the server reads
through ``--shard-map``): each shard's master is its recorded master pod's own
address, with the shard's replication epoch. Every object carries an owner
reference to the DelayTopic and the labels below.

Every pod starts as a replica of no one (``--role replica``, ``--node-name`` its
pod name): the operator's shard keepers (``keepers``) promote one and tell the
others to follow. Sync topics ack once ``min_insync`` pods (a majority) fsynced.

The map's ``topology_epoch`` rises whenever its content changes and never goes
down (the servers refuse a map that lowers it): ``topology`` takes the map that
exists (the handler reads it from the ConfigMap) and the epoch last recorded in
the topic's status, and keeps the epoch when nothing changed, so re-applying is
idempotent. It keeps the shards the map lists, each in its state (``joining``
or ``leaving`` during a change of the shard count, which only the resharding
driver makes, step by step through ``delayq.control.resharding``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from delayq.addresses import ADMIN_PORT, METRICS_PORT, PUBLIC_PORT, ROCKETMQ_PORT
from delayq.shardmap import ACTIVE, ShardEntry, ShardMap
from delayq.tls import ENV_CA, ENV_CERT, ENV_KEY, ENV_PUBLIC

__all__ = [
    "GROUP",
    "DelayTopicSpec",
    "NetworkPolicySpec",
    "SparkSpec",
    "SpecError",
    "TlsMode",
    "TlsSpec",
    "desired_objects",
    "headless_name",
    "min_insync",
    "owned_meta",
    "parse_spec",
    "pod_host",
    "pod_name",
    "shard_entry",
    "shard_map_name",
    "shard_objects",
    "shard_tls_name",
    "tls_args",
    "tls_env",
    "tls_mounts",
    "tls_volumes",
    "topology",
]

GROUP = "delayq.io"
VERSION = "v1alpha1"
PORT_DEFAULT = PUBLIC_PORT
IMAGE_DEFAULT = "delayq:0.1.0"
"""The shard pods' admin service (ShardAdmin): the operator's keepers call it,
replicas stream from it; clients need only ``spec.port``."""
LABEL_TOPIC = f"{GROUP}/topic"
LABEL_SHARD = f"{GROUP}/shard"
LABEL_ROLE = f"{GROUP}/role"
LABEL_SERVICE = f"{GROUP}/service"
"""On a shard's Services: ``pods`` (the headless one, every pod: what a
ServiceMonitor selects) or ``master``."""
MANAGER = "delayq-operator"
# The shard-map ConfigMap, mounted in every pod as a directory (not a subPath:
# the kubelet swaps a directory's files in place, so the server re-reads the new
# map and adding a shard restarts no pod).
SHARD_MAP_KEY = "shards.json"
SHARD_MAP_DIR = "/etc/delayq"
SHARD_MAP_FILE = f"{SHARD_MAP_DIR}/{SHARD_MAP_KEY}"
# The image's user and group (Dockerfile: uid and gid 10001); fsGroup makes the
# data volume theirs.
RUN_AS = 10001
# Probes every 5 s: a pod has 120 of them (10 minutes) to finish recovery.
STARTUP_PROBE_FAILURES = 120


class SpecError(ValueError):
    """An invalid DelayTopic spec; ``field`` is its path (e.g. ``spec.shards``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


TLS_DIR = "/etc/delayq-tls"
"""Where the pods mount their TLS Secret, the operator's ``<topic>-shard-tls`` or
``spec.tls.secretName`` (``tls.crt``, ``tls.key``, ``ca.crt``: the shape
cert-manager writes)."""
TLS_FILES = {"cert": f"{TLS_DIR}/tls.crt", "key": f"{TLS_DIR}/tls.key", "ca": f"{TLS_DIR}/ca.crt"}
READY_PATH = "/readyz"
"""The plain HTTP probe on the metrics port (a kubelet's gRPC probe speaks no TLS)."""
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class TlsMode(enum.StrEnum):
    """Where a topic's TLS certificate comes from."""

    OPERATOR = "operator"
    """The default: the operator's CA issues ``<topic>-shard-tls`` (``certificates``)."""
    SECRET = "secret"
    """``spec.tls.secretName``: the user's Secret (e.g. cert-manager's)."""
    DISABLED = "disabled"
    """``spec.tls.mode: disabled``: no TLS; the admin API is open to whoever reaches it."""


@dataclass(frozen=True, kw_only=True)
class TlsSpec:
    """``spec.tls`` and ``spec.publicTls``: the shard pods serve mutual TLS on the
    admin port with the Secret's certificate, and TLS on the public and RocketMQ
    ports when ``public``."""

    mode: TlsMode = TlsMode.DISABLED
    secret_name: str = ""
    """``spec.tls.secretName``: the user's Secret (``SECRET`` mode only)."""
    require_client_cert: bool = False
    """The public port takes only clients with a certificate of ``ca.crt`` (mutual TLS)."""
    public: bool = False
    """The public and RocketMQ ports serve TLS too (``spec.publicTls``; default: only
    with the user's Secret)."""

    @property
    def enabled(self) -> bool:
        return self.mode is not TlsMode.DISABLED

    @property
    def issued(self) -> bool:
        """The operator issues the Secret (``certificates``)."""
        return self.mode is TlsMode.OPERATOR

    def secret(self, topic: str) -> str:
        """The Secret the pods mount (``tls.crt``, ``tls.key``, ``ca.crt``): the
        operator's for ``topic`` or the user's; "" when disabled."""
        if self.mode is TlsMode.OPERATOR:
            return shard_tls_name(topic)
        return self.secret_name


PEER_KEYS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})
"""A NetworkPolicyPeer's fields."""


@dataclass(frozen=True, kw_only=True)
class NetworkPolicySpec:
    """``spec.networkPolicy``: the topic's NetworkPolicy (``netpolicy``)."""

    enabled: bool = True
    metrics_from: tuple[dict[str, Any], ...] = ()
    """NetworkPolicyPeers admitted to the metrics port; none: every source."""
    public_from: tuple[dict[str, Any], ...] = ()
    """NetworkPolicyPeers admitted to the public and RocketMQ ports (besides the
    operator and the topic's own pods and jobs); none: every source."""


SPARK_MASTER_DEFAULT = "local[2]"
"""Spark in the Job's own pod, two threads: the data a rebalance moves goes
through the shards' admin API, not through Spark's executors' disks."""
JOB_BACKOFF_LIMIT = 2


@dataclass(frozen=True, kw_only=True)
class SparkSpec:
    """``spec.spark``: how the topic's Spark jobs (rebalance, compaction) run."""

    master: str = SPARK_MASTER_DEFAULT
    """``local[N]`` (in the Job's pod), ``spark://host:port`` or ``k8s://https://...``."""
    image: str = ""
    """The Job's image; empty: the topic's."""
    resources: dict[str, Any] = field(default_factory=dict)
    """The Job container's requests and limits."""
    backoff_limit: int = JOB_BACKOFF_LIMIT
    """Pods a Job may fail before it counts as failed (its ``backoffLimit``)."""
    conf: dict[str, str] = field(default_factory=dict)
    """Spark settings, passed as ``--conf KEY=VALUE``."""


@dataclass(frozen=True, kw_only=True)
class DelayTopicSpec:
    shards: int = 1
    replicas_per_shard: int = 1
    replication: str = "async"
    precision_ms: int = 1000
    wheel_window: str = "2d"
    max_delay: str = "3650d"
    retention: str = "7d"
    storage_size: str = "10Gi"
    storage_class: str | None = None
    image: str = IMAGE_DEFAULT
    resources: dict[str, Any] = field(default_factory=dict)
    port: int = PORT_DEFAULT
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    pvc_retention: str = "Retain"
    spark: SparkSpec = field(default_factory=SparkSpec)
    compaction_schedule: str = ""
    """``spec.compaction.schedule``: a cron schedule for the compaction CronJob
    (empty: none)."""
    tls: TlsSpec = field(default_factory=TlsSpec)
    network_policy: NetworkPolicySpec = field(default_factory=NetworkPolicySpec)


def _int(
    spec: dict[str, Any], key: str, default: int, lo: int, hi: int, *, path: str = "spec"
) -> int:
    value = spec.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise SpecError(f"{path}.{key}", f"must be an integer in {lo}..{hi}, got {value!r}")
    return value


def parse_spec(body: dict[str, Any], default_image: str = IMAGE_DEFAULT) -> DelayTopicSpec:
    """Read a DelayTopic's spec with defaults; SpecError names the bad field.
    (The CRD schema refuses most of this at the API server; this is the operator's
    own check, so desired state is never built from a bad spec.)"""
    spec = body.get("spec") or {}
    storage = spec.get("storage") or {}
    replication = spec.get("replication", "async")
    if replication not in ("async", "sync"):
        raise SpecError("spec.replication", f"must be async or sync, got {replication!r}")
    retention = spec.get("pvcRetention", "Retain")
    if retention not in ("Retain", "Delete"):
        raise SpecError("spec.pvcRetention", f"must be Retain or Delete, got {retention!r}")
    port = _int(spec, "port", PORT_DEFAULT, 1, 65535)
    if port == METRICS_PORT:
        raise SpecError("spec.port", f"must differ from the metrics port {METRICS_PORT}")
    if port == ADMIN_PORT:
        raise SpecError("spec.port", f"must differ from the admin port {ADMIN_PORT}")
    if port == ROCKETMQ_PORT:
        raise SpecError("spec.port", f"must differ from the RocketMQ port {ROCKETMQ_PORT}")
    compaction = spec.get("compaction") or {}
    schedule = compaction.get("schedule") or ""
    if not isinstance(schedule, str) or (schedule and not _cron(schedule)):
        raise SpecError(
            "spec.compaction.schedule",
            f"must be a cron schedule (5 fields, or @hourly, @daily, ...), got {schedule!r}",
        )
    image = str(spec.get("image") or default_image)
    return DelayTopicSpec(
        shards=_int(spec, "shards", 1, 1, 1024),
        replicas_per_shard=_int(spec, "replicasPerShard", 1, 1, 5),
        replication=replication,
        precision_ms=_int(spec, "precisionMs", 1000, 1, 60_000),
        wheel_window=str(spec.get("wheelWindow", "2d")),
        max_delay=str(spec.get("maxDelay", "3650d")),
        retention=str(spec.get("retention", "7d")),
        storage_size=str(storage.get("size", "10Gi")),
        storage_class=storage.get("storageClassName"),
        image=image,
        resources=dict(spec.get("resources") or {}),
        port=port,
        affinity=spec.get("affinity"),
        tolerations=list(spec.get("tolerations") or []),
        pvc_retention=retention,
        spark=_spark(spec.get("spark") or {}),
        compaction_schedule=schedule,
        tls=_tls(spec.get("tls") or {}, spec.get("publicTls")),
        network_policy=_network_policy(spec.get("networkPolicy") or {}),
    )


def _network_policy(doc: dict[str, Any]) -> NetworkPolicySpec:
    enabled = doc.get("enabled", True)
    if not isinstance(enabled, bool):
        raise SpecError("spec.networkPolicy.enabled", f"must be true or false, got {enabled!r}")
    return NetworkPolicySpec(
        enabled=enabled,
        metrics_from=_peers(doc, "metricsFrom"),
        public_from=_peers(doc, "publicFrom"),
    )


def _peers(doc: dict[str, Any], key: str) -> tuple[dict[str, Any], ...]:
    """A list of NetworkPolicyPeers (their selectors the API server checks when
    the operator applies the policy)."""
    peers = doc.get(key) or []
    path = f"spec.networkPolicy.{key}"
    if not isinstance(peers, list):
        raise SpecError(path, f"must be a list of NetworkPolicyPeers, got {peers!r}")
    for peer in peers:
        if not isinstance(peer, dict) or not peer or not set(peer) <= PEER_KEYS:
            raise SpecError(
                path, f"each must have podSelector, namespaceSelector or ipBlock, got {peer!r}"
            )
    return tuple(dict(p) for p in peers)


def _tls(doc: dict[str, Any], public: Any) -> TlsSpec:
    """``spec.tls`` and ``spec.publicTls``: the user's Secret when named, else the
    operator's certificates unless ``mode: disabled``."""
    name = doc.get("secretName") or ""
    if not isinstance(name, str) or (
        name and (len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name))
    ):
        raise SpecError("spec.tls.secretName", f"must be a Secret's name, got {name!r}")
    mutual = doc.get("requireClientCert", False)
    if not isinstance(mutual, bool):
        raise SpecError("spec.tls.requireClientCert", f"must be true or false, got {mutual!r}")
    if public is not None and not isinstance(public, bool):
        raise SpecError("spec.publicTls", f"must be true or false, got {public!r}")
    wanted = doc.get("mode", TlsMode.SECRET if name else TlsMode.OPERATOR)
    modes = [m.value for m in TlsMode]
    if wanted not in modes:
        raise SpecError("spec.tls.mode", f"must be one of {', '.join(modes)}, got {wanted!r}")
    mode = TlsMode(wanted)
    if (mode is TlsMode.SECRET) != bool(name):
        raise SpecError(
            "spec.tls.mode",
            f"{mode.value} goes without spec.tls.secretName"
            if name
            else "secret needs spec.tls.secretName",
        )
    if mode is TlsMode.DISABLED:
        if public or mutual:
            what = "spec.publicTls" if public else "spec.tls.requireClientCert"
            raise SpecError(what, "needs TLS (spec.tls.mode is disabled)")
        return TlsSpec()
    if mutual and mode is not TlsMode.SECRET:
        raise SpecError("spec.tls.requireClientCert", "needs spec.tls.secretName")
    serve_public = mode is TlsMode.SECRET if public is None else public
    if mutual and not serve_public:
        raise SpecError(
            "spec.tls.requireClientCert", "needs the public port's TLS (spec.publicTls)"
        )
    return TlsSpec(
        mode=mode,
        secret_name=name,
        require_client_cert=mutual,
        public=serve_public,
    )


_CRON_MACROS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def _cron(schedule: str) -> bool:
    """A schedule the CronJob controller takes: five fields, or a macro."""
    fields = schedule.split()
    if fields[:1] and fields[0].startswith(("TZ=", "CRON_TZ=")):
        return False  # the CronJob's timeZone field says that, not the schedule
    return len(fields) == 5 or (len(fields) == 1 and fields[0] in _CRON_MACROS)


def _spark(doc: dict[str, Any]) -> SparkSpec:
    master = doc.get("master", SPARK_MASTER_DEFAULT)
    if not isinstance(master, str) or not master.strip():
        raise SpecError("spec.spark.master", f"must be a Spark master URL, got {master!r}")
    conf = doc.get("conf") or {}
    if not isinstance(conf, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in conf.items()
    ):
        raise SpecError("spec.spark.conf", "must map Spark setting names to string values")
    return SparkSpec(
        master=master.strip(),
        image=str(doc.get("image") or ""),
        resources=dict(doc.get("resources") or {}),
        backoff_limit=_int(doc, "backoffLimit", JOB_BACKOFF_LIMIT, 0, 20, path="spec.spark"),
        conf=dict(conf),
    )


def shard_name(topic: str, shard: int) -> str:
    return f"{topic}-shard-{shard}"


def pod_name(topic: str, shard: int, ordinal: int) -> str:
    """The StatefulSet's pod ``ordinal`` of shard ``shard``."""
    return f"{shard_name(topic, shard)}-{ordinal}"


def min_insync(spec: DelayTopicSpec) -> int:
    """Pods (the master one of them) that must have fsynced a write before a sync
    topic acks it: a majority of the shard's pods; 1 for async."""
    return spec.replicas_per_shard // 2 + 1 if spec.replication == "sync" else 1


def shard_map_name(topic: str) -> str:
    """The topic's shard-map ConfigMap."""
    return f"{topic}-shard-map"


def shard_tls_name(topic: str) -> str:
    """The Secret of the topic's certificate when the operator issues it
    (``certificates``): no ``spec.tls.secretName``."""
    return f"{topic}-shard-tls"


def headless_name(topic: str, shard: int) -> str:
    """Shard ``shard``'s headless Service (its pods' DNS names are under it)."""
    return f"{shard_name(topic, shard)}-pods"


def pod_host(topic: str, namespace: str, shard: int, pod: str) -> str:
    """A shard pod's own DNS name, through the headless Service."""
    return f"{pod}.{headless_name(topic, shard)}.{namespace}.svc"


def pod_address(topic: str, namespace: str, shard: int, pod: str, port: int) -> str:
    """A shard pod's own address: its DNS name through the headless Service."""
    return f"{pod_host(topic, namespace, shard, pod)}:{port}"


def owned_meta(name: str, body: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """An owned object's metadata: the topic's labels and its owner reference."""
    meta = body["metadata"]
    return {
        "name": name,
        "namespace": meta["namespace"],
        "labels": {
            "app.kubernetes.io/name": "delayq",
            "app.kubernetes.io/managed-by": MANAGER,
            LABEL_TOPIC: meta["name"],
            **labels,
        },
        "ownerReferences": [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "DelayTopic",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def _selector(topic: str, shard: int) -> dict[str, str]:
    return {LABEL_TOPIC: topic, LABEL_SHARD: str(shard)}


def pod_security() -> dict[str, Any]:
    """The pods' securityContext: the image's non-root user, and a data volume
    that user can write (fsGroup; the ownership walk runs only when the volume's
    root does not match, so a large volume does not slow every start)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """The server container's securityContext: it writes only under /data."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def tls_args(tls: TlsSpec) -> list[str]:
    """The server's TLS options: its certificate on the admin port, and on the
    public ones when ``public``; the admin port (and with ``requireClientCert`` the
    public one) takes client certificates of the Secret's CA, which signs the
    pods', the operator's and the jobs' certificates."""
    if not tls.enabled:
        return []
    out = ["--tls-cert", TLS_FILES["cert"], "--tls-key", TLS_FILES["key"]]
    out += ["--admin-client-ca", TLS_FILES["ca"]]
    if tls.require_client_cert:
        out += ["--tls-client-ca", TLS_FILES["ca"]]
    if not tls.public:
        out += ["--public-tls", "false"]
    return out


def tls_volumes(tls: TlsSpec, topic: str) -> list[dict[str, Any]]:
    """The Secret as a volume (its key readable by the pod's group only): the
    operator's or the user's, mounted alike."""
    if not tls.enabled:
        return []
    return [{"name": "tls", "secret": {"secretName": tls.secret(topic), "defaultMode": 0o440}}]


def tls_mounts(tls: TlsSpec) -> list[dict[str, Any]]:
    """Where the Secret is mounted (a directory: the kubelet swaps its files in place
    on a renewal, and the server picks the new certificate up without a restart)."""
    return [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}] if tls.enabled else []


def tls_env(tls: TlsSpec) -> list[dict[str, str]]:
    """A job's client TLS (``DELAYQ_TLS_*``): it presents the pods' certificate (a
    client one too), on the public ports only when they serve TLS."""
    if not tls.enabled:
        return []
    return [
        {"name": ENV_CA, "value": TLS_FILES["ca"]},
        {"name": ENV_CERT, "value": TLS_FILES["cert"]},
        {"name": ENV_KEY, "value": TLS_FILES["key"]},
        {"name": ENV_PUBLIC, "value": "true" if tls.public else "false"},
    ]


def statefulset(body: dict[str, Any], spec: DelayTopicSpec, shard: int) -> dict[str, Any]:
    topic = body["metadata"]["name"]
    name = shard_name(topic, shard)
    selector = _selector(topic, shard)
    args = [
        "serve",
        "--data-dir",
        "/data",
        "--listen",
        f"0.0.0.0:{spec.port}",
        "--metrics-listen",
        f"0.0.0.0:{METRICS_PORT}",
        "--admin-listen",
        f"0.0.0.0:{ADMIN_PORT}",
        "--rocketmq-listen",
        f"0.0.0.0:{ROCKETMQ_PORT}",
        "--shard",
        str(shard),
        "--precision",
        f"{spec.precision_ms}ms",
        "--window",
        spec.wheel_window,
        "--max-delay",
        spec.max_delay,
        "--retention",
        spec.retention,
        "--node-name",
        "$(POD_NAME)",
        "--role",
        "replica",
        "--replication",
        spec.replication,
        "--min-insync",
        str(min_insync(spec)),
        "--log-format",
        "json",
        "--advertise",
        pod_address(topic, body["metadata"]["namespace"], shard, "$(POD_NAME)", spec.port),
        "--shard-map",
        SHARD_MAP_FILE,
        *tls_args(spec.tls),
    ]
    probe = {
        "httpGet": {"path": READY_PATH, "port": "metrics", "scheme": "HTTP"},
        "periodSeconds": 5,
        "failureThreshold": 3,
    }
    # The server answers NOT_SERVING until recovery is done: bounded by one checkpoint
    # interval of replay, except a full TimerLog pass after a power loss (minutes on a
    # big shard). The startup probe gives it that long before liveness may restart it.
    startup = {**probe, "failureThreshold": STARTUP_PROBE_FAILURES}
    affinity = spec.affinity or {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": selector},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }
    pvc: dict[str, Any] = {
        "metadata": {"name": "data", "labels": selector},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.storage_size}},
        },
    }
    if spec.storage_class:
        pvc["spec"]["storageClassName"] = spec.storage_class
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": owned_meta(name, body, {LABEL_SHARD: str(shard)}),
        "spec": {
            "serviceName": headless_name(topic, shard),
            "replicas": spec.replicas_per_shard,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": spec.pvc_retention,
                "whenScaled": "Retain",
            },
            "template": {
                "metadata": {
                    "labels": {
                        **selector,
                        "app.kubernetes.io/name": "delayq",
                        "app.kubernetes.io/managed-by": MANAGER,
                    }
                },
                "spec": {
                    "affinity": affinity,
                    "tolerations": spec.tolerations,
                    "containers": [
                        {
                            "name": "delayq",
                            "image": spec.image,
                            "args": args,
                            "env": [
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                },
                                {"name": "DELAYQ_TOPIC", "value": topic},
                                {"name": "DELAYQ_SHARD", "value": str(shard)},
                            ],
                            "ports": [
                                {"name": "grpc", "containerPort": spec.port},
                                {"name": "metrics", "containerPort": METRICS_PORT},
                                {"name": "admin", "containerPort": ADMIN_PORT},
                                {"name": "rocketmq", "containerPort": ROCKETMQ_PORT},
                            ],
                            "readinessProbe": probe,
                            "startupProbe": startup,
                            "livenessProbe": probe,
                            "resources": spec.resources,
                            "securityContext": container_security(),
                            # a server that cannot start says why on stderr: the
                            # last lines become the container's termination message
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data"},
                                {"name": "shard-map", "mountPath": SHARD_MAP_DIR, "readOnly": True},
                                *tls_mounts(spec.tls),
                            ],
                        }
                    ],
                    "securityContext": pod_security(),
                    "volumes": [
                        {"name": "shard-map", "configMap": {"name": shard_map_name(topic)}},
                        *tls_volumes(spec.tls, topic),
                    ],
                },
            },
            "volumeClaimTemplates": [pvc],
        },
    }


def _client_ports(spec: DelayTopicSpec) -> list[dict[str, Any]]:
    """The ports a shard's Services expose: delayq's API and the RocketMQ 5 protocol."""
    return [
        {"name": "grpc", "port": spec.port, "targetPort": "grpc"},
        {"name": "rocketmq", "port": ROCKETMQ_PORT, "targetPort": "rocketmq"},
    ]


def headless_service(body: dict[str, Any], spec: DelayTopicSpec, shard: int) -> dict[str, Any]:
    topic = body["metadata"]["name"]
    name = headless_name(topic, shard)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_meta(name, body, {LABEL_SHARD: str(shard), LABEL_SERVICE: "pods"}),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": _selector(topic, shard),
            # and the metrics port, for a ServiceMonitor (the chart's
            # metrics.serviceMonitor): one target a pod, ready or not
            "ports": [
                *_client_ports(spec),
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"},
            ],
        },
    }


def master_service(body: dict[str, Any], spec: DelayTopicSpec, shard: int) -> dict[str, Any]:
    topic = body["metadata"]["name"]
    name = shard_name(topic, shard)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_meta(name, body, {LABEL_SHARD: str(shard), LABEL_SERVICE: "master"}),
        "spec": {
            "selector": {**_selector(topic, shard), LABEL_ROLE: "master"},
            "ports": _client_ports(spec),
        },
    }


def disruption_budget(body: dict[str, Any], spec: DelayTopicSpec, shard: int) -> dict[str, Any]:
    topic = body["metadata"]["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": owned_meta(shard_name(topic, shard), body, {LABEL_SHARD: str(shard)}),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _selector(topic, shard)}},
    }


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
    default_image: str = IMAGE_DEFAULT,
) -> list[dict[str, Any]]:
    """Every object the DelayTopic should own for the shards ``topology_map``
    lists (joining and leaving ones too), in creation order (the map before the
    pods that mount it). ``topology_map`` is the map to write, from ``topology``
    (the handler builds it on the map that exists); without it, a new topic's
    of ``spec.shards``."""
    spec = parse_spec(body, default_image)
    meta = body["metadata"]
    topo = topology_map or topology(meta["name"], meta["namespace"], spec)
    out = [shard_map(body, topo)]
    for shard in range(topo.count):
        out += shard_objects(body, spec, shard)
    return out
