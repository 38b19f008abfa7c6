"""Receiving through a real client in tests: every message once, none early."""

from __future__ import annotations

import time
from collections.abc import Mapping

from delayq.client import Client


def receive_each_once(
    client: Client,
    topic: str,
    group: str,
    sent: Mapping[str, int],
    want: int,
    *,
    timeout_s: float,
    batch: int = 100,
) -> dict[str, int]:
    """Receive and ack ``topic`` as ``group`` until ``want`` messages came or
    ``timeout_s`` passed, asserting that none comes twice and none before its due
    time (``sent``: id -> deliver_at_ms); each received id -> when it was delivered."""
    got: dict[str, int] = {}
    deadline = time.time() + timeout_s
    while len(got) < want and time.time() < deadline:
        for m in client.receive(topic, group, max_messages=batch, wait_s=1):
            assert m.id not in got, f"{m.id} delivered twice"
            assert m.delivered_at_ms >= m.deliver_at_ms == sent[m.id], f"{m.id} early"
            got[m.id] = m.delivered_at_ms
            client.ack(topic, group, [m.receipt])
    return got
