"""A round trip through a client of any version (``test_packed_wire`` runs it with
today's client and, in a process of its own, with an older one): it uses only
what every version's client has."""

from __future__ import annotations

import time
from typing import Any

from delayq import Outgoing


def round_trip(client: Any, topic: str) -> dict[str, Any]:
    """Schedule three messages due now, receive and ack them: what each step gave."""
    sent = client.schedule_many(
        [
            Outgoing(topic=topic, body=b"m%d" % i, key=f"k{i}", headers={"h": str(i)})
            for i in range(3)
        ]
    )
    got: list[Any] = []
    until = time.monotonic() + 15
    while len(got) < 3 and time.monotonic() < until:
        got += client.receive(topic, "g", max_messages=10, wait_s=1)
    acks = client.ack(topic, "g", [m.receipt for m in got])
    return {
        "ids": sorted(s.id for s in sent),
        "got": sorted(m.id for m in got),
        "bodies": sorted(m.body.decode() for m in got),
        "headers": sorted(m.headers["h"] for m in got),
        "acks": [str(a) for a in acks],
    }
