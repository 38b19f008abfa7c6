"""The DelayTopic spec as typed values, and its parsing and validation (pure: no
cluster, no I/O).

``parse_spec`` reads a topic's ``spec`` with its defaults into a frozen
``DelayTopicSpec`` (``SparkSpec``, ``TlsSpec``, ``NetworkPolicySpec`` for its
groups, ``PodPushSpec`` for what its pods need to push: the push groups'
Secrets and ``spec.pushEgress.allow``) or raises ``SpecError`` naming the bad
field (``spec.port``...). The push groups' targets themselves are
``pushspec``'s (the groups' round sets them; the pods only mount). The CRD
schema refuses most of it at the API server already; this is the operator's own
check, so nothing is built from a spec it cannot apply. Every builder of the
objects a topic owns takes a ``DelayTopicSpec``, never the raw dict.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from delayq.addresses import ADMIN_PORT, METRICS_PORT, PUBLIC_PORT, ROCKETMQ_PORT

from .crd import shard_tls_name

__all__ = [
    "IMAGE_DEFAULT",
    "TOPIC_DEFAULTS",
    "DelayTopicSpec",
    "NetworkPolicySpec",
    "PodPushSpec",
    "SparkSpec",
    "SpecError",
    "TlsMode",
    "TlsSpec",
    "TopicDefaults",
    "cidrs",
    "duration_ms",
    "min_insync",
    "parse_spec",
    "secret_name",
]

PORT_DEFAULT = PUBLIC_PORT
IMAGE_DEFAULT = "delayq:0.1.0"
_DURATION = re.compile(r"([0-9]{1,9})(ms|s|m|h)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class SpecError(ValueError):
    """An invalid DelayTopic spec; ``field`` is its path (e.g. ``spec.shards``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


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


MAX_PUSH_ALLOW = 64
"""``spec.pushEgress.allow``'s entries at most (the CRD's ``maxItems``)."""


@dataclass(frozen=True, kw_only=True)
class PodPushSpec:
    """What a topic's pods need to push (``pushspec.push_args``, ``push_volumes``):
    the Secrets its push groups sign with, mounted read-only, and the networks
    the pods may push to though they are private (the server's ``--push-allow``)."""

    secrets: tuple[str, ...] = ()
    """The distinct Secret names of ``spec.groups[].push.secretRef.name``, sorted."""
    allow: tuple[str, ...] = ()
    """``spec.pushEgress.allow`` (CIDRs), in order, duplicates dropped."""


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
    push: PodPushSpec = field(default_factory=PodPushSpec)


@dataclass(frozen=True, kw_only=True)
class TopicDefaults:
    """What a topic's spec leaves to the operator's flags (``memo.Settings``)."""

    image: str = IMAGE_DEFAULT
    """The shard pods' image without ``spec.image``."""
    push_allow: tuple[str, ...] = ()
    """CIDRs every topic's pods may push to though private (``--push-allow``),
    after ``spec.pushEgress.allow``'s."""


TOPIC_DEFAULTS = TopicDefaults()
"""The operator's flags' defaults."""


def min_insync(spec: DelayTopicSpec) -> int:
    """Pods (the master one of them) that must have fsynced a write before a sync
    topic acks it: a majority of the shard's pods; 1 for async."""
    return spec.replicas_per_shard // 2 + 1 if spec.replication == "sync" else 1


def _int(
    spec: dict[str, Any], key: str, default: int, lo: int, hi: int, *, path: str = "spec"
) -> int:
    value = spec.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise SpecError(f"{path}.{key}", f"must be an integer in {lo}..{hi}, got {value!r}")
    return value


def parse_spec(body: dict[str, Any], defaults: TopicDefaults = TOPIC_DEFAULTS) -> DelayTopicSpec:
    """Read a DelayTopic's spec with ``defaults``; SpecError names the bad field.
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
    image = str(spec.get("image") or defaults.image)
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
        push=_pod_push(spec, defaults.push_allow),
    )


def duration_ms(text: Any, path: str, *, most: str = "12h") -> int:
    """``"500ms"``, ``"30s"``, ``"5m"``, ``"1h"`` in ms, at most ``most`` (itself
    such a duration); else SpecError at ``path``."""
    ms = _ms(text)
    if ms is None:
        raise SpecError(path, f"must be a duration like 500ms, 30s, 5m or 1h, got {text!r}")
    if ms > (_ms(most) or 0):
        raise SpecError(path, f"must be at most {most}, got {text}")
    return ms


def _ms(text: Any) -> int | None:
    m = _DURATION.fullmatch(text) if isinstance(text, str) else None
    return None if m is None else int(m[1]) * _UNIT_MS[m[2]]


def secret_name(value: Any, path: str) -> str:
    """``value`` if it is a Secret's name (a DNS subdomain), else SpecError at ``path``."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise SpecError(path, f"must be a Secret's name, got {value!r}")
    return value


def _pod_push(spec: dict[str, Any], default_allow: tuple[str, ...]) -> PodPushSpec:
    """The push groups' Secret names (only those: the rest of ``spec.groups`` is
    ``groups``' to parse, and a bad group never holds the pods back) and
    ``spec.pushEgress.allow`` followed by ``default_allow``."""
    secrets: set[str] = set()
    docs = spec.get("groups")
    for i, doc in enumerate(docs if isinstance(docs, list) else ()):
        push = doc.get("push") if isinstance(doc, dict) else None
        ref = push.get("secretRef") if isinstance(push, dict) else None
        if isinstance(ref, dict):
            secrets.add(secret_name(ref.get("name"), f"spec.groups[{i}].push.secretRef.name"))
    egress = spec.get("pushEgress") or {}
    if not isinstance(egress, dict):
        raise SpecError("spec.pushEgress", f"must be an object, got {egress!r}")
    allow = egress.get("allow") or []
    path = "spec.pushEgress.allow"
    if not isinstance(allow, list) or len(allow) > MAX_PUSH_ALLOW:
        raise SpecError(path, f"must be a list of at most {MAX_PUSH_ALLOW} CIDRs, got {allow!r}")
    both = cidrs([*cidrs(allow, path), *default_allow], path)
    return PodPushSpec(secrets=tuple(sorted(secrets)), allow=both)


def cidrs(values: list[Any], path: str) -> tuple[str, ...]:
    """``values`` if each is a network as the server's ``--push-allow`` takes it
    (host bits allowed), duplicates dropped; else SpecError at ``path``."""
    for cidr in values:
        try:
            ipaddress.ip_network(cidr if isinstance(cidr, str) else "", strict=False)
        except ValueError:
            raise SpecError(path, f"must hold CIDRs like 10.0.0.0/8, got {cidr!r}") from None
    return tuple(dict.fromkeys(values))


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
    if name:
        secret_name(name, "spec.tls.secretName")
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
