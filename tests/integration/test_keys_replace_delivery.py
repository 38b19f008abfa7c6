"""``replace`` racing the delivery of the message it replaces, on a real ``delayq
serve`` process: keys each with a message due a few milliseconds apart, each
replaced (by a message due in an hour) right at its due time while a consumer
receives. The old message's delivery either happened before the replace (which
then found nothing pending: ``new``, and the old one is received) or never (the
replace ``replaced`` it: it is never received and reads ended); each key ends with
exactly one pending message, the replacement. The outcomes' counts are printed
(``-s``).

Keys: ``DELAYQ_KEY_RACE_KEYS`` (200; 2,000 with ``--long``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from delayq import Client, Outgoing
from tests.support.background import ClientLoop
from tests.support.keyed import Answer, schedule_keyed
from tests.support.servers import ServerProcess
from tests.support.sizes import size

pytestmark = [pytest.mark.timeout(300), pytest.mark.long]

KEYS = size("DELAYQ_KEY_RACE_KEYS", ci=200, long=2_000)
SPREAD_MS = 5
"""Between two keys' due times (and so between their replaces)."""
TOPIC = "debounce"
GIVE_UP_S = 30.0


class Consumer(ClientLoop):
    """Receives and acks ``TOPIC`` until stopped; the ids received."""

    def __init__(self, address: str) -> None:
        super().__init__(address, "consumer")
        self.got: set[str] = set()

    def step(self) -> None:
        batch = self.client.receive(TOPIC, "g", max_messages=500, wait_s=0.2)
        if batch:
            self.client.ack(TOPIC, "g", [m.receipt for m in batch])
        self.got.update(m.id for m in batch)


def test_a_replace_either_follows_the_delivery_or_prevents_it(
    start_server: Callable[..., ServerProcess],
) -> None:
    srv = start_server()
    with Client(srv.address, timeout_s=30) as client, Consumer(srv.address) as consumer:
        start = int(time.time() * 1000) + 1_000
        old = client.schedule_many(
            [
                Outgoing(topic=TOPIC, body=b"old", key=f"k-{i}", at=start + i * SPREAD_MS)
                for i in range(KEYS)
            ]
        )
        assert all(s.ok and s.id is not None for s in old), old
        answers: list[Answer] = []
        for i in range(KEYS):
            wait_s = (start + i * SPREAD_MS) / 1000 - time.time()
            if wait_s > 0:
                time.sleep(wait_s)
            answers.append(schedule_keyed(client, TOPIC, b"new", f"k-{i}", "replace"))
        prior = {str(s.id) for s, a in zip(old, answers, strict=True) if a.outcome == "new"}
        deadline = time.monotonic() + GIVE_UP_S
        while not prior <= consumer.got and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # a replaced one received late would show now
        assert consumer.failure is None, consumer.failure
        counts = {o: sum(a.outcome == o for a in answers) for o in ("new", "replaced")}
        print(f"replace outcomes: {counts}")
        for i, (s, a) in enumerate(zip(old, answers, strict=True)):
            was = client.lookup(str(s.id)).state
            if a.outcome == "new":  # nothing pending: the old one was delivered first
                assert was == "delivered" and s.id in consumer.got, (i, a, was)
            else:
                assert a.outcome == "replaced", (i, a)
                assert was in ("rescheduled", "cancelled"), (i, a, was)
                assert s.id not in consumer.got, f"k-{i}: replaced, and delivered too"
            assert [m.id for m in client.lookup_key(TOPIC, f"k-{i}")] == [a.id]
        assert not consumer.got - {str(s.id) for s in old}, "only old messages were due"
