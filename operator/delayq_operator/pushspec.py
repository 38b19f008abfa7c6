"""A push group's target (``spec.groups[].push``) as the operator sets it, and
what the topic's pods need to push (pure: no cluster, no I/O).

``parse_push`` reads one ``push`` object into a ``PushSpec`` or raises
``SpecError`` naming the CRD's field (``spec.groups[1].push.url``): the CRD's
words are checked here, the rest by the server's own ``delivery.pushtarget.check``
(URL, method, headers, CA bundle), before any call, as the server normalises
it (method upper-cased, headers sorted), so a target read back from the shards
compares equal to the one set.

Signing secrets never pass through the operator: ``secretRef`` names a Secret
(and optionally one key of it) in the topic's namespace; the kubelet mounts
each distinct one read-only at ``PUSH_DIR/<secret>`` (``push_volumes``,
``push_mounts``; ``optional``: a missing Secret never holds a pod back, the
server reports the group ``no_secret`` and pushes nothing until it exists) and
the server reads it by ``PushSpec.secret_ref`` (``<secret>``: every key of it,
for rotation; ``<secret>/<key>``: that key only). ``push_args`` are the server's
flags (``--push-secret-dir``, ``--push-allow``), none for a topic without push
groups or egress allow-list (its pod template stays as it was). A status or an
event shows ``safe_url`` (no credentials, no query) and the Secret's name only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from delayq.delivery.pushtarget import (
    DEFAULT_TIMEOUT_MS,
    MAX_CA_BUNDLE,
    METHODS,
    MIN_TIMEOUT_MS,
    PushTarget,
    check,
    safe_url,
)
from delayq.errors import InvalidArgument

from .spec import PodPushSpec, SpecError, duration_ms, secret_name

__all__ = [
    "PUSH_DIR",
    "PushSpec",
    "describe_push",
    "header_pairs",
    "parse_push",
    "push_args",
    "push_mounts",
    "push_status",
    "push_volumes",
]

PUSH_DIR = "/etc/delayq-push"
"""Where the pods mount the push groups' Secrets, one directory each (the server's
``--push-secret-dir``)."""
MAX_TIMEOUT = "60s"
"""``timeout``'s most (``pushtarget.MAX_TIMEOUT_MS``, in the CRD's words)."""
_KEY = re.compile(r"[A-Za-z0-9][-._A-Za-z0-9]{0,252}")
"""A Secret's key the server reads (no dot first: the kubelet's ``..data``)."""
_FIELDS = {"timeout_ms": "timeout", "ca_bundle": "caBundle", "secret_ref": "secretRef"}


@dataclass(frozen=True, kw_only=True)
class PushSpec:
    """``delivery.pushtarget.PushTarget``'s fields, its ``secret_ref`` as the Secret's
    name and key."""

    url: str
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()
    """Sorted by lower-cased name (as the server stores them)."""
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    ca_bundle: str = ""
    secret_name: str = ""
    """The Secret the requests are signed with; "": unsigned."""
    secret_key: str = ""
    """One key of it; "": every key (two at once while rotating)."""

    @property
    def secret_ref(self) -> str:
        """What the server reads under ``PUSH_DIR``: ``name`` or ``name/key``."""
        return f"{self.secret_name}/{self.secret_key}" if self.secret_key else self.secret_name


def header_pairs(headers: Any) -> tuple[tuple[str, str], ...]:
    """A name -> value mapping as the server's sorted pairs."""
    return tuple(sorted(((str(k), str(v)) for k, v in headers.items()), key=_header_order))


def _header_order(kv: tuple[str, str]) -> tuple[str, str]:
    return kv[0].lower(), kv[0]


def _secret(doc: Any, path: str) -> tuple[str, str]:
    if not isinstance(doc, dict):
        raise SpecError(path, f"must be an object with a name, got {doc!r}")
    key = doc.get("key") or ""
    if not isinstance(key, str) or (key and not _KEY.fullmatch(key)):
        raise SpecError(f"{path}.key", f"must be a key of the Secret, got {key!r}")
    return secret_name(doc.get("name"), f"{path}.name"), key


def parse_push(doc: Any, path: str) -> PushSpec:
    """``doc`` (a group's ``push``) as a ``PushSpec``; SpecError names the field
    under ``path`` (``spec.groups[1].push``)."""
    if not isinstance(doc, dict):
        raise SpecError(path, f"must be an object, got {doc!r}")
    url = doc.get("url")
    if not isinstance(url, str) or not url:
        raise SpecError(f"{path}.url", "must be an http:// or https:// URL")
    method = doc.get("method", "POST")
    if method not in METHODS:
        raise SpecError(f"{path}.method", f"must be one of {', '.join(METHODS)}, got {method!r}")
    headers = doc.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise SpecError(f"{path}.headers", "must map header names to string values")
    timeout = (
        duration_ms(doc["timeout"], f"{path}.timeout", most=MAX_TIMEOUT)
        if "timeout" in doc
        else DEFAULT_TIMEOUT_MS
    )
    if timeout < MIN_TIMEOUT_MS:
        raise SpecError(f"{path}.timeout", f"must be at least {MIN_TIMEOUT_MS}ms")
    ca = doc.get("caBundle") or ""
    if not isinstance(ca, str) or len(ca) > MAX_CA_BUNDLE:
        raise SpecError(f"{path}.caBundle", f"must be PEM of at most {MAX_CA_BUNDLE} characters")
    name, key = _secret(doc["secretRef"], f"{path}.secretRef") if "secretRef" in doc else ("", "")
    spec = PushSpec(
        url=url,
        method=method,
        headers=header_pairs(headers),
        timeout_ms=timeout,
        ca_bundle=ca,
        secret_name=name,
        secret_key=key,
    )
    try:
        check(_target(spec), prefix=path)
    except InvalidArgument as e:
        field = e.field.removeprefix(f"{path}.")
        head, _, rest = field.partition(".")
        crd = f"{path}.{_FIELDS.get(head, head)}{'.' + rest if rest else ''}"
        raise SpecError(crd, str(e).removeprefix(f"{e.field}: ")) from None
    return spec


def _target(p: PushSpec) -> PushTarget:
    return PushTarget(
        url=p.url,
        method=p.method,
        headers=p.headers,
        timeout_ms=p.timeout_ms,
        ca_bundle=p.ca_bundle,
        secret_ref=p.secret_ref,
    )


def describe_push(p: PushSpec) -> str:
    """The target in a few words, no credentials (an event's message)."""
    signed = f"secret {p.secret_ref}" if p.secret_name else "unsigned"
    return f"push {p.method} {safe_url(p.url)} ({signed}, timeout {p.timeout_ms}ms)"


def push_status(p: PushSpec) -> dict[str, str]:
    """A push group's ``status.groups[].push``: where it pushes, with no URL
    credentials or query, and the Secret's name (never its content)."""
    out = {"target": safe_url(p.url)}
    if p.secret_name:
        out["secretRef"] = p.secret_name
    return out


def _volume(i: int) -> str:
    return f"push-secret-{i}"


def push_volumes(push: PodPushSpec) -> list[dict[str, Any]]:
    """One Secret volume per distinct Secret of the topic's push groups: optional
    (a missing one holds no pod back), readable by the pod's group only."""
    return [
        {
            "name": _volume(i),
            "secret": {"secretName": name, "optional": True, "defaultMode": 0o440},
        }
        for i, name in enumerate(push.secrets)
    ]


def push_mounts(push: PodPushSpec) -> list[dict[str, Any]]:
    """Each Secret read-only at ``PUSH_DIR/<secret>`` (a directory: the kubelet
    swaps a rotated Secret's files in place, the server reads them again)."""
    return [
        {"name": _volume(i), "mountPath": f"{PUSH_DIR}/{name}", "readOnly": True}
        for i, name in enumerate(push.secrets)
    ]


def push_args(push: PodPushSpec) -> list[str]:
    """The server's push flags: where the Secrets are, which private networks it
    may push to (none of either: no flag, the server's defaults)."""
    out = ["--push-secret-dir", PUSH_DIR] if push.secrets else []
    if push.allow:
        out += ["--push-allow", ",".join(push.allow)]
    return out
