"""The operator's resources' identity and the names and labels of what a
DelayTopic owns (pure: no cluster, no I/O).

``GROUP``/``VERSION``/``PLURAL`` name the DelayTopic CRD (``delayq.io/v1alpha1``,
``delaytopics``), ``SCHEDULE_PLURAL`` the DelaySchedule's (``delayschedules``,
same group and version: ``schedules``); for a topic ``t``, shard ``i`` is the StatefulSet
``t-shard-i`` with pods ``t-shard-i-<k>`` under the headless Service
``t-shard-i-pods``, the shard map is the ConfigMap ``t-shard-map`` and the
operator's certificate the Secret ``t-shard-tls``. Every owned object carries
``owned_meta``: the topic's labels and a controller owner reference to it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GROUP",
    "LABEL_ROLE",
    "LABEL_SERVICE",
    "LABEL_SHARD",
    "LABEL_TOPIC",
    "MANAGER",
    "PLURAL",
    "SCHEDULE_KIND",
    "SCHEDULE_PLURAL",
    "VERSION",
    "headless_name",
    "owned_meta",
    "pod_address",
    "pod_host",
    "pod_name",
    "shard_map_name",
    "shard_name",
    "shard_selector",
    "shard_tls_name",
]

GROUP = "delayq.io"
VERSION = "v1alpha1"
PLURAL = "delaytopics"
SCHEDULE_KIND = "DelaySchedule"
SCHEDULE_PLURAL = "delayschedules"
LABEL_TOPIC = f"{GROUP}/topic"
LABEL_SHARD = f"{GROUP}/shard"
LABEL_ROLE = f"{GROUP}/role"
LABEL_SERVICE = f"{GROUP}/service"
"""On a shard's Services: ``pods`` (the headless one, every pod: what a
ServiceMonitor selects) or ``master``."""
MANAGER = "delayq-operator"


def shard_name(topic: str, shard: int) -> str:
    return f"{topic}-shard-{shard}"


def pod_name(topic: str, shard: int, ordinal: int) -> str:
    """The StatefulSet's pod ``ordinal`` of shard ``shard``."""
    return f"{shard_name(topic, shard)}-{ordinal}"


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


def shard_selector(topic: str, shard: int) -> dict[str, str]:
    """The labels that select shard ``shard``'s pods (and its volume claims)."""
    return {LABEL_TOPIC: topic, LABEL_SHARD: str(shard)}
