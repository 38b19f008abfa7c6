"""A push group's target over the public API, against a real ``delayq serve``: set,
read back as set (sync and async clients, ListGroups), kept over a restart, made a
pull group again; Stats showing it without credentials; a literal loopback or
metadata address refused INVALID_ARGUMENT naming ``policy.push.url``, a bad field
naming its own."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest

import delayq
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]

TARGET = delayq.PushTarget(
    url="https://ops:hunter2@hooks.example.com/in?token=abc",
    method="PUT",
    headers={"X-Env": "prod", "x-api-key": "Bearer xyz"},
    timeout_ms=2500,
)
POLICY = delayq.GroupPolicy(max_attempts=5, push=TARGET)


@pytest.fixture
def srv(start_server: Start) -> ServerProcess:
    return start_server()


def test_a_target_is_set_read_listed_kept_and_dropped(srv: ServerProcess) -> None:
    with delayq.Client(srv.address) as c:
        stored = c.set_group_policy("orders", "hook", POLICY)
        assert stored == POLICY
        assert c.group_policy("orders", "hook") == POLICY
        (info,) = c.groups("orders")
        assert (info.group, info.policy) == ("hook", POLICY)
    srv.stop()
    srv.start()
    with delayq.Client(srv.address) as c:
        assert c.group_policy("orders", "hook") == POLICY, "kept over a restart"
        pulled = c.set_group_policy("orders", "hook", dataclasses.replace(POLICY, push=None))
        assert pulled.push is None and c.group_policy("orders", "hook").push is None


def test_defaults_are_filled_in_and_the_async_client_does_the_same(srv: ServerProcess) -> None:
    async def main() -> None:
        async with delayq.AsyncClient(srv.address) as c:
            bare = delayq.GroupPolicy(push=delayq.PushTarget(url="http://hooks.example.com/x"))
            got = await c.set_group_policy("orders", "hook", bare)
            assert got.push == delayq.PushTarget(
                url="http://hooks.example.com/x", method="POST", timeout_ms=10_000
            )
            assert await c.group_policy("orders", "hook") == got

    asyncio.run(main())


def test_stats_show_the_target_without_credentials(srv: ServerProcess) -> None:
    with delayq.Client(srv.address) as c:
        c.set_group_policy("orders", "hook", POLICY)
        c.schedule("orders", b"x", delay=3600)
        (shard,) = c.stats("orders").shards
        (topic,) = shard.topics
        g = {g.group: g for g in topic.groups}["hook"]
        assert g.policy.push is not None
        assert g.policy.push.url == "https://hooks.example.com/in"
        assert not g.policy.push.headers
        for secret in ("hunter2", "token", "abc", "Bearer"):
            assert secret not in repr(shard)


@pytest.mark.parametrize(
    ("target", "field", "why"),
    [
        (delayq.PushTarget(url="http://127.0.0.1:8080/in"), "policy.push.url", "loopback"),
        (delayq.PushTarget(url="http://169.254.169.254/latest"), "policy.push.url", "metadata"),
        (delayq.PushTarget(url="http://[::1]/"), "policy.push.url", "loopback"),
        (delayq.PushTarget(url="ftp://hooks.example.com/"), "policy.push.url", "http"),
        (delayq.PushTarget(url="http://h.example/", method="GET"), "policy.push.method", "GET"),
        (
            delayq.PushTarget(url="http://h.example/", headers={"webhook-id": "x"}),
            "policy.push.headers",
            "server",
        ),
        (
            delayq.PushTarget(url="http://h.example/", timeout_ms=60_001),
            "policy.push.timeout_ms",
            "60000",
        ),
        (
            delayq.PushTarget(url="http://h.example/", secret_ref="/etc/x"),
            "policy.push.secret_ref",
            "not a name",
        ),
    ],
)
def test_a_refused_target_is_invalid_argument_naming_the_field(
    srv: ServerProcess, target: delayq.PushTarget, field: str, why: str
) -> None:
    with delayq.Client(srv.address) as c:
        with pytest.raises(delayq.InvalidArgument, match=why) as refused:
            c.set_group_policy("orders", "hook", delayq.GroupPolicy(push=target))
        assert refused.value.field == field
        assert c.group_policy("orders", "hook").push is None, "nothing stored"
