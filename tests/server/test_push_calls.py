"""The calls layer's part in push delivery over a real engine on the real clock:
a pusher's ``take`` (one look, no wait) and ``wait_ready`` (no release missed
between the two), ``nack`` with a least wait, a push target refused at set by
its literal address or its secret's name, and Stats carrying a pusher's figures
with its target shown without credentials."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from delayq import Engine, SystemClock
from delayq.delivery.policy import GroupPolicy
from delayq.delivery.pushtarget import PushTarget
from delayq.engine import AckOutcome, ScheduleBatch
from delayq.errors import InvalidArgument
from delayq.push.snapshot import PushSnapshot, PushState
from delayq.server.calls import Calls
from delayq.server.servicer import DelayQueueServicer
from delayq.server.topology import Topology
from delayq.v1 import delayq_pb2 as pb
from tests.support.engines import small_settings

Test = Callable[[Engine, Calls, DelayQueueServicer], Awaitable[None]]


def _serve(tmp_path: Path, test: Test) -> None:
    engine = Engine(small_settings(tmp_path / "data"), SystemClock()).start()

    async def main() -> None:
        calls = Calls(engine, Topology(None, 0, "127.0.0.1:0"), threads=2)
        try:
            await test(engine, calls, DelayQueueServicer(calls, "127.0.0.1:0"))
        finally:
            calls.shutdown()

    try:
        asyncio.run(main())
    finally:
        engine.close()


def _schedule_now(engine: Engine, n: int) -> None:
    at = time.time_ns() // 1_000_000
    engine.schedule_batch(ScheduleBatch(topic="t", bodies=[b"x"] * n, deliver_at_ms=[at] * n))


async def _released(engine: Engine, n: int) -> None:
    async with asyncio.timeout(10):
        while engine.observing.counters["delivered"] < n:
            await asyncio.sleep(0.01)


def test_a_release_between_a_take_and_the_wait_is_not_missed(tmp_path: Path) -> None:
    async def test(engine: Engine, calls: Calls, svc: DelayQueueServicer) -> None:
        consuming = calls.consuming
        assert not (await consuming.take("t", "g", 10, 30_000)).ids
        _schedule_now(engine, 3)
        await _released(engine, 3)  # released after the look, before the wait
        async with asyncio.timeout(10):  # the wait is 60 s: only the signal ends it sooner
            await consuming.wait_ready(60)
        got = await consuming.take("t", "g", 2, 30_000)
        assert len(got.ids) == 2, "at most what was asked, no wait"
        assert len((await consuming.take("t", "g", 10, 30_000)).ids) == 1
        async with asyncio.timeout(10):
            await consuming.wait_ready(0.01)  # nothing signalled: its timeout ends it

    _serve(tmp_path, test)


def test_a_nack_with_a_least_wait_holds_the_message_back(tmp_path: Path) -> None:
    async def test(engine: Engine, calls: Calls, svc: DelayQueueServicer) -> None:
        consuming = calls.consuming
        _schedule_now(engine, 2)
        await _released(engine, 2)
        got = await consuming.take("t", "g", 2, 30_000)
        receipts = [m.receipt for m in got.messages()]
        acked = [AckOutcome.ACKED]
        assert await consuming.nack("t", "g", receipts[:1], at_least_ms=600_000) == acked
        assert await consuming.nack("t", "g", receipts[1:]) == acked
        again = await consuming.take("t", "g", 2, 30_000)
        assert [m.attempt for m in again.messages()] == [2], "the plain nack: at once"
        assert again.ids == [got.ids[1]]

    _serve(tmp_path, test)


def test_a_target_is_refused_at_set_by_its_literal_address_or_its_secrets_name(
    tmp_path: Path,
) -> None:
    async def test(engine: Engine, calls: Calls, svc: DelayQueueServicer) -> None:
        for url, category in [
            ("http://127.0.0.1:9/x", "loopback"),
            ("http://169.254.169.254/latest", "metadata"),
            ("http://[::ffff:10.0.0.1]/", "private"),
        ]:
            with pytest.raises(InvalidArgument, match=category) as refused:
                calls.check_push(PushTarget(url=url))
            assert refused.value.field == "policy.push.url"
        calls.check_push(PushTarget(url="http://localhost:9/"))  # a name: judged at connect
        calls.push_allow = ("127.0.0.0/8",)
        calls.check_push(PushTarget(url="http://127.0.0.1:9/x"))
        asked: list[str] = []

        def check_secret(ref: str) -> None:
            asked.append(ref)
            if ref != "known":
                raise InvalidArgument("policy.push.secret_ref", f"{ref} not found")

        calls.check_push_secret = check_secret
        calls.check_push(PushTarget(url="http://127.0.0.1:9/", secret_ref="known"))
        calls.check_push(PushTarget(url="http://127.0.0.1:9/"))  # unsigned: nothing to check
        with pytest.raises(InvalidArgument, match=r"policy\.push\.secret_ref"):
            calls.check_push(PushTarget(url="http://127.0.0.1:9/", secret_ref="gone"))
        assert asked == ["known", "gone"]

    _serve(tmp_path, test)


def test_stats_carry_the_pushers_figures_and_its_target_without_credentials(
    tmp_path: Path,
) -> None:
    async def test(engine: Engine, calls: Calls, svc: DelayQueueServicer) -> None:
        url = "https://user:hunter2@hooks.example.com/in?token=abc"
        engine.set_group_policy("t", "hook", GroupPolicy(push=PushTarget(url=url)))
        engine.set_group_policy("t", "pull", GroupPolicy(max_attempts=2))
        snap = PushSnapshot(
            topic="t", group="hook", target="https://hooks.example.com:443",
            state=PushState.PUSHING, requests={"2xx": 5}, in_flight=1, consecutive_failures=0,
            last_success_ms=123, not_before_ms=0, acks_lost=0, latency_counts=(5,) + (0,) * 11,
            latency_sum_s=0.01, lateness_counts=(5,) + (0,) * 10, lateness_sum_s=0.0,
        )  # fmt: skip
        calls.push_snapshots = lambda: [snap]
        resp = await svc.Stats(pb.StatsRequest(), None)  # type: ignore[arg-type]
        (topic,) = resp.topics
        groups = {g.group: g for g in topic.groups}
        hook = groups["hook"]
        assert hook.HasField("push") and not groups["pull"].HasField("push")
        assert (hook.push.state, dict(hook.push.requests)) == ("pushing", {"2xx": 5})
        assert hook.push.target == "https://hooks.example.com:443"
        assert hook.policy.push.url == "https://hooks.example.com/in"
        for secret in ("hunter2", "token", "abc"):
            assert secret not in str(resp)

    _serve(tmp_path, test)
