"""A push group's HTTP target (``PushTarget``; pure: no I/O, no DNS): its checks,
its forms fit for logs and labels, its canonical bytes, and the egress category
of a literal address.

``check`` refuses a target with an ``InvalidArgument`` naming the field
(``policy.push.url``, ...) and answers it normalised: method upper-cased (""
is POST), headers sorted by lower-cased name, a timeout of 0 made the default.
The URL's userinfo and query are the caller's (userinfo is sent as Basic auth):
they never reach a log line, an event, a metric label, Stats or a status, which
use ``safe_url`` or ``origin`` only (the leaf ``pushurls``'s, named here too: the
client shows URLs alike). No secret is held, only ``secret_ref``, the name of one
the server reads from its own directory.

``category`` is the egress rule of one address (None: a global address, fine);
``literal_refusal`` applies it, with an allow-list, to a URL whose host is a
literal address (names are judged when connecting, by the address connected to).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from urllib.parse import SplitResult, urlsplit

from ..errors import CorruptData, InvalidArgument
from ..pushurls import DEFAULT_PORTS, origin, safe_url

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "MAX_CA_BUNDLE",
    "MAX_HEADERS",
    "MAX_TIMEOUT_MS",
    "MAX_URL_LEN",
    "METHODS",
    "MIN_TIMEOUT_MS",
    "RESERVED",
    "PushTarget",
    "category",
    "check",
    "decode",
    "encode",
    "literal_refusal",
    "origin",
    "safe_url",
]

METHODS = ("POST", "PUT", "PATCH")
DEFAULT_TIMEOUT_MS = 10_000
MIN_TIMEOUT_MS, MAX_TIMEOUT_MS = 100, 60_000
MAX_URL_LEN = 2048
MAX_HEADERS = 32
MAX_HEADER_LEN = 8192
MAX_CA_BUNDLE = 65_536
RESERVED = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
     "te", "trailer", "proxy-authorization", "proxy-connection", "expect"}
)  # fmt: skip
"""Header names a target may not set, besides every ``webhook-*`` and ``delayq-*``."""
RESERVED_PREFIXES = ("webhook-", "delayq-")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)?")


@dataclass(frozen=True, slots=True, kw_only=True)
class PushTarget:
    """Where a push group's messages go: one request each."""

    url: str
    """http(s)://[userinfo@]host[:port]/path[?query]"""
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()
    """Sent with every request, sorted by lower-cased name."""
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    """A request's limit, from its connection (new or kept alive) to its answer."""
    ca_bundle: str = ""
    """PEM CA certificates for https; "": the system's roots."""
    secret_ref: str = ""
    """A signing secret's name under the server's push secret directory; "": unsigned."""


def _split(url: str, name: str) -> SplitResult:
    if len(url) > MAX_URL_LEN:
        raise InvalidArgument(name, f"is {len(url)} characters; at most {MAX_URL_LEN}")
    if not url.isprintable() or any(c.isspace() for c in url):
        raise InvalidArgument(name, "holds spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidArgument(name, f"is not a URL ({exc})") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise InvalidArgument(name, "must start http:// or https://")
    if not parts.hostname:
        raise InvalidArgument(name, "has no host")
    if port == 0:
        raise InvalidArgument(name, "has port 0")
    if parts.fragment:
        raise InvalidArgument(name, "has a fragment (#...)")
    return parts


def _check_headers(headers: Sequence[tuple[str, str]], name: str) -> tuple[tuple[str, str], ...]:
    if len(headers) > MAX_HEADERS:
        raise InvalidArgument(name, f"has {len(headers)}; at most {MAX_HEADERS}")
    seen: set[str] = set()
    for key, value in headers:
        low = key.lower()
        if not _TOKEN.fullmatch(key):
            raise InvalidArgument(name, f"{key!r} is not a header name")
        if low in RESERVED or low.startswith(RESERVED_PREFIXES):
            raise InvalidArgument(name, f"{key!r} is set by the server")
        if low in seen:
            raise InvalidArgument(name, f"{key!r} twice")
        seen.add(low)
        if len(value) > MAX_HEADER_LEN or any(c in value for c in "\r\n\0"):
            raise InvalidArgument(f"{name}.{key}", "is too long or holds CR, LF or NUL")
    return tuple(sorted(headers, key=lambda kv: (kv[0].lower(), kv[0])))


def check(t: PushTarget, prefix: str = "policy.push") -> PushTarget:
    """``t`` normalised if every field is acceptable, else InvalidArgument naming the
    first that is not (``<prefix>.url``)."""
    parts = _split(t.url, f"{prefix}.url")
    method = (t.method or "POST").upper()
    if method not in METHODS:
        raise InvalidArgument(f"{prefix}.method", f"is {t.method!r}; one of {', '.join(METHODS)}")
    headers = _check_headers(t.headers, f"{prefix}.headers")
    if parts.username is not None and any(k.lower() == "authorization" for k, _ in headers):
        raise InvalidArgument(
            f"{prefix}.headers.Authorization",
            "is set and the url holds credentials (user:password@): give one of the two",
        )
    timeout = t.timeout_ms or DEFAULT_TIMEOUT_MS
    if not MIN_TIMEOUT_MS <= timeout <= MAX_TIMEOUT_MS:
        raise InvalidArgument(
            f"{prefix}.timeout_ms", f"is {timeout}; {MIN_TIMEOUT_MS}..{MAX_TIMEOUT_MS}"
        )
    if len(t.ca_bundle) > MAX_CA_BUNDLE:
        raise InvalidArgument(f"{prefix}.ca_bundle", f"is over {MAX_CA_BUNDLE} characters")
    if t.ca_bundle and "-----BEGIN CERTIFICATE-----" not in t.ca_bundle:
        raise InvalidArgument(f"{prefix}.ca_bundle", "holds no PEM certificate")
    if t.secret_ref and (not _REF.fullmatch(t.secret_ref) or ".." in t.secret_ref):
        raise InvalidArgument(
            f"{prefix}.secret_ref", f"{t.secret_ref!r} is not a name (letters, digits, ._-, one /)"
        )
    return replace(t, method=method, headers=headers, timeout_ms=timeout)


def encode(t: PushTarget) -> bytes:
    """``t`` as canonical JSON (sorted keys, no spaces): the POLICY record's tail."""
    doc = {
        "url": t.url, "method": t.method, "headers": [list(kv) for kv in t.headers],
        "timeout_ms": t.timeout_ms, "ca_bundle": t.ca_bundle, "secret_ref": t.secret_ref,
    }  # fmt: skip
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes) -> PushTarget:
    """The target ``encode`` wrote; ``CorruptData`` if ``data`` is not one."""
    try:
        doc = json.loads(data)
        return PushTarget(
            url=str(doc["url"]),
            method=str(doc["method"]),
            headers=tuple((str(k), str(v)) for k, v in doc["headers"]),
            timeout_ms=int(doc["timeout_ms"]),
            ca_bundle=str(doc["ca_bundle"]),
            secret_ref=str(doc["secret_ref"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptData(f"malformed push target: {exc!r}") from exc


Address = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
"""Cloud metadata endpoints: unlocked only by an allow-list entry naming exactly them."""
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_PRIVATE = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def _embedded(ip: Address) -> Address:
    """The IPv4 address an IPv4-mapped, IPv4-compatible (``::a.b.c.d``, but ``::``
    and ``::1``), NAT64 or 6to4 address carries, else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if 1 < int(ip) < 1 << 32:  # IPv4-compatible (deprecated, still routed by some)
            return ipaddress.IPv4Address(int(ip))
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def category(ip: Address) -> str | None:
    """Why an address is not for push targets by default (None: a global address):
    metadata, unspecified, loopback, link-local, private, unique-local, multicast,
    shared, reserved (anything else not global). Judged by the IPv4 address an
    IPv4-mapped, IPv4-compatible, NAT64 or 6to4 address carries."""
    ip = _embedded(ip)
    if ip in METADATA:
        return "metadata"
    for name, hit in (
        ("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local), ("multicast", ip.is_multicast),
        ("shared", ip in _SHARED), ("unique-local", ip in _UNIQUE_LOCAL),
        ("private", any(ip in n for n in _PRIVATE)),
    ):  # fmt: skip
        if hit:
            return name
    return None if ip.is_global else "reserved"


def refusal(ip: Address, allow: Sequence[str]) -> str | None:
    """``category(ip)``, unless a network of ``allow`` (CIDRs) holds the address (a
    metadata address only by an entry of exactly it); None: may be connected to."""
    got = category(ip)
    if got is None:
        return None
    for entry in allow:
        net = ipaddress.ip_network(entry, strict=False)
        exact = net.num_addresses == 1
        if (got != "metadata" or exact) and (ip in net or _embedded(ip) in net):
            return None
    return got


def literal_refusal(url: str, allow: Sequence[str]) -> str | None:
    """``refusal`` of the URL's host when it is a literal address; None for a name
    (judged when connecting) or an address allowed."""
    host = urlsplit(url).hostname or ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return refusal(ip, allow)
