"""One push target's HTTP client (``TargetClient``): aiohttp, pooled and kept
alive, its every connect checked by the egress rule.

One client per target (per pusher): its own ``ClientSession`` over a
``TCPConnector`` whose resolver is the ``GuardedResolver`` (names: the address
connected to is the address checked), with the target's CA bundle (or the
system's roots), at most ``max_connections`` connections, idle ones kept
``KEEPALIVE_S``. A URL whose host is an IP literal skips any resolver in aiohttp,
so the client judges that address itself, as aiohttp will parse it. No proxy
from the environment (``trust_env=False``: a proxy would connect for us, past the
check), no redirects followed (a 3xx is an answer: outcome ``other``), no
decompression, the response body read up to ``MAX_RESPONSE_BYTES`` and the
connection dropped when more was left.

``send`` never raises for what the network or the receiver did: it answers an
``Answer`` (a status, or none and the error's class: ``timeout``, ``connect``,
``tls``, ``refused``, ``other``); cancellation propagates (an in-flight request
is aborted). ``refused_category`` tells the egress category of the last refusal
(for the one log line of a change; never the URL's credentials or query).
Not thread-safe: made and used on one event loop.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp.helpers import is_ip_address
from yarl import URL

from .answers import Answer
from .egress import Egress, EgressRefused
from .resolver import GuardedResolver

__all__ = ["KEEPALIVE_S", "MAX_RESPONSE_BYTES", "TargetClient", "ssl_context"]

MAX_RESPONSE_BYTES = 4096  # a receiver's answer is read this far, no further
KEEPALIVE_S = 30.0  # an idle connection kept for the next push this long
DNS_TTL_S = 10  # a name's checked addresses reused this long
USER_AGENT = "delayq-push"


def ssl_context(ca_bundle: str) -> ssl.SSLContext:
    """Verification against ``ca_bundle`` (PEM), or the system's roots when empty;
    ValueError for a bundle without a usable certificate."""
    try:
        return ssl.create_default_context(cadata=ca_bundle or None)
    except ssl.SSLError as e:
        raise ValueError(f"CA bundle: {e.reason or e}") from None


def _error_class(e: BaseException) -> tuple[str, str | None]:
    """The outcome class of a failed request's exception, and the egress category
    when the connect was refused."""
    seen: BaseException | None = e
    while seen is not None:  # aiohttp wraps the resolver's OSError
        if isinstance(seen, EgressRefused):
            return "refused", seen.category
        seen = seen.__cause__
    if isinstance(e, asyncio.TimeoutError):
        return "timeout", None
    if isinstance(e, aiohttp.ClientSSLError | ssl.SSLError):
        return "tls", None
    if isinstance(e, aiohttp.ClientConnectionError | OSError):
        return "connect", None
    return "other", None


class TargetClient:
    """Requests to one target's URL; make it on the loop it is used on, ``close``
    it when done."""

    def __init__(
        self,
        url: str,
        *,
        egress: Egress,
        ca_bundle: str = "",
        max_connections: int = 256,
        now_s: Callable[[], float],
        resolver: GuardedResolver | None = None,
    ) -> None:
        """``now_s``: a monotonic clock (the requests' latency); ``resolver``: the
        guarded one over the system's, unless a test hands its own."""
        self._url = URL(url)
        self._now_s = now_s
        host = self._url.raw_host or ""
        self._literal = egress.refusal(host) if is_ip_address(host) else None
        self.refused_category: str | None = self._literal
        connector = aiohttp.TCPConnector(
            resolver=resolver if resolver is not None else GuardedResolver(egress),
            limit=max_connections,
            ssl=ssl_context(ca_bundle),
            ttl_dns_cache=DNS_TTL_S,
            keepalive_timeout=KEEPALIVE_S,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            auto_decompress=False,
            headers={"user-agent": USER_AGENT},
        )

    async def send(
        self, method: str, headers: Mapping[str, str], body: bytes, timeout_s: float
    ) -> Answer:
        """One request to the target; its answer, whatever happened."""
        started = self._now_s()
        if self._literal is not None:
            return Answer(None, None, "refused", 0.0)
        try:
            async with self._session.request(
                method,
                self._url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                await resp.content.read(MAX_RESPONSE_BYTES)
                if not resp.content.at_eof():
                    resp.close()  # more than we read: drop the connection, not drain it
                self.refused_category = None
                return Answer(
                    resp.status, resp.headers.get("Retry-After"), None, self._now_s() - started
                )
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            kind, self.refused_category = _error_class(e)
            return Answer(None, None, kind, self._now_s() - started)

    async def close(self) -> None:
        await self._session.close()
