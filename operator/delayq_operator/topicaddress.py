"""Where the operator calls a DelayTopic's public port as a client does (I/O: the
topic's shards read through ``kube``), for the rounds that use the typed client
(``groupkeeper``, ``schedulekeeper``).

``public_target`` is the address of the lowest shard whose recorded master is
in office, by its pod's DNS name (a TLS port's certificate names it; the client
then follows the map that node serves, the pods' DNS names: the operator must
run where they resolve, in the cluster), and the client certificate a topic
with ``publicTls`` is called with (the keepers', ``topiccerts.client_tls``);
None while no shard serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delayq.tls import TlsConfig

from .crd import pod_address
from .memo import Memo
from .records import records_of
from .spec import DelayTopicSpec
from .topiccerts import client_tls

__all__ = ["Target", "public_target"]


@dataclass(frozen=True)
class Target:
    """A topic's public port, as a client dials it."""

    address: str
    tls: TlsConfig | None


def public_target(ours: Memo, topic: dict[str, Any], spec: DelayTopicSpec) -> Target | None:
    """``topic``'s lowest shard's master pod in office and the TLS to call it with;
    None when no shard's master is in office."""
    meta = topic["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    records = records_of(topic.get("status"))
    for view in sorted(ours.cluster.shard_views(namespace, name), key=lambda v: v.index):
        rec = records.get(view.index)
        if rec is not None and rec.in_office and any(p.name == rec.master for p in view.pods):
            address = pod_address(name, namespace, view.index, rec.master, spec.port)
            tls = client_tls(ours, namespace)(spec) if spec.tls.public else None
            return Target(address, tls)
    return None
