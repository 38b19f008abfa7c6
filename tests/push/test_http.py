"""TargetClient against a real aiohttp server on this machine: 2xx, 429 with
Retry-After, 503, timeouts, redirects not followed, the response body bound (a
long answer drops the connection, a short one keeps it), literal addresses judged
by the egress rule; and the GuardedResolver: a name resolving to a refused address
is refused, nothing sent, and of a name's addresses only allowed ones are
connected to (the address checked is the address connected to)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from delayq import pki
from delayq.push.egress import Egress, EgressRefused
from delayq.push.http import MAX_RESPONSE_BYTES, TargetClient
from delayq.push.requests import Pushed, request_headers
from delayq.push.resolver import GuardedResolver

LOCAL = Egress(["127.0.0.1/32"])


class Receiver:
    """An aiohttp server answering by path; records each request's client port."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.host = host
        self.tls = tls
        self.seen: list[tuple[str, int, bytes, dict[str, str]]] = []
        self.port = port
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        body = await request.read()
        self.seen.append((request.path, peer[1] if peer else 0, body, dict(request.headers)))
        path = request.path
        if path == "/ok":
            return web.Response(status=200, text="fine")
        if path == "/throttle":
            return web.Response(status=429, headers={"Retry-After": "5"})
        if path == "/busy":
            return web.Response(status=503)
        if path == "/slow":
            await asyncio.sleep(2)
            return web.Response(status=200)
        if path == "/half":
            await asyncio.sleep(0.4)
            return web.Response(status=200)
        if path == "/moved":
            raise web.HTTPFound(location="/ok")
        if path == "/long":
            return web.Response(status=200, body=b"x" * (MAX_RESPONSE_BYTES * 64))
        return web.Response(status=404)

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def _run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())


async def _send(client: TargetClient, body: bytes = b"{}", timeout_s: float = 5.0) -> Any:
    return await client.send("POST", {"content-type": "application/json"}, body, timeout_s)


def test_answers_of_a_real_receiver() -> None:
    async def main() -> None:
        async with Receiver() as rx:
            base = f"http://127.0.0.1:{rx.port}"
            clients = {
                p: TargetClient(base + p, egress=LOCAL, now_s=time.monotonic)
                for p in ("/ok", "/throttle", "/busy", "/slow", "/moved")
            }
            try:
                ok = await _send(clients["/ok"], b'{"n": 1}')
                assert (ok.status, ok.error) == (200, None) and ok.latency_s >= 0
                assert rx.seen[-1][2] == b'{"n": 1}'
                throttled = await _send(clients["/throttle"])
                assert (throttled.status, throttled.retry_after) == (429, "5")
                assert (await _send(clients["/busy"])).status == 503
                slow = await _send(clients["/slow"], timeout_s=0.3)
                assert (slow.status, slow.error) == (None, "timeout")
                before = len(rx.seen)
                moved = await _send(clients["/moved"])
                assert moved.status == 302  # an answer, not followed
                assert [s[0] for s in rx.seen[before:]] == ["/moved"]
            finally:
                for c in clients.values():
                    await c.close()

    _run(main)


def test_waiting_for_a_pooled_connection_is_not_the_requests_timeout() -> None:
    """One connection, three requests at once to a receiver answering in 0.4 s,
    each with a 0.6 s timeout: the later ones wait for the connection (up to
    0.8 s) and still answer 200; the timeout still bounds a request once sent."""

    async def main() -> None:
        async with Receiver() as rx:
            url = f"http://127.0.0.1:{rx.port}"
            one = TargetClient(url + "/half", egress=LOCAL, max_connections=1, now_s=time.monotonic)
            slow = TargetClient(
                url + "/slow", egress=LOCAL, max_connections=1, now_s=time.monotonic
            )
            try:
                got = await asyncio.gather(*(_send(one, timeout_s=0.6) for _ in range(3)))
                assert [(a.status, a.error) for a in got] == [(200, None)] * 3
                assert len({s[1] for s in rx.seen}) == 1  # one connection, waited for
                late = await _send(slow, timeout_s=0.3)
                assert (late.status, late.error) == (None, "timeout")
            finally:
                await one.close()
                await slow.close()

    _run(main)


def test_a_long_answer_drops_its_connection_a_short_one_keeps_it() -> None:
    async def main() -> None:
        async with Receiver() as rx:
            ok = TargetClient(f"http://127.0.0.1:{rx.port}/ok", egress=LOCAL, now_s=time.monotonic)
            long = TargetClient(
                f"http://127.0.0.1:{rx.port}/long", egress=LOCAL, now_s=time.monotonic
            )
            try:
                for _ in range(3):
                    assert (await _send(ok)).status == 200
                    assert (await _send(long)).status == 200
                ports = {path: {s[1] for s in rx.seen if s[0] == path} for path in ("/ok", "/long")}
                assert len(ports["/ok"]) == 1  # kept alive
                assert len(ports["/long"]) == 3  # a new connection each time
            finally:
                await ok.close()
                await long.close()

    _run(main)


def test_literal_addresses_are_judged_before_any_connect() -> None:
    async def main() -> None:
        async with Receiver() as rx:
            for url in (
                f"http://127.0.0.1:{rx.port}/ok",
                f"http://[::ffff:127.0.0.1]:{rx.port}/ok",
            ):
                c = TargetClient(url, egress=Egress(), now_s=time.monotonic)
                try:
                    got = await _send(c)
                    assert (got.status, got.error) == (None, "refused")
                    assert c.refused_category == "loopback"
                finally:
                    await c.close()
            c = TargetClient("http://169.254.169.254/latest", egress=LOCAL, now_s=time.monotonic)
            try:
                assert (await _send(c)).error == "refused"
                assert c.refused_category == "metadata"
            finally:
                await c.close()
            assert rx.seen == []

    _run(main)


def test_a_closed_port_is_a_connect_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> None:
        c = TargetClient(f"http://127.0.0.1:{port}/", egress=LOCAL, now_s=time.monotonic)
        try:
            assert (await _send(c)).error == "connect"
        finally:
            await c.close()

    _run(main)


class FakeDns(AbstractResolver):
    """Names to addresses, as a DNS server under an attacker's control would answer."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = names
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.names:
            raise OSError(f"no such name {host}")
        return [
            {"hostname": host, "host": a, "port": port, "family": family, "proto": 0, "flags": 0}
            for a in self.names[host]
        ]

    async def close(self) -> None:
        pass


def test_the_resolver_drops_refused_addresses() -> None:
    async def main() -> None:
        dns = FakeDns({"private.test": ["10.0.0.5"], "mixed.test": ["10.0.0.5", "127.0.0.1"]})
        guarded = GuardedResolver(LOCAL, dns)
        with pytest.raises(EgressRefused) as refused:
            await guarded.resolve("private.test", 80)
        assert (refused.value.host, refused.value.category) == ("private.test", "private")
        kept = await guarded.resolve("mixed.test", 80)
        assert [r["host"] for r in kept] == ["127.0.0.1"]

    _run(main)


def test_a_name_is_connected_only_to_the_addresses_checked() -> None:
    async def main() -> None:
        async with (
            Receiver("127.0.0.1") as allowed,
            Receiver("127.0.0.2", allowed.port) as internal,
        ):
            # one name, two addresses, both serving on the port: the internal one
            # (first, as a rebinding answer would put it) refused, the allowed one taken
            dns = FakeDns(
                {
                    "both.test": ["127.0.0.2", "127.0.0.1"],
                    "inside.test": ["127.0.0.2"],
                    "private.test": ["192.168.7.7"],
                }
            )
            port = allowed.port

            def client(name: str, p: int) -> TargetClient:
                return TargetClient(
                    f"http://{name}:{p}/ok",
                    egress=LOCAL,
                    now_s=time.monotonic,
                    resolver=GuardedResolver(LOCAL, dns),
                )

            both, inside, private = (
                client("both.test", port),
                client("inside.test", port),
                client("private.test", port),
            )
            try:
                for _ in range(5):
                    assert (await _send(both)).status == 200
                got = await _send(inside)
                assert (got.status, got.error, inside.refused_category) == (
                    None,
                    "refused",
                    "loopback",
                )
                got = await _send(private)
                assert (got.error, private.refused_category) == ("refused", "private")
            finally:
                for c in (both, inside, private):
                    await c.close()
            assert len(allowed.seen) == 5
            assert internal.seen == []

    _run(main)


def test_https_verified_by_the_targets_ca_bundle(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    ca = pki.new_ca("push test CA", lifetime=day, now=now)
    leaf = pki.issue(ca, "receiver", hosts=["127.0.0.1"], server=True, lifetime=day, now=now)
    leaf.write(tmp_path / "cert.pem", tmp_path / "key.pem")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")

    async def main() -> None:
        async with Receiver(tls=tls) as rx:
            url = f"https://127.0.0.1:{rx.port}/ok"
            trusted = TargetClient(
                url, egress=LOCAL, ca_bundle=ca.cert.decode(), now_s=time.monotonic
            )
            system = TargetClient(url, egress=LOCAL, now_s=time.monotonic)  # system roots
            broken = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
            bad = TargetClient(url, egress=LOCAL, ca_bundle=broken, now_s=time.monotonic)
            try:
                assert (await _send(trusted)).status == 200
                assert (await _send(system)).error == "tls"
                assert bad.bad_ca is not None and (await _send(bad)).error == "tls"
                assert len(rx.seen) == 1
            finally:
                for c in (trusted, system, bad):
                    await c.close()

    _run(main)


def test_url_userinfo_goes_as_basic_auth() -> None:
    async def main() -> None:
        async with Receiver() as rx:
            url = f"http://hook-user:s3cret@127.0.0.1:{rx.port}/ok"
            c = TargetClient(url, egress=LOCAL, now_s=time.monotonic)
            carrying = Pushed(
                id="m1", topic="t", group="g", key="", attempt=1, due_ms=0, delivered_ms=0,
                headers={"Authorization": "Bearer producer", "Cookie": "a=1"},
            )  # fmt: skip
            headers = request_headers(carrying, b"{}", [], [], now_s=1)
            try:
                assert (await _send(c)).status == 200
                # a message's own Authorization is not sent: the URL's credentials are
                sent = await c.send("POST", headers, b"{}", 5.0)
                assert (sent.status, sent.error) == (200, None)
            finally:
                await c.close()
            expected = "Basic " + base64.b64encode(b"hook-user:s3cret").decode()
            assert [s[3]["Authorization"] for s in rx.seen] == [expected] * 2
            assert "Cookie" not in rx.seen[1][3]

    _run(main)
