"""The operator's certificates in the cluster: carries out ``certificates``' plans.

For a topic (``Issuer.topic``), under its namespace's lock: the namespace's CA
Secret ``delayq-ca``, then the control plane's ``delayq-control-tls``, then the
topic's ``<topic>-shard-tls`` (owned by the DelayTopic: deleted with it; the
namespace's two stay), and the ConfigMap ``delayq-ca`` (``ca.crt``: the trust
bundle, for clients of a public port over TLS). A Secret is created (409: made
meanwhile, read next round) or replaced at the resource version read (409:
changed meanwhile, likewise): never two CAs, never a lost write. A Secret of
those names without the operator's label is not touched (``NotOurs``). The
calls themselves are ``kube.Cluster``'s.

``Issuer.control_tls`` hands the keepers the namespace's control certificate as
files (``TlsConfig`` wants paths): written once per content under
``<dir>/<namespace>/<digest>/``, so a new certificate or trust bundle is a new
``TlsConfig`` (the keepers redial with it) and files in use are never rewritten.

The clock is ``clock`` (tests pass their own); everything decided is in
``certificates``.
"""

from __future__ import annotations

import datetime
import hashlib
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delayq.tls import TlsConfig

from .certificates import (
    CA_CRT,
    CA_SECRET,
    CONTROL_SECRET,
    TLS_CRT,
    TLS_KEY,
    Action,
    Authority,
    CertSettings,
    Plan,
    SecretContents,
    StoredSecret,
    cert_times,
    expiry_warning,
    plan_ca,
)
from .crd import GROUP, MANAGER, owned_meta, shard_tls_name
from .kube import Cluster, NotOurs
from .leafcerts import plan_control, plan_topic
from .spec import DelayTopicSpec

__all__ = ["CA_CONFIG_MAP", "LABEL_CERT", "Issuer", "NotOurs", "TopicCerts"]

CA_CONFIG_MAP = "delayq-ca"
"""The namespace's trust bundle for clients (``ca.crt``), public like any CA."""
LABEL_CERT = f"{GROUP}/certificate"
"""On the operator's Secrets: ``ca`` or ``leaf``."""
CONTROL_READ_EVERY_S = 5.0
"""How long ``control_tls`` answers from what it last read (every topic's keepers
ask every second; a change this process writes is seen at once)."""
_KEEP_DIRS = 3
"""Control certificate directories kept per namespace (the newest): one in use,
and the ones channels made just before a change may still read."""


@dataclass(frozen=True)
class TopicCerts:
    """A topic's certificate after a round: for its status and events."""

    secret: str
    not_after: datetime.datetime | None = None
    """When the pods' certificate, or the CA that signed it, expires (first)."""
    renew_at: datetime.datetime | None = None
    """When the operator renews it (its own certificates only)."""
    warning: str = ""
    """An expiry within the warning window that renewal has not fixed."""
    changes: tuple[tuple[str, str], ...] = field(default=())
    """(reason, message) of each Secret this round wrote, for events."""


def _meta(namespace: str, name: str, kind: str) -> dict[str, Any]:
    """A namespace-wide object's metadata (no owner: it outlives any one topic)."""
    labels = {"app.kubernetes.io/managed-by": MANAGER, LABEL_CERT: kind}
    return {"name": name, "namespace": namespace, "labels": labels}


def _contents(stored: StoredSecret | None) -> SecretContents | None:
    return None if stored is None else SecretContents(stored.data, stored.annotations)


class Issuer:
    def __init__(
        self,
        cluster: Cluster,
        settings: CertSettings,
        files: Path,
        *,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.files = files
        self.clock = clock
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._control: dict[str, tuple[float, TlsConfig | None]] = {}

    def _lock(self, namespace: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(namespace, threading.Lock())

    def _write(self, meta: dict[str, Any], current: StoredSecret | None, plan: Plan) -> bool:
        """Carry out ``plan`` on the Secret of ``meta``; False when there was nothing
        to do or it changed meanwhile (the next round reads it again)."""
        if not plan.changed:
            return False
        meta = {**meta, "annotations": plan.annotations}
        return self.cluster.write_secret(meta, plan.data, current.version if current else "")

    # -- the round
    def authority(self, namespace: str) -> tuple[Authority | None, list[tuple[str, str]]]:
        """The namespace's CA after its plan (None: written meanwhile by another
        round, read next time) and what was done."""
        now = self.clock()
        current = self.cluster.secret(namespace, CA_SECRET)
        leaves = self.cluster.secrets(
            namespace, {"app.kubernetes.io/managed-by": MANAGER, LABEL_CERT: "leaf"}
        )
        plan = plan_ca(_contents(current), [s.data for s in leaves], now, self.settings)
        changes: list[tuple[str, str]] = []
        if plan.changed:
            if not self._write(_meta(namespace, CA_SECRET, "ca"), current, plan):
                return None, changes
            changes.append(("CA" + _verb(plan.action), plan.reason))
        ca = Authority.from_data(plan.data)
        meta = _meta(namespace, CA_CONFIG_MAP, "ca")
        self.cluster.publish_config_map(meta, {CA_CRT: ca.bundle().decode()})
        return ca, changes

    def topic(
        self, body: Mapping[str, Any], spec: DelayTopicSpec, *, shards: int = 0
    ) -> TopicCerts:
        """Bring the namespace's CA, the control certificate and the topic's
        certificate (``spec.shards`` shards, or ``shards`` when the map lists more)
        up to date. Raises ``ApiException``, ``NotOurs``."""
        meta = body["metadata"]
        namespace, topic = str(meta["namespace"]), str(meta["name"])
        name = shard_tls_name(topic)
        with self._lock(namespace):
            ca, changes = self.authority(namespace)
            if ca is None:
                return TopicCerts(name, changes=tuple(changes))
            now = self.clock()
            current = self.cluster.secret(namespace, CONTROL_SECRET)
            plan = plan_control(_contents(current), ca, now, self.settings)
            if self._write(_meta(namespace, CONTROL_SECRET, "leaf"), current, plan):
                self._control.pop(namespace, None)
                changes.append(("ControlCertificate" + _verb(plan.action), plan.reason))
            current = self.cluster.secret(namespace, name)
            plan = plan_topic(
                topic, namespace, spec, _contents(current), ca, now, self.settings, shards=shards
            )
            mine = owned_meta(name, dict(body), {LABEL_CERT: "leaf"})
            if self._write(mine, current, plan):
                changes.append(("Certificate" + _verb(plan.action), f"{name}: {plan.reason}"))
            not_after, renew_at = cert_times(plan.data, self.settings)
            return TopicCerts(
                name,
                not_after=not_after,
                renew_at=renew_at,
                warning=plan.warning,
                changes=tuple(changes),
            )

    def users(self, namespace: str, secret: str) -> TopicCerts:
        """A user's Secret (``spec.tls.secretName``), looked at only: its expiry."""
        found = self.cluster.secret(namespace, secret, ours=False)
        if found is None:
            return TopicCerts(secret, warning=f"Secret {secret} does not exist")
        data = found.data
        not_after, _ = cert_times(data, self.settings)
        warning = expiry_warning(data, self.clock(), self.settings.warn_before)
        return TopicCerts(secret, not_after=not_after, warning=warning)

    def control_tls(self, namespace: str) -> TlsConfig | None:
        """The namespace's control certificate as files, None until it exists
        (read again after ``CONTROL_READ_EVERY_S``)."""
        at, tls = self._control.get(namespace, (-CONTROL_READ_EVERY_S, None))
        if time.monotonic() - at < CONTROL_READ_EVERY_S:
            return tls
        tls = self._read_control(namespace)
        self._control[namespace] = (time.monotonic(), tls)
        return tls

    def _read_control(self, namespace: str) -> TlsConfig | None:
        try:
            found = self.cluster.secret(namespace, CONTROL_SECRET)
        except NotOurs:
            return None
        if found is None:
            return None
        data = found.data
        if not all(k in data for k in (CA_CRT, TLS_CRT, TLS_KEY)):
            return None
        digest = hashlib.sha256(b"\0".join(data[k] for k in (CA_CRT, TLS_CRT, TLS_KEY)))
        where = self.files / namespace / digest.hexdigest()[:16]
        if not where.is_dir():
            tmp = where.with_name(where.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True, mode=0o700)
            for key in (CA_CRT, TLS_CRT, TLS_KEY):
                (tmp / key).write_bytes(data[key])
                (tmp / key).chmod(0o600)
            tmp.rename(where)
            self._prune(where.parent, keep=where)
        return TlsConfig(ca=where / CA_CRT, cert=where / TLS_CRT, key=where / TLS_KEY)

    @staticmethod
    def _prune(parent: Path, keep: Path) -> None:
        dirs = sorted(
            (d for d in parent.iterdir() if d.is_dir() and d != keep),
            key=lambda d: d.stat().st_mtime,
        )
        for old in dirs[: max(0, len(dirs) - (_KEEP_DIRS - 1))]:
            shutil.rmtree(old, ignore_errors=True)


_VERBS = {
    Action.ISSUE: "Issued",
    Action.REISSUE: "Renewed",
    Action.TRUST: "TrustUpdated",
    Action.ROTATE_CA: "Rotated",
    Action.DROP_OLD_CA: "PreviousDropped",
}


def _verb(action: Action) -> str:
    """An event reason's verb for what a plan did."""
    return _VERBS.get(action, action.value)
