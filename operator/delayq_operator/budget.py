"""A shard's PodDisruptionBudget: at most one of its pods down at a time (pure:
no cluster, no I/O).
"""

from __future__ import annotations

from typing import Any

from .crd import LABEL_SHARD, owned_meta, shard_name, shard_selector
from .spec import DelayTopicSpec

__all__ = ["disruption_budget"]


def disruption_budget(body: dict[str, Any], spec: DelayTopicSpec, shard: int) -> dict[str, Any]:
    topic = body["metadata"]["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": owned_meta(shard_name(topic, shard), body, {LABEL_SHARD: str(shard)}),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": shard_selector(topic, shard)}},
    }
