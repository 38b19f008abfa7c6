"""The operator's own CA and the certificates it issues, as decisions (pure: no
cluster, no clock; the time is an argument, keys are generated, nothing else).

This module holds the settings, the Secrets' shapes, the times and the CA's
plan (``plan_ca``); ``leafcerts`` plans the certificates the CA signs;
``issuer`` carries the plans out in the cluster.

**Scope: one CA per namespace.** A namespace is where Kubernetes RBAC draws the
line around Secrets, and the admin port trusts any certificate its CA signed (it
checks the signer, not the caller's name): a CA per operator installation would let
anyone who can read one topic's Secret in namespace A present that certificate at
the admin port of every topic in namespace B. With a CA per namespace, reading a
namespace's Secrets grants what it already granted (that namespace's topics) and no
more. The operator, which calls every namespace's pods, holds one client
certificate per namespace (``delayq-control-tls`` there).

**Secrets** (``data`` keys; values PEM bytes, which the caller base64-encodes):

``delayq-ca`` (one per namespace; no pod mounts it)
    ``ca.crt``        the CA that signs now
    ``ca.key``        its key
    ``previous.crt``  the CA it replaced, during the cross-trust window only
``<topic>-shard-tls`` (``crd.shard_tls_name``; the shape of a user's
``spec.tls.secretName``, so the pods mount either the same way)
    ``tls.crt``, ``tls.key``  the topic's pods' certificate: server and client use
                              (the pods call each other), named for every pod of
                              every shard and the shards' Services (``leafcerts.server_names``)
    ``ca.crt``                the trust bundle: the CA, then the previous one
``delayq-control-tls`` (one per namespace: the operator's keepers, the topics' Spark jobs)
    ``tls.crt``, ``tls.key``  a client certificate (``CONTROL_COMMON_NAME``)
    ``ca.crt``                the trust bundle

and on each leaf Secret the annotation ``delayq.io/ca-trusted-since``
(``<CA fingerprint> <time>``): since when its ``ca.crt`` has held the signing CA.

**Rules.** A certificate is renewed once ``renew_after`` (2/3) of the lifetime it
was issued for has passed: leaves (default 90 days) and the CA (default 5 years)
alike. A leaf is reissued at once when its names no longer cover the topic's pods
and Services (``spec.shards`` or ``replicasPerShard`` grew), under the CA that
signed it (no settle wait: every pod trusts that CA already). The CA rotates by
cross-trust: the new CA is made and the old one kept as ``previous.crt``; every
leaf Secret's bundle then trusts both; a leaf is reissued under the new CA only
once its Secret has trusted that CA for ``settle`` (the time the kubelet takes to
bring a Secret's change to every pod), so no pod is shown a certificate it does
not trust yet; the old CA is dropped when every leaf of the namespace is signed
by the new one and was issued ``settle`` ago. A leaf never outlives its CA. Each
plan warns when something it leaves in place expires within ``warn_before``
(14 days): an expiry that renewal has not fixed (a stuck rotation, a lifetime
set too short, a user's Secret, ``expiry_warning``).

The CA does not rotate again while ``previous.crt`` is there (with the default
lifetimes a window lasts minutes, the CA's life years).

**Size.** The topic's certificate lists every name (``leafcerts.server_names``: 2 per pod, 8
per shard for its two Services): 42 names, 2.8 KB of PEM for 3 shards of 3 pods;
896 names, 49 KB for 64 shards of 3 (sent in every handshake); 1024 shards of 5
would pass a Secret's 1 MiB. A certificate per shard is the way past that.

Invariants: every plan's ``data`` is the Secret's whole ``data`` afterwards; a
leaf's ``ca.crt`` is always the CA Secret's bundle once written; a leaf is only
written signed by a CA every pod sharing its Secret has trusted for ``settle``,
except when its Secret is new or its signer is no longer trusted at all.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cryptography import x509

from delayq import pki
from delayq.pki import Issued

from .crd import GROUP

__all__ = [
    "CA_CRT",
    "CA_SECRET",
    "CN_MAX",
    "CONTROL_COMMON_NAME",
    "CONTROL_SECRET",
    "TLS_CRT",
    "TLS_KEY",
    "TRUSTED_SINCE",
    "Action",
    "Authority",
    "CertSettings",
    "Plan",
    "SecretContents",
    "StoredSecret",
    "cert_times",
    "expiry_warning",
    "plan_ca",
    "renew_at",
    "stamp",
]

CA_SECRET = "delayq-ca"
CONTROL_SECRET = "delayq-control-tls"
CONTROL_COMMON_NAME = "delayq-control-plane"
CA_CRT, CA_KEY, PREVIOUS_CRT = "ca.crt", "ca.key", "previous.crt"
TLS_CRT, TLS_KEY = "tls.crt", "tls.key"
TRUSTED_SINCE = f"{GROUP}/ca-trusted-since"
CN_MAX = 64  # X.509's upper bound on a common name


@dataclass(frozen=True, kw_only=True)
class CertSettings:
    """Lifetimes and margins (module notes)."""

    ca_lifetime: datetime.timedelta = datetime.timedelta(days=5 * 365)
    leaf_lifetime: datetime.timedelta = datetime.timedelta(days=90)
    renew_after: float = 2 / 3
    """The part of its lifetime after which a certificate is renewed."""
    settle: datetime.timedelta = datetime.timedelta(minutes=5)
    """How long a Secret's change takes to reach every pod that mounts it (the
    kubelet's sync period and its cache), with a margin."""
    warn_before: datetime.timedelta = datetime.timedelta(days=14)
    cluster_domain: str = "cluster.local"

    def __post_init__(self) -> None:
        if not 0 < self.renew_after < 1:
            raise ValueError(f"renew_after must be in (0, 1), got {self.renew_after}")
        if self.leaf_lifetime <= datetime.timedelta(0) or self.ca_lifetime < self.leaf_lifetime:
            raise ValueError("lifetimes must be positive, the CA's at least the leaves'")


class Action(enum.StrEnum):
    NOTHING = "nothing"
    ISSUE = "issue"
    """A new Secret (none, or one that does not parse): everything made afresh."""
    REISSUE = "reissue"
    """A new leaf certificate and key (and the current trust bundle)."""
    TRUST = "trust"
    """The leaf's trust bundle (and its annotation) rewritten, the certificate kept."""
    ROTATE_CA = "rotate-ca"
    """A new CA; the old one kept as ``previous.crt`` for the cross-trust window."""
    DROP_OLD_CA = "drop-old-ca"
    """``previous.crt`` removed: no leaf is signed by it any more."""


@dataclass(frozen=True)
class SecretContents:
    """A Secret as it is: its ``data`` (decoded) and annotations."""

    data: Mapping[str, bytes]
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredSecret:
    """A Secret as the API server holds it: ``data`` decoded."""

    data: dict[str, bytes]
    annotations: dict[str, str] = field(default_factory=dict)
    version: str = ""
    """Its resource version (``kube.Cluster.write_secret`` replaces it only at this one)."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What to do with one Secret."""

    action: Action
    reason: str
    data: dict[str, bytes]
    """The Secret's whole ``data`` after the plan (as it is, for NOTHING)."""
    annotations: dict[str, str] = field(default_factory=dict)
    """The operator's annotations on the Secret after the plan."""
    warning: str = ""
    """An expiry within ``warn_before`` that this plan leaves in place; empty: none."""

    @property
    def changed(self) -> bool:
        return self.action is not Action.NOTHING


@dataclass(frozen=True)
class Authority:
    """The namespace's CA as ``delayq-ca`` holds it."""

    issued: Issued
    previous: x509.Certificate | None = None

    @property
    def cert(self) -> x509.Certificate:
        return self.issued.certificate

    @property
    def trusted(self) -> tuple[x509.Certificate, ...]:
        """The CAs a leaf's peers accept: this one, then the previous one."""
        return (self.cert,) if self.previous is None else (self.cert, self.previous)

    def bundle(self) -> bytes:
        return b"".join(pki.pem(c) for c in self.trusted)

    def data(self) -> dict[str, bytes]:
        out = {CA_CRT: self.issued.cert, CA_KEY: self.issued.key}
        if self.previous is not None:
            out[PREVIOUS_CRT] = pki.pem(self.previous)
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, bytes]) -> Authority:
        """From ``delayq-ca``'s data; ValueError when it is incomplete or inconsistent."""
        if CA_CRT not in data or CA_KEY not in data:
            raise ValueError(f"needs {CA_CRT} and {CA_KEY}")
        issued = Issued(key=data[CA_KEY], cert=data[CA_CRT])
        cert = issued.certificate
        if not pki.key_matches(cert, issued.key):
            raise ValueError(f"{CA_KEY} is not the key of {CA_CRT}")
        previous = pki.load_certs(data[PREVIOUS_CRT])[0] if PREVIOUS_CRT in data else None
        return cls(issued, previous)


def renew_at(cert: x509.Certificate, settings: CertSettings) -> datetime.datetime:
    start = pki.issued_at(cert)
    return start + (cert.not_valid_after_utc - start) * settings.renew_after


def stamp(t: datetime.datetime) -> str:
    """An instant as Kubernetes writes times (RFC 3339, seconds, UTC)."""
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expiry_warning(
    data: Mapping[str, bytes], now: datetime.datetime, warn_before: datetime.timedelta
) -> str:
    """When a TLS Secret's certificate (``tls.crt``, good until it or the CA of
    ``ca.crt`` that signed it expires) runs out, if that is within ``warn_before``
    of ``now`` (or past); empty when it is later or nothing parses. For the
    operator's Secrets and a user's (``spec.tls``) alike; other CAs of the bundle
    (a previous one, kept for the cross-trust window) do not count."""
    try:
        leaf = pki.load_certs(data[TLS_CRT])[0]
        cas = pki.load_certs(data[CA_CRT]) if CA_CRT in data else []
    except (KeyError, ValueError):
        return ""
    found = [(leaf.not_valid_after_utc, "the certificate")]
    found += [(c.not_valid_after_utc, "its CA") for c in cas if pki.signed_by(leaf, c)]
    return _expiring(found, now, warn_before)


def cert_times(
    data: Mapping[str, bytes], settings: CertSettings = CertSettings()
) -> tuple[datetime.datetime | None, datetime.datetime | None]:
    """A TLS Secret's certificate's end (its own, or its signing CA's when that is
    earlier) and when the operator renews it; (None, None) when nothing parses."""
    try:
        leaf = pki.load_certs(data[TLS_CRT])[0]
        cas = pki.load_certs(data[CA_CRT]) if CA_CRT in data else []
    except (KeyError, ValueError):
        return None, None
    ends = [leaf.not_valid_after_utc]
    ends += [c.not_valid_after_utc for c in cas if pki.signed_by(leaf, c)]
    return min(ends), renew_at(leaf, settings)


def _expiring(
    found: Iterable[tuple[datetime.datetime, str]],
    now: datetime.datetime,
    warn_before: datetime.timedelta,
) -> str:
    soon = [(t, what) for t, what in found if t - now <= warn_before]
    if not soon:
        return ""
    t, what = min(soon)
    verb = "expired" if t <= now else "expires"
    return f"{what} {verb} at {stamp(t)}, and renewal has not replaced it"


def _ca_warning(ca: Authority, now: datetime.datetime, settings: CertSettings) -> str:
    return _expiring([(ca.cert.not_valid_after_utc, "the CA")], now, settings.warn_before)


def plan_ca(
    current: SecretContents | None,
    leaves: Iterable[Mapping[str, bytes]],
    now: datetime.datetime,
    settings: CertSettings = CertSettings(),
    *,
    common_name: str = "delayq CA",
) -> Plan:
    """What to do with the namespace's ``delayq-ca``: ``leaves`` are the data of
    every leaf Secret in the namespace (the topics' and ``delayq-control-tls``),
    which decide when the old CA may go."""

    def fresh(reason: str) -> Plan:
        made = pki.new_ca(common_name, lifetime=settings.ca_lifetime, now=now)
        return Plan(action=Action.ISSUE, reason=reason, data=Authority(made).data())

    if current is None:
        return fresh("no CA yet")
    try:
        ca = Authority.from_data(current.data)
    except ValueError as e:
        return fresh(f"the CA Secret is unusable ({e}): a new CA, every leaf reissued")
    if ca.cert.not_valid_after_utc <= now:
        return fresh("the CA expired: a new CA, every leaf reissued")
    if ca.previous is not None:
        if ca.previous.not_valid_after_utc <= now:
            return _ca_plan(
                Action.DROP_OLD_CA, "the previous CA expired", Authority(ca.issued), now, settings
            )
        waiting = _old_leaves(ca, leaves, now, settings)
        if waiting:
            return Plan(
                action=Action.NOTHING,
                reason=f"cross-trust window: {waiting} leaf Secret(s) not yet settled "
                "under the new CA",
                data=ca.data(),
                warning=_ca_warning(ca, now, settings),
            )
        return _ca_plan(
            Action.DROP_OLD_CA,
            "every leaf is signed by the new CA: the old one is no longer trusted",
            Authority(ca.issued),
            now,
            settings,
        )
    if now >= renew_at(ca.cert, settings):
        made = pki.new_ca(common_name, lifetime=settings.ca_lifetime, now=now)
        return _ca_plan(
            Action.ROTATE_CA,
            f"{settings.renew_after:.0%} of the CA's lifetime passed: a new CA, the old one "
            "trusted until every leaf is reissued",
            Authority(made, previous=ca.cert),
            now,
            settings,
        )
    return Plan(
        action=Action.NOTHING,
        reason=f"the CA rotates at {stamp(renew_at(ca.cert, settings))}",
        data=ca.data(),
        warning=_ca_warning(ca, now, settings),
    )


def _ca_plan(
    action: Action, reason: str, ca: Authority, now: datetime.datetime, settings: CertSettings
) -> Plan:
    return Plan(
        action=action, reason=reason, data=ca.data(), warning=_ca_warning(ca, now, settings)
    )


def _old_leaves(
    ca: Authority,
    leaves: Iterable[Mapping[str, bytes]],
    now: datetime.datetime,
    settings: CertSettings,
) -> int:
    """Leaf Secrets not yet signed by the CA, or signed too recently for every pod
    to have loaded them (unreadable ones count: they are about to be reissued)."""
    count = 0
    for data in leaves:
        try:
            leaf = pki.load_certs(data[TLS_CRT])[0]
        except (KeyError, ValueError):
            count += 1
            continue
        if not pki.signed_by(leaf, ca.cert) or pki.issued_at(leaf) + settings.settle > now:
            count += 1
    return count
