"""The node's pushers over a real engine and the server's calls layer, on one
event loop with a real aiohttp receiver: only while the engine is delivering do
pushers run (none, and nothing sent, while not); a push group whose secret does
not resolve is ``no_secret`` and sends nothing until the secret appears, then
pushes signed; a name resolving only to a refused address is ``refused`` and
nothing reaches the receiver; removing the target stops the pusher."""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from delayq import Engine, SystemClock
from delayq.delivery.policy import GroupPolicy
from delayq.delivery.pushtarget import PushTarget
from delayq.delivery.types import ReceivedBatch
from delayq.engine import ScheduleBatch
from delayq.push import secrets as secrets_module
from delayq.push.egress import Egress
from delayq.push.secrets import SecretStore
from delayq.push.snapshot import PushSnapshot, PushState
from delayq.server import pusher as pusher_module
from delayq.server.calls import Calls
from delayq.server.consuming import Consuming
from delayq.server.pusher import Pusher
from delayq.server.pushers import Pushers
from delayq.server.topology import Topology
from delayq.settings import FlushPolicy
from tests.support.engines import small_settings

SECRET = "whsec_" + base64.b64encode(b"pushers-test-key-0123456789abcdef").decode()

pytestmark = pytest.mark.timeout(120)


class Counting:
    """The calls' consuming, counting the messages taken and not yet settled (the
    peak kept) and the takes."""

    def __init__(self, inner: Consuming) -> None:
        self.inner = inner
        self.unsettled = 0
        self.peak = 0
        self.takes = 0

    async def take(
        self, topic: str, group: str, max_messages: int, invisible_ms: int
    ) -> ReceivedBatch:
        self.takes += 1
        got = await self.inner.take(topic, group, max_messages, invisible_ms)
        self.unsettled += len(got.ids)
        self.peak = max(self.peak, self.unsettled)
        return got

    async def wait_ready(self, timeout_s: float) -> None:
        await self.inner.wait_ready(timeout_s)

    async def ack(
        self, topic: str, group: str, receipts: Sequence[str], field: str = "receipts"
    ) -> Sequence[object]:
        self.unsettled -= len(receipts)
        return await self.inner.ack(topic, group, receipts, field)

    async def nack(
        self, topic: str, group: str, receipts: Sequence[str], at_least_ms: int = 0
    ) -> Sequence[object]:
        self.unsettled -= len(receipts)
        return await self.inner.nack(topic, group, receipts, at_least_ms)


class Rig:
    """An engine, its calls, the pushers and a receiver recording (id, verified)."""

    def __init__(self, engine: Engine, calls: Calls, secret_dir: Path, allow: list[str]) -> None:
        self.engine = engine
        self.calls = calls
        self.delivering = True
        self.got: list[tuple[str, bool]] = []
        self.attempts: dict[str, list[int]] = {}
        self.secrets = SecretStore(secret_dir, engine.clock.monotonic_s)
        self.source = Counting(calls.consuming)
        self.delay_s = 0.0  # the receiver's wait before it answers
        self.lease: float | None = None  # the master's lease left, seconds
        self.arrived: list[float] = []  # the loop's time of each request's arrival
        self.answer: Callable[[], Awaitable[web.Response | None]] | None = None
        self.pushers = Pushers(
            source=self.source,
            delivering=lambda: self.delivering and engine.replicating.delivering(),
            push_groups=lambda: calls.run(engine.push_groups),
            clock=engine.clock,
            egress=Egress(allow),
            secrets=self.secrets,
            max_connections=8,
            lease_left=lambda: self.lease,
        )
        self.port = 0
        self.runner: web.AppRunner | None = None

    async def start_receiver(self) -> None:
        """Serve the receiver on ``port`` (0: a free one, then kept)."""
        assert self.runner is not None
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def handle(self, request: web.Request) -> web.Response:
        self.arrived.append(asyncio.get_running_loop().time())
        if self.answer is not None and (special := await self.answer()) is not None:
            return special
        await asyncio.sleep(self.delay_s)
        body = await request.read()
        try:
            Webhook(SECRET).verify(body, dict(request.headers), json_parse=False)
            verified = True
        except Exception:
            verified = False
        self.got.append((request.headers["webhook-id"], verified))
        self.attempts.setdefault(request.headers["webhook-id"], []).append(
            int(request.headers["delayq-attempt"])
        )
        return web.Response(status=200)

    def schedule(self, n: int) -> list[str]:
        """``n`` messages due now, a millisecond apart: their ids in due order."""
        at = time.time_ns() // 1_000_000
        out = self.engine.schedule_batch(
            ScheduleBatch(topic="t", bodies=[b"x"] * n, deliver_at_ms=[at + i for i in range(n)])
        )
        assert not out.errors
        return [i for i in out.ids if i is not None]

    def push_to(
        self,
        group: str,
        url: str,
        secret_ref: str = "",
        in_flight: int = 0,
        timeout_ms: int = 10_000,
    ) -> None:
        target = PushTarget(url=url, secret_ref=secret_ref, timeout_ms=timeout_ms)
        policy = GroupPolicy(push=target, max_in_flight=in_flight)
        self.engine.set_group_policy("t", group, policy)

    def states(self) -> dict[str, PushState]:
        return {s.group: s.state for s in self.pushers.snapshots()}


async def until(done: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while not done():
            await asyncio.sleep(0.02)


def run(
    tmp_path: Path,
    allow: list[str],
    test: Callable[[Rig], Awaitable[None]],
    up: bool = True,
    **settings: Any,
) -> None:
    """Run ``test`` with a rig (its engine's ``settings`` over the small ones); its
    receiver started at once when ``up``."""
    engine = Engine(small_settings(tmp_path / "data", **settings), SystemClock()).start()
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()

    async def main() -> None:
        calls = Calls(engine, Topology(None, 0, "127.0.0.1:0"), threads=2)
        rig = Rig(engine, calls, secret_dir, allow)
        app = web.Application()
        app.router.add_post("/hook", rig.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        rig.runner = runner
        if up:
            await rig.start_receiver()
        stop = asyncio.Event()
        running = asyncio.create_task(rig.pushers.run(stop))
        try:
            await test(rig)
        finally:
            stop.set()
            await running
            await runner.cleanup()
            calls.shutdown()
            await calls.close()

    try:
        asyncio.run(main())
    finally:
        engine.close()


def test_pushers_run_only_while_delivering(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        rig.delivering = False
        rig.push_to("web", f"http://127.0.0.1:{rig.port}/hook")
        first = set(rig.schedule(20))
        await asyncio.sleep(1.0)  # four looks of the pushers: none may start
        assert rig.pushers.snapshots() == [] and rig.got == []
        rig.delivering = True
        await until(lambda: first <= {i for i, _ in rig.got}, "the backlog pushed")
        await until(lambda: rig.states() == {"web": PushState.PUSHING}, "reported pushing")
        rig.delivering = False
        await until(lambda: rig.pushers.snapshots() == [], "the pushers stopped")
        rig.schedule(5)
        await asyncio.sleep(1.0)
        assert {i for i, _ in rig.got} == first  # nothing more while deposed

    run(tmp_path, ["127.0.0.1/32"], test)


def test_no_secret_sends_nothing_until_it_appears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secrets_module, "LOOK_S", 0.2)
    monkeypatch.setattr(pusher_module, "LOOK_S", 0.2)

    async def test(rig: Rig) -> None:
        rig.push_to("signed", f"http://127.0.0.1:{rig.port}/hook", secret_ref="late")
        ids = set(rig.schedule(10))
        await until(lambda: rig.states() == {"signed": PushState.NO_SECRET}, "no_secret")
        await asyncio.sleep(1.0)
        assert rig.got == []
        (tmp_path / "secrets" / "late").write_text(SECRET + "\n")
        await until(lambda: ids <= {i for i, _ in rig.got}, "pushed once the secret is there")
        assert all(verified for _, verified in rig.got)
        await until(lambda: rig.states() == {"signed": PushState.PUSHING}, "reported pushing")

    run(tmp_path, ["127.0.0.1/32"], test)


def test_a_name_of_a_refused_address_is_refused_and_a_removed_target_stops(
    tmp_path: Path,
) -> None:
    async def test(rig: Rig) -> None:
        rig.push_to("local", f"http://localhost:{rig.port}/hook")  # no allow-list: loopback
        rig.schedule(3)
        await until(lambda: rig.states() == {"local": PushState.REFUSED}, "refused")
        snap = rig.pushers.snapshots()[0]
        assert snap.requests["refused"] >= 1 and snap.requests["2xx"] == 0
        assert rig.got == []
        rig.engine.set_group_policy("t", "local", GroupPolicy())  # a pull group again
        await until(lambda: rig.pushers.snapshots() == [], "the pusher stopped")

    run(tmp_path, [], test)


def test_an_outage_spends_probes_only_and_the_backlog_drains_in_due_order(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:  # a port with no receiver yet
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def test(rig: Rig) -> None:
        rig.port = port
        rig.push_to("web", f"http://127.0.0.1:{port}/hook", in_flight=2)
        due = rig.schedule(40)
        ids = set(due)
        await until(lambda: rig.states() == {"web": PushState.BACKING_OFF}, "the circuit open")
        tried = rig.pushers.snapshots()[0].requests["connect"]
        await asyncio.sleep(2.5)  # the receiver still down: probes only, one at a time
        probes = rig.pushers.snapshots()[0].requests["connect"] - tried
        assert probes <= 2, probes
        await rig.start_receiver()
        await until(lambda: ids <= {i for i, _ in rig.got}, "the backlog drained")
        await until(lambda: rig.states() == {"web": PushState.PUSHING}, "reported pushing")
        # messages no request reached went out once, on their first attempt, in due order
        untried = [i for i, _ in rig.got if rig.attempts[i] == [1]]
        assert len(untried) >= 40 - tried - probes - 2
        assert untried == [i for i in due if i in set(untried)]

    run(tmp_path, ["127.0.0.1/32"], test, up=False)


def test_a_backlog_is_taken_no_further_than_the_window_and_nothing_times_out(
    tmp_path: Path,
) -> None:
    """Hundreds ready, 8 in flight at most (the rig's 8 connections; the group
    sets no limit, so the engine's take does not cap it), a receiver answering in
    0.1 s (well within the 1 s timeout): never more than 8 taken and unsettled, no
    request timed out."""

    async def test(rig: Rig) -> None:
        rig.delay_s = 0.1
        ids = set(rig.schedule(300))
        await asyncio.sleep(0.6)  # all ready: one backlog
        rig.push_to("web", f"http://127.0.0.1:{rig.port}/hook", timeout_ms=1000)
        await until(lambda: ids <= {i for i, _ in rig.got}, "the backlog pushed", 60)
        assert rig.source.peak <= 8, rig.source.peak
        requests = rig.pushers.snapshots()[0].requests
        assert requests["timeout"] == 0, requests

    run(tmp_path, ["127.0.0.1/32"], test, flush=FlushPolicy.ASYNC)


def test_retry_after_holds_every_request_of_the_target(tmp_path: Path) -> None:
    """The first request answered 429 Retry-After 2 with a window of 8 (the rig's
    connections) and a
    backlog of hundreds: no request reaches the receiver within 2 s of it (but
    those sent as the answer travelled back)."""
    answered: list[float] = []

    async def test(rig: Rig) -> None:
        async def first_429() -> web.Response | None:
            if answered:
                return None
            answered.append(0.0)  # requests arriving meanwhile were sent before the 429
            await asyncio.sleep(0.3)
            answered[0] = asyncio.get_running_loop().time()
            return web.Response(status=429, headers={"Retry-After": "2"})

        rig.answer = first_429
        rig.delay_s = 0.05  # the backlog outlasts the hold
        ids = set(rig.schedule(300))
        await asyncio.sleep(0.6)  # all ready: one backlog
        rig.push_to("web", f"http://127.0.0.1:{rig.port}/hook")
        await until(lambda: ids <= {i for i, _ in rig.got}, "the backlog pushed", 60)
        # (those sent while the 429 was on its way back raced it: 0.1 s for them)
        inside = [t for t in rig.arrived if answered[0] + 0.1 <= t < answered[0] + 2.0]
        assert inside == [], len(inside)

    run(tmp_path, ["127.0.0.1/32"], test, flush=FlushPolicy.ASYNC)


def test_a_deposed_master_stops_at_once_though_the_call_pool_is_busy(tmp_path: Path) -> None:
    """A request in flight, both threads of the calls' pool busy: the pushers stop
    (the request aborted) once the engine stops delivering, before the pool frees."""
    freed: list[bool] = []

    async def test(rig: Rig) -> None:
        rig.delay_s = 6.0  # the request stays in flight
        rig.schedule(1)
        rig.push_to("web", f"http://127.0.0.1:{rig.port}/hook")
        await until(lambda: rig.arrived != [], "a request in flight")

        def busy() -> None:
            time.sleep(4)
            freed.append(True)

        blocked = [asyncio.ensure_future(rig.calls.run(busy)) for _ in range(2)]
        await asyncio.sleep(0.6)  # the pushers' next look waits on the pool
        rig.delivering = False
        await until(lambda: rig.pushers.snapshots() == [], "the pushers stopped", 10)
        assert freed == []  # stopped while the pool was still busy
        await asyncio.gather(*blocked)

    run(tmp_path, ["127.0.0.1/32"], test)


def test_a_requests_timeout_is_capped_at_the_lease_left(tmp_path: Path) -> None:
    """A 10 s target timeout, a master whose lease has 0.3 s left, a receiver
    answering in 5 s: the request times out (it never outlives the lease)."""

    async def test(rig: Rig) -> None:
        rig.delay_s = 5.0
        rig.lease = 0.3
        rig.schedule(1)
        rig.push_to("web", f"http://127.0.0.1:{rig.port}/hook")
        await until(lambda: rig.pushers.snapshots() != [], "pushing")
        await until(lambda: rig.pushers.snapshots()[0].requests["timeout"] >= 1, "timed out", 4)
        assert rig.pushers.snapshots()[0].requests["2xx"] == 0

    run(tmp_path, ["127.0.0.1/32"], test)


def test_an_idle_push_group_waits_for_the_ready_signal_not_a_poll(tmp_path: Path) -> None:
    """Nothing ready for 2 s: a handful of takes, not one every 50 ms; a message
    released then is still pushed (the signal wakes the pusher)."""

    async def test(rig: Rig) -> None:
        rig.push_to("web", f"http://127.0.0.1:{rig.port}/hook")
        await until(lambda: rig.source.takes >= 1, "the first take")
        before = rig.source.takes
        await asyncio.sleep(2.0)
        assert rig.source.takes - before <= 3, rig.source.takes - before
        ids = set(rig.schedule(3))
        await until(lambda: ids <= {i for i, _ in rig.got}, "pushed once released")

    run(tmp_path, ["127.0.0.1/32"], test)


def test_snapshots_read_from_another_thread_are_made_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metrics' HTTP thread reads the pushers' reports while the loop pushes
    and groups come and go: every report is made on the loop (the reader only
    takes the value swapped in), and the reader sees them."""
    made_on: set[int] = set()
    make = Pusher.snapshot

    def recorded(self: Pusher) -> PushSnapshot:
        made_on.add(threading.get_ident())
        return make(self)

    monkeypatch.setattr(Pusher, "snapshot", recorded)
    seen: list[int] = []

    async def test(rig: Rig) -> None:
        loop_thread = threading.get_ident()
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                seen.append(len(rig.pushers.snapshots()))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for group in ("a", "b"):
                rig.push_to(group, f"http://127.0.0.1:{rig.port}/hook")
            ids = set(rig.schedule(200))
            await until(lambda: ids <= {i for i, _ in rig.got}, "pushed")
            await until(lambda: max(seen, default=0) == 2, "both reported")
            rig.engine.set_group_policy("t", "a", GroupPolicy())
            await until(lambda: len(rig.pushers.snapshots()) == 1, "one left")
        finally:
            done.set()
            await asyncio.to_thread(reader.join)
        assert made_on == {loop_thread}

    run(tmp_path, ["127.0.0.1/32"], test)


@pytest.mark.parametrize("host", ["127.1", "2130706433", "[::127.0.0.1]"])
def test_odd_literal_forms_of_loopback_are_refused_and_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, host: str
) -> None:
    """Short, integer and IPv4-compatible forms of 127.0.0.1, no allow-list: refused,
    nothing reaches the receiver, the log says the target is refused (and why)."""

    async def test(rig: Rig) -> None:
        rig.push_to("odd", f"http://{host}:{rig.port}/hook")
        rig.schedule(2)
        await until(lambda: rig.states() == {"odd": PushState.REFUSED}, "refused")
        assert rig.got == []

    with caplog.at_level(logging.WARNING, logger="delayq.push"):
        run(tmp_path, [], test)
    said = [r.getMessage() for r in caplog.records if r.name == "delayq.push"]
    assert any("is refused" in m for m in said), said
    assert not any("resolves only" in m for m in said), said
