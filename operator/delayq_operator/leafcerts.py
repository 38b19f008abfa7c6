"""The certificates the operator's CA signs, as decisions (pure: no cluster, no
clock; the time is an argument, keys are generated, nothing else): a topic's
pods' certificate (server and client use, named for every pod of every shard and
the shards' Services, ``server_names``) and each namespace's control-plane
client certificate, planned by ``plan_leaf`` under the rules written in
``certificates`` (renewal at 2/3 of the lifetime, a reissue when the names grow,
a new CA's signature only once the Secret has trusted it for ``settle``).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509

from delayq import pki

from .certificates import (
    CA_CRT,
    CN_MAX,
    CONTROL_COMMON_NAME,
    TLS_CRT,
    TLS_KEY,
    TRUSTED_SINCE,
    Action,
    Authority,
    CertSettings,
    Plan,
    SecretContents,
    expiry_warning,
    renew_at,
    stamp,
)
from .crd import headless_name, pod_host, pod_name, shard_name
from .spec import DelayTopicSpec

__all__ = ["LeafRequest", "plan_control", "plan_leaf", "plan_topic", "server_names"]

_DEFAULTS = CertSettings()


@dataclass(frozen=True)
class LeafRequest:
    """The certificate a leaf Secret must hold."""

    common_name: str
    names: frozenset[str] = frozenset()
    """The DNS names it must be valid for (it may name more)."""
    server: bool = False
    client: bool = True


def server_names(
    topic: str,
    namespace: str,
    shards: int,
    replicas: int,
    cluster_domain: str = "cluster.local",
) -> frozenset[str]:
    """Every name a topic's pods are dialled by, for shards ``0..shards-1`` of
    ``replicas`` pods each: each pod through its shard's headless Service (the
    map's addresses), and each shard's master and headless Services, short,
    namespaced and in full."""
    names: set[str] = set()
    for shard in range(shards):
        for ordinal in range(replicas):
            host = pod_host(topic, namespace, shard, pod_name(topic, shard, ordinal))
            names |= {host, f"{host}.{cluster_domain}"}
        for service in (shard_name(topic, shard), headless_name(topic, shard)):
            svc = f"{service}.{namespace}.svc"
            names |= {service, f"{service}.{namespace}", svc, f"{svc}.{cluster_domain}"}
    return frozenset(names)


def _trusted_since(
    contents: SecretContents, ca: Authority, now: datetime.datetime
) -> tuple[datetime.datetime, bool]:
    """Since when the Secret's ``ca.crt`` has held the signing CA (now, when it does
    not yet: it will once this plan is written), and whether its annotation says so."""
    fp = pki.fingerprint(ca.cert)
    try:
        held = {pki.fingerprint(c) for c in pki.load_certs(contents.data[CA_CRT])}
    except (KeyError, ValueError):
        held = set()
    mark, _, when = contents.annotations.get(TRUSTED_SINCE, "").partition(" ")
    if fp in held and mark == fp:
        try:
            return datetime.datetime.fromisoformat(when), True
        except ValueError:
            pass
    return now, False


def plan_leaf(
    current: SecretContents | None,
    ca: Authority,
    want: LeafRequest,
    now: datetime.datetime,
    settings: CertSettings = _DEFAULTS,
) -> Plan:
    """What to do with a leaf Secret (module notes: the rules)."""
    bundle = ca.bundle()

    def mark(since: datetime.datetime) -> dict[str, str]:
        return {TRUSTED_SINCE: f"{pki.fingerprint(ca.cert)} {stamp(since)}"}

    def reissue(action: Action, reason: str, since: datetime.datetime) -> Plan:
        leaf = pki.issue(
            ca.issued,
            want.common_name[:CN_MAX],
            hosts=sorted(want.names),
            server=want.server,
            client=want.client,
            lifetime=settings.leaf_lifetime,
            now=now,
        )
        data = {TLS_CRT: leaf.cert, TLS_KEY: leaf.key, CA_CRT: bundle}
        warning = expiry_warning(data, now, settings.warn_before)
        return Plan(
            action=action, reason=reason, data=data, annotations=mark(since), warning=warning
        )

    if current is None:
        return reissue(Action.ISSUE, "no certificate yet", now)
    try:
        leaf = pki.load_certs(current.data[TLS_CRT])[0]
        if not pki.key_matches(leaf, current.data[TLS_KEY]):
            raise ValueError(f"{TLS_KEY} is not the key of {TLS_CRT}")
    except (KeyError, ValueError) as e:
        return reissue(Action.ISSUE, f"the Secret is unusable ({e})", now)
    since, marked = _trusted_since(current, ca, now)
    if not any(pki.signed_by(leaf, c) for c in ca.trusted):
        return reissue(Action.REISSUE, "signed by a CA that is no longer trusted", since)

    due = _reissue_reason(leaf, ca, want, now, settings)
    # a leaf of the CA that signed the one it replaces is trusted wherever that one
    # was; only a leaf of a new CA waits until every pod trusts it
    settled = pki.signed_by(leaf, ca.cert) or since + settings.settle <= now
    if due and settled:
        return reissue(Action.REISSUE, due, since)
    wait = (
        f"; reissue ({due}) waits until {stamp(since + settings.settle)}, when every pod "
        "trusts the CA"
        if due
        else ""
    )
    data = {**current.data, CA_CRT: bundle}
    warning = expiry_warning(data, now, settings.warn_before)
    if current.data.get(CA_CRT) != bundle or not marked:
        return Plan(
            action=Action.TRUST,
            reason=f"the trust bundle changed{wait}",
            data=data,
            annotations=mark(since),
            warning=warning,
        )
    reason = wait.removeprefix("; ") or f"renewal at {stamp(renew_at(leaf, settings))}"
    return Plan(
        action=Action.NOTHING, reason=reason, data=data, annotations=mark(since), warning=warning
    )


def _reissue_reason(
    leaf: x509.Certificate,
    ca: Authority,
    want: LeafRequest,
    now: datetime.datetime,
    settings: CertSettings,
) -> str:
    """Why the leaf must be replaced; empty: it need not be."""
    if not pki.signed_by(leaf, ca.cert):
        return "signed by the previous CA"
    missing = want.names - pki.san_names(leaf)
    if missing:
        return f"it does not name {len(missing)} of the topic's addresses, e.g. {min(missing)}"
    if now >= renew_at(leaf, settings):
        return f"{settings.renew_after:.0%} of its lifetime passed"
    return ""


def plan_topic(
    topic: str,
    namespace: str,
    spec: DelayTopicSpec,
    current: SecretContents | None,
    ca: Authority,
    now: datetime.datetime,
    settings: CertSettings = _DEFAULTS,
    *,
    shards: int = 0,
) -> Plan:
    """The topic's ``<topic>-shard-tls``: its pods' certificate, for ``spec.shards``
    shards, or ``shards`` when the map lists more (a shrink not yet finished)."""
    names = server_names(
        topic,
        namespace,
        max(spec.shards, shards),
        spec.replicas_per_shard,
        settings.cluster_domain,
    )
    want = LeafRequest(f"delayq {namespace}/{topic}", names, server=True, client=True)
    return plan_leaf(current, ca, want, now, settings)


def plan_control(
    current: SecretContents | None,
    ca: Authority,
    now: datetime.datetime,
    settings: CertSettings = _DEFAULTS,
) -> Plan:
    """The namespace's ``delayq-control-tls``: the control plane's client certificate."""
    return plan_leaf(current, ca, LeafRequest(CONTROL_COMMON_NAME), now, settings)
