"""The push connector's resolver (``GuardedResolver``): names resolved by the
system (aiohttp's ``ThreadedResolver``: ``getaddrinfo`` on a thread), then every
address judged by the egress rule (``push.egress``) before the connector sees it.

Invariant (no DNS rebinding): the connector connects only to addresses this
resolver returned, and its DNS cache holds only these checked results, so the
address connected to is the address checked; a name whose addresses are all
refused raises ``EgressRefused`` (an ``OSError``: aiohttp reports a failed
connect, its cause the refusal). IP literals never reach a resolver (aiohttp
skips it for them): ``push.http`` judges those itself.
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from .egress import Egress, EgressRefused

__all__ = ["GuardedResolver"]


class GuardedResolver(AbstractResolver):
    """``inner`` (default: a ``ThreadedResolver``)'s answers less the addresses
    ``egress`` refuses. Made on the event loop it serves."""

    def __init__(self, egress: Egress, inner: AbstractResolver | None = None) -> None:
        self._egress = egress
        self._inner = inner if inner is not None else ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        kept: list[ResolveResult] = []
        refused = "no address"
        for result in found:
            category = self._egress.refusal(result["host"])
            if category is None:
                kept.append(result)
            else:
                refused = category
        if not kept:
            raise EgressRefused(host, refused)
        return kept

    async def close(self) -> None:
        await self._inner.close()
