"""A shard's two Services (pure: no cluster, no I/O).

``t-shard-i-pods`` is headless (every pod, ready or not: their stable DNS
names, and the metrics port a ServiceMonitor scrapes); ``t-shard-i`` selects
the pod labelled ``delayq.io/role=master``, for people (``kubectl
port-forward``): clients route through the shard map.
"""

from __future__ import annotations

from typing import Any

from delayq.addresses import METRICS_PORT, ROCKETMQ_PORT

from .crd import (
    LABEL_ROLE,
    LABEL_SERVICE,
    LABEL_SHARD,
    headless_name,
    owned_meta,
    shard_name,
    shard_selector,
)
from .spec import DelayTopicSpec

__all__ = ["headless_service", "master_service"]


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
            "selector": shard_selector(topic, shard),
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
            "selector": {**shard_selector(topic, shard), LABEL_ROLE: "master"},
            "ports": _client_ports(spec),
        },
    }
