"""A DelayTopic's NetworkPolicy, as a plain dict (pure: no cluster, no I/O).

With ``spec.networkPolicy.enabled`` (the default) a topic ``t`` owns one
NetworkPolicy ``t-shards`` that selects its shard pods (the labels the
StatefulSets put on them, ``delayq.io/shard`` present: not its Job pods) and
admits, per port (TCP):

  admin (7422)              the operator's pods (``OperatorPods``: its namespace
                            and pod labels, which the chart passes), the topic's
                            own shard pods (replication) and Job pods (the Spark
                            rebalance and compaction jobs); nothing else
  metrics (7421)            ``spec.networkPolicy.metricsFrom`` (NetworkPolicyPeers,
                            e.g. Prometheus' namespace); absent or empty: every source
  public (spec.port)        ``spec.networkPolicy.publicFrom``, and always the
  and RocketMQ (7423)       operator and the topic's own pods and jobs (the
                            operator reads shards' Stats there, the jobs the
                            shard map); absent or empty: every source

Any other port of the shard pods is closed to everyone. "Absent or empty is
every source" is what an ingress rule's own ``from`` means in Kubernetes: a
list is never read as "no one". The policy has an owner reference to the
topic, so the garbage collector deletes it with the topic; with ``enabled:
false`` the handler deletes it. Only a network plugin that implements
NetworkPolicies enforces it (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from delayq.addresses import ADMIN_PORT, METRICS_PORT, ROCKETMQ_PORT

from .crd import LABEL_SHARD, LABEL_TOPIC, MANAGER, owned_meta
from .jobs import LABEL_JOB
from .spec import DelayTopicSpec

__all__ = [
    "OPERATOR_LABELS_DEFAULT",
    "OPERATOR_NAMESPACE_DEFAULT",
    "OperatorPods",
    "network_policy",
    "network_policy_name",
    "parse_labels",
]

OPERATOR_NAMESPACE_DEFAULT = "delayq-system"
"""The namespace manifests/operator.yaml installs the operator in."""
OPERATOR_LABELS_DEFAULT = {"app.kubernetes.io/name": "delayq-operator"}
"""The label the chart's operator pods carry whatever the release's name."""
NAMESPACE_NAME = "kubernetes.io/metadata.name"
"""The label the API server puts on every namespace: its name."""


@dataclass(frozen=True, kw_only=True)
class OperatorPods:
    """Where the operator's pods run and the labels that select them (the chart
    passes its release's: ``DELAYQ_OPERATOR_POD_NAMESPACE`` and
    ``DELAYQ_OPERATOR_POD_LABELS``)."""

    namespace: str = OPERATOR_NAMESPACE_DEFAULT
    labels: dict[str, str] = field(default_factory=lambda: dict(OPERATOR_LABELS_DEFAULT))

    def peer(self) -> dict[str, Any]:
        """The NetworkPolicyPeer of the operator's pods."""
        return {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: self.namespace}},
            "podSelector": {"matchLabels": dict(self.labels)},
        }


def parse_labels(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` as a dict; ValueError names a malformed pair."""
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"a label must be key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def network_policy_name(topic: str) -> str:
    return f"{topic}-shards"


def _topic_pods(topic: str, present: str) -> dict[str, Any]:
    """A label selector of the topic's pods that carry the label ``present``."""
    return {
        "matchLabels": {LABEL_TOPIC: topic, "app.kubernetes.io/managed-by": MANAGER},
        "matchExpressions": [{"key": present, "operator": "Exists"}],
    }


def _rule(ports: list[int], peers: list[dict[str, Any]]) -> dict[str, Any]:
    """An ingress rule on ``ports`` (TCP) from ``peers``; none: from every source."""
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": p} for p in ports]}
    if peers:
        rule["from"] = peers
    return rule


def network_policy(
    body: dict[str, Any], spec: DelayTopicSpec, operator: OperatorPods
) -> dict[str, Any] | None:
    """The topic's NetworkPolicy, or None with ``spec.networkPolicy.enabled: false``."""
    policy = spec.network_policy
    if not policy.enabled:
        return None
    topic = body["metadata"]["name"]
    internal = [
        operator.peer(),
        {"podSelector": _topic_pods(topic, LABEL_SHARD)},
        {"podSelector": _topic_pods(topic, LABEL_JOB)},
    ]
    public = [*policy.public_from, *internal] if policy.public_from else []
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": owned_meta(network_policy_name(topic), body, {}),
        "spec": {
            "podSelector": _topic_pods(topic, LABEL_SHARD),
            "policyTypes": ["Ingress"],
            "ingress": [
                _rule([ADMIN_PORT], internal),
                _rule([METRICS_PORT], list(policy.metrics_from)),
                _rule([spec.port, ROCKETMQ_PORT], public),
            ],
        },
    }
