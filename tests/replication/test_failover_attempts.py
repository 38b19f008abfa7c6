"""Attempt counts across a failover, with real ``delayq serve`` processes: the
master's hand-outs (HANDOUT records, held by the in-sync replica before a receive
answers in sync replication) are the replica's, so after the master is SIGKILLed
and the replica promoted, a poison message's next attempt continues the count and
it reaches the dead-letter topic after exactly ``max_attempts`` hand-outs."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from delayq.admin.v1 import admin_pb2 as apb
from delayq.client import Client, Received
from tests.replication.nodes import admin, node, nodes, schedule, status, wait_for


def _next_attempt(c: Client) -> list[Received]:
    """The message at its next attempt: after its invisibility lapses (0.5 s)."""
    deadline = time.time() + 20
    while time.time() < deadline:
        if got := list(c.receive("t", "g", wait_s=1, invisible_s=0.5)):
            return got
    return []


def test_a_poison_message_keeps_its_attempts_across_a_failover(tmp_path: Path) -> None:
    attempts = ("--max-delivery-attempts", "3")
    m = node(tmp_path, "m", "--replication", "sync", "--min-insync", "2", *attempts)
    r = node(tmp_path, "r", *attempts, follow=m.admin_address)
    with nodes(m, r):
        wait_for("the replica", lambda: status(m.admin_address).insync == ["m", "r"])
        (mid,) = schedule(m.address, b"poison", delay_ms=0)
        with Client(m.address) as c:
            first = _next_attempt(c)
        assert [(x.id, x.attempt) for x in first] == [(mid, 1)]
        m.stop(signal.SIGKILL)  # the hand-out was held by r before the receive answered
        admin(r.admin_address).Promote(apb.PromoteRequest(epoch=2, insync=["r"]))
        with Client(r.address) as c:
            handed = [x.attempt for _ in range(2) for x in _next_attempt(c)]
            assert handed == [2, 3], "the count went on at the new master"
            assert list(c.receive("t", "g", wait_s=2, invisible_s=0.5)) == [], "no 4th"
            dead = list(c.receive("dlq.g", "ops", wait_s=5))
        assert [(d.headers["dlq.id"], d.headers["dlq.attempts"]) for d in dead] == [(mid, "3")]
