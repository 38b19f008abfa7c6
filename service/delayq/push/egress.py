"""The server's egress rule for pushes (``Egress``): which addresses a pusher may
connect to, by the categories of ``delivery.pushtarget.category`` (loopback,
link-local, private, metadata, ...; IPv4-mapped, NAT64 and 6to4 judged by the
IPv4 address they carry) and the server's allow-list (``--push-allow``), and
``EgressRefused``, the error of a connect it refused.

Invariant: the judgement is of an address, never of a name: the resolver
(``push.resolver``) calls it on every address it hands the connector, and
``push.http`` on a URL's literal address. The allow-list is checked once, when
the rule is made (a bad entry is a ValueError naming it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from ..delivery.pushtarget import refusal

__all__ = ["Egress", "EgressRefused", "parse_allow"]


class EgressRefused(OSError):
    """A push target whose addresses are all refused (``host``; ``category``: the
    last refused address's). An ``OSError``, so aiohttp reports it as a failed
    connect; never carries a URL's credentials or query."""

    def __init__(self, host: str, category: str) -> None:
        super().__init__(f"push target {host}: {category} address refused by the egress check")
        self.host = host
        self.category = category


def parse_allow(entries: Sequence[str]) -> tuple[str, ...]:
    """The allow-list's networks in canonical form (``127.0.0.1`` is
    ``127.0.0.1/32``); ValueError naming an entry that is not a network."""
    nets: list[str] = []
    for entry in entries:
        text = entry.strip()
        if not text:
            continue
        try:
            nets.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError as e:
            raise ValueError(f"push allow-list entry {text!r} is not a network: {e}") from None
    return tuple(nets)


class Egress:
    """The server's egress rule; immutable, shared by every pusher."""

    __slots__ = ("allow",)

    def __init__(self, allow: Sequence[str] = ()) -> None:
        self.allow = parse_allow(allow)

    def refusal(self, address: str) -> str | None:
        """The category refusing ``address`` (an IP literal), None when it may be
        connected to; "invalid" for text that is no IP address in an accepted form
        (``127.1``, ``2130706433``, ``0``, which aiohttp takes as literals: refused)."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # fe80::1%eth0: the zone
        except ValueError:
            return "invalid"
        return refusal(ip, self.allow)
