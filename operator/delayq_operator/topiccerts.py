"""A topic's certificates round (I/O: the ``issuer``, events, the status writer).

``certificates`` makes the topic's TLS what its spec says: the operator's
certificates issued or renewed (``issuer.Issuer.topic``) for its shards, or the
user's Secret looked at; an event for each Secret written and one when the
AdminTLS condition turns False (``status.tls_warning``), and ``status.tls``
with the condition through the status writer. ``client_tls`` is the
certificate the keepers call a topic's pods with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from delayq.tls import TlsConfig

from .issuer import TopicCerts
from .memo import Memo
from .spec import DelayTopicSpec
from .status import tls_condition, tls_status, tls_warning
from .statusupdate import StatusUpdate

__all__ = ["certificates", "client_tls"]


def client_tls(ours: Memo, namespace: str) -> Callable[[DelayTopicSpec], TlsConfig | None]:
    """The keepers' client certificate for a topic's pods: the namespace's control
    certificate (the operator's CA), or the operator's own for a user's Secret."""

    def tls(spec: DelayTopicSpec) -> TlsConfig | None:
        if spec.tls.issued:
            return ours.issuer.control_tls(namespace)
        return ours.settings.admin_tls

    return tls


def certificates(
    ours: Memo, topic: dict[str, Any], spec: DelayTopicSpec, *, shards: int = 0
) -> None:
    """The topic's TLS as its spec says, for ``spec.shards`` (or ``shards`` when
    more) shards. Raises ``ApiException``, ``NotOurs``."""
    meta = topic["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    tls = spec.tls
    if tls.issued:
        certs = ours.issuer.topic(topic, spec, shards=shards)
    elif tls.enabled:
        certs = ours.issuer.users(namespace, tls.secret_name)
    else:
        certs = TopicCerts("")
    for reason, message in certs.changes:
        ours.cluster.post_event(topic, "Normal", reason, message)
    condition = tls_condition(tls.mode.value, certs.secret, certs.warning)
    if tls_warning(condition, (topic.get("status") or {}).get("conditions") or []):
        ours.cluster.post_event(topic, "Warning", condition["reason"], condition["message"])
    doc = tls_status(tls, certs.secret, certs.not_after, certs.renew_at)
    ours.status.write(namespace, name, StatusUpdate(conditions=(condition,), tls=doc))
