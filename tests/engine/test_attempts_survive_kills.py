"""A message failing every attempt reaches its group's dead-letter topic after
exactly ``max_attempts`` hand-outs although the real ``delayq serve`` process is
SIGKILLed between attempts: each hand-out's attempt is logged (HANDOUT records)
and continues after a restart."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from delayq.client import Client, Outgoing, Received
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_a_poison_message_is_dead_lettered_after_exactly_max_attempts_across_kills(
    start_server: Start, tmp_path: Path, flush: str
) -> None:
    args = ("--max-delivery-attempts", "3", "--flush", flush)
    srv = start_server(*args)
    with Client(srv.address) as c:
        (mid,) = [o.id for o in c.schedule_many([Outgoing(topic="t", body=b"poison")])]
    handed: list[int] = []
    for kill in range(3):
        with Client(srv.address) as c:
            got = _receive_one(c)
        assert [m.id for m in got] == [mid]
        handed.append(got[0].attempt)  # never acked: the attempt fails
        if kill < 2:
            srv.stop(signal.SIGKILL)
            srv = start_server(*args, data_dir=srv.data_dir)
    assert handed == [1, 2, 3], "the count went on across the kills"
    with Client(srv.address) as c:
        assert list(c.receive("t", "g", wait_s=2.5, invisible_s=0.5)) == [], "no 4th attempt"
        dead = list(c.receive("dlq.g", "ops", wait_s=5))
        assert [(d.body, d.headers["dlq.id"], d.headers["dlq.attempts"]) for d in dead] == [
            (b"poison", mid, "3")
        ]


def _receive_one(c: Client) -> list[Received]:
    """The message at its next attempt: after its invisibility lapses (0.5 s)."""
    deadline = time.time() + 20
    while time.time() < deadline:
        got = list(c.receive("t", "g", wait_s=1, invisible_s=0.5))
        if got:
            return got
    return []
