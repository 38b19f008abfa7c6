"""A shard's StatefulSet (pure: no cluster, no I/O).

``replicasPerShard`` pods, one ``data`` volume claim each, HTTP probes of
``/readyz`` on the metrics port (a startup probe allowing 10 minutes of
recovery), anti-affinity across replicas unless ``spec.affinity`` says
otherwise. Every pod starts as a replica of no one (``--role replica``,
``--node-name`` its pod name): the operator's shard keepers (``keepers``)
promote one and tell the others to follow. Sync topics ack once
``min_insync`` pods (a majority) fsynced. The shard map is mounted as a
directory (``shardmaps.SHARD_MAP_DIR``), so a new map reaches the pods
without a restart and no shard count is in the pod template. A topic's push
groups' Secrets are mounted and its push flags passed (``pushspec``): a new
Secret name changes the template (a rolling restart), a rotated one does not.
"""

from __future__ import annotations

from typing import Any

from delayq.addresses import ADMIN_PORT, METRICS_PORT, ROCKETMQ_PORT

from .crd import (
    LABEL_SHARD,
    MANAGER,
    headless_name,
    owned_meta,
    pod_address,
    shard_map_name,
    shard_name,
    shard_selector,
)
from .podtls import tls_args, tls_mounts, tls_volumes
from .pushspec import push_args, push_mounts, push_volumes
from .security import container_security, pod_security, tmp_mount
from .shardmaps import SHARD_MAP_DIR, SHARD_MAP_FILE
from .spec import DelayTopicSpec, min_insync

__all__ = ["READY_PATH", "statefulset"]

READY_PATH = "/readyz"
"""The plain HTTP probe on the metrics port (a kubelet's gRPC probe speaks no TLS)."""

# Probes every 5 s: a pod has 120 of them (10 minutes) to finish recovery.
STARTUP_PROBE_FAILURES = 120


def statefulset(body: dict[str, Any], spec: DelayTopicSpec, shard: int) -> dict[str, Any]:
    topic = body["metadata"]["name"]
    name = shard_name(topic, shard)
    selector = shard_selector(topic, shard)
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
        *push_args(spec.push),
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
                                # the RocketMQ port's and the public port's pygrpc-native
                                # server opens a Unix socket there (its grpc.aio fallback)
                                tmp_mount(),
                                *tls_mounts(spec.tls),
                                *push_mounts(spec.push),
                            ],
                        }
                    ],
                    "securityContext": pod_security(),
                    "volumes": [
                        {"name": "shard-map", "configMap": {"name": shard_map_name(topic)}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                        *tls_volumes(spec.tls, topic),
                        *push_volumes(spec.push),
                    ],
                },
            },
            "volumeClaimTemplates": [pvc],
        },
    }
