"""The node's pushers over a real engine and the server's calls layer, on one
event loop with a real aiohttp receiver: only while the engine is delivering do
pushers run (none, and nothing sent, while not); a push group whose secret does
not resolve is ``no_secret`` and sends nothing until the secret appears, then
pushes signed; a name resolving only to a refused address is ``refused`` and
nothing reaches the receiver; removing the target stops the pusher."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from delayq import Engine, SystemClock
from delayq.delivery.policy import GroupPolicy
from delayq.delivery.pushtarget import PushTarget
from delayq.engine import ScheduleBatch
from delayq.push import secrets as secrets_module
from delayq.push.egress import Egress
from delayq.push.secrets import SecretStore
from delayq.push.snapshot import PushState
from delayq.server import pusher as pusher_module
from delayq.server.calls import Calls
from delayq.server.pushers import Pushers
from delayq.server.topology import Topology
from tests.support.engines import small_settings

SECRET = "whsec_" + base64.b64encode(b"pushers-test-key-0123456789abcdef").decode()

pytestmark = pytest.mark.timeout(120)


class Rig:
    """An engine, its calls, the pushers and a receiver recording (id, verified)."""

    def __init__(self, engine: Engine, calls: Calls, secret_dir: Path, allow: list[str]) -> None:
        self.engine = engine
        self.calls = calls
        self.delivering = True
        self.got: list[tuple[str, bool]] = []
        self.secrets = SecretStore(secret_dir, engine.clock.monotonic_s)
        self.pushers = Pushers(
            source=calls.consuming,
            delivering=lambda: self.delivering and engine.replicating.delivering(),
            push_groups=lambda: calls.run(engine.push_groups),
            clock=engine.clock,
            egress=Egress(allow),
            secrets=self.secrets,
            max_connections=8,
        )
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            Webhook(SECRET).verify(body, dict(request.headers), json_parse=False)
            verified = True
        except Exception:
            verified = False
        self.got.append((request.headers["webhook-id"], verified))
        return web.Response(status=200)

    def schedule(self, n: int) -> set[str]:
        at = time.time_ns() // 1_000_000
        out = self.engine.schedule_batch(ScheduleBatch(topic="t", bodies=[b"x"] * n,
                                                       deliver_at_ms=[at] * n))  # fmt: skip
        assert not out.errors
        return {i for i in out.ids if i is not None}

    def push_to(self, group: str, url: str, secret_ref: str = "") -> None:
        target = PushTarget(url=url, secret_ref=secret_ref)
        self.engine.set_group_policy("t", group, GroupPolicy(push=target))

    def states(self) -> dict[str, PushState]:
        return {s.group: s.state for s in self.pushers.snapshots()}


async def until(done: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while not done():
            await asyncio.sleep(0.02)


def run(tmp_path: Path, allow: list[str], test: Callable[[Rig], Awaitable[None]]) -> None:
    engine = Engine(small_settings(tmp_path / "data"), SystemClock()).start()
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()

    async def main() -> None:
        calls = Calls(engine, Topology(None, 0, "127.0.0.1:0"), threads=2)
        rig = Rig(engine, calls, secret_dir, allow)
        app = web.Application()
        app.router.add_post("/hook", rig.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        rig.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
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
        first = rig.schedule(20)
        await asyncio.sleep(1.0)  # four looks of the pushers: none may start
        assert rig.pushers.snapshots() == [] and rig.got == []
        rig.delivering = True
        await until(lambda: first <= {i for i, _ in rig.got}, "the backlog pushed")
        assert rig.states() == {"web": PushState.PUSHING}
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
        ids = rig.schedule(10)
        await until(lambda: rig.states() == {"signed": PushState.NO_SECRET}, "no_secret")
        await asyncio.sleep(1.0)
        assert rig.got == []
        (tmp_path / "secrets" / "late").write_text(SECRET + "\n")
        await until(lambda: ids <= {i for i, _ in rig.got}, "pushed once the secret is there")
        assert all(verified for _, verified in rig.got)
        assert rig.states() == {"signed": PushState.PUSHING}

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
