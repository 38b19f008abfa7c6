"""The clients' ``level=`` (RocketMQ 4's delay level): it travels as
``NewMessage.delay_level``, and giving two of at / delay / level (or a level below
1) is a ValueError raised before any call is made."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from delayq import AsyncClient, Client, Outgoing, RetryPolicy
from delayq.client.outgoing import new_message

NOWHERE = "127.0.0.1:9"  # nothing listens: a call would fail with an RpcError
TWO_OF_THREE: list[dict[str, Any]] = [
    {"at": 1_700_000_000_000, "level": 3},
    {"delay": 5, "level": 3},
    {"at": 1_700_000_000_000, "delay": timedelta(seconds=5)},
    {"at": 1_700_000_000_000, "delay": 5, "level": 3},
]


def test_a_level_is_sent_as_delay_level() -> None:
    msg = new_message(Outgoing(topic="t", body=b"x", level=3))
    assert msg.WhichOneof("when") == "delay_level" and msg.delay_level == 3
    assert new_message(Outgoing(topic="t", body=b"x")).WhichOneof("when") is None


@pytest.mark.parametrize("when", TWO_OF_THREE)
def test_two_ways_to_say_when_are_refused_before_any_call(when: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="give only one of at, delay and level"):
        Outgoing(topic="t", body=b"x", **when)
    with Client(NOWHERE, timeout_s=0.5, retry=RetryPolicy(attempts=1)) as c:
        with pytest.raises(ValueError, match="give only one of at, delay and level"):
            c.schedule("t", b"x", **when)
        with c.producer() as p, pytest.raises(ValueError, match="give only one"):
            p.send("t", b"x", **when)  # refused at once, not failing its batch later

    async def main() -> None:
        async with AsyncClient(NOWHERE, timeout_s=0.5, retry=RetryPolicy(attempts=1)) as c:
            with pytest.raises(ValueError, match="give only one of at, delay and level"):
                await c.schedule("t", b"x", **when)

    asyncio.run(main())


@pytest.mark.parametrize("level", [0, -2])
def test_a_level_below_1_is_refused_as_it_would_read_as_not_given(level: int) -> None:
    with pytest.raises(ValueError, match=f"^level: must be 1..N .*, got {level}$"):
        Outgoing(topic="t", body=b"x", level=level)


def test_a_changed_outgoing_is_checked_again_when_sent() -> None:
    m = Outgoing(topic="t", body=b"x", delay=5)
    m.level = 2
    with pytest.raises(ValueError, match="give only one"):
        new_message(m)
