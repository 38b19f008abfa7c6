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

A request's timeout covers connecting (or taking an idle kept-alive connection),
sending and reading the answer, NOT waiting for a pooled connection: it starts
once a connection is being made or reused (aiohttp's connection trace signals),
so a request queued behind busy connections does not time out for waiting and
spend an attempt it never made.

``send`` never raises for what the network or the receiver did: it answers an
``Answer`` (a status, or none and the error's class: ``timeout``, ``connect``,
``tls``, ``refused``, ``other``); cancellation propagates (an in-flight request
is aborted); a target whose CA bundle cannot be loaded answers ``tls`` for
every https request, sending nothing (``bad_ca`` says why). ``refused_category``
tells the egress category of the last refusal (for the one log line of a change;
never the URL's credentials or query).
Not thread-safe: made and used on one event loop.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from types import SimpleNamespace

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


_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None)


class _Deadline:
    """A request's timeout, not yet running: ``_arm`` starts it."""

    __slots__ = ("timeout", "timeout_s")

    def __init__(self, timeout: asyncio.Timeout, timeout_s: float) -> None:
        self.timeout, self.timeout_s = timeout, timeout_s


async def _arm(_: aiohttp.ClientSession, ctx: SimpleNamespace, __: object) -> None:
    """Start the request's timeout: it has a connection (new or kept alive) now."""
    d = ctx.trace_request_ctx
    if isinstance(d, _Deadline) and d.timeout.when() is None:
        d.timeout.reschedule(asyncio.get_running_loop().time() + d.timeout_s)


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
        try:
            tls = ssl_context(ca_bundle)
            self.bad_ca: str | None = None
        except ValueError as e:  # checked as PEM when set, yet unusable: every https push fails
            tls, self.bad_ca = ssl_context(""), str(e)
        armed = aiohttp.TraceConfig()  # the request's timeout starts with its connection
        armed.on_connection_create_start.append(_arm)
        armed.on_connection_reuseconn.append(_arm)
        connector = aiohttp.TCPConnector(
            resolver=resolver if resolver is not None else GuardedResolver(egress),
            limit=max_connections,
            ssl=tls,
            ttl_dns_cache=DNS_TTL_S,
            keepalive_timeout=KEEPALIVE_S,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            auto_decompress=False,
            headers={"user-agent": USER_AGENT},
            trace_configs=[armed],
        )

    async def send(
        self, method: str, headers: Mapping[str, str], body: bytes, timeout_s: float
    ) -> Answer:
        """One request to the target; its answer, whatever happened."""
        started = self._now_s()
        if self._literal is not None:
            return Answer(None, None, "refused", 0.0)
        if self.bad_ca is not None and self._url.scheme == "https":
            return Answer(None, None, "tls", 0.0)
        try:
            async with asyncio.timeout(None) as deadline:  # armed once a connection is held
                async with self._session.request(
                    method,
                    self._url,
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    timeout=_NO_TIMEOUT,
                    trace_request_ctx=_Deadline(deadline, timeout_s),
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
