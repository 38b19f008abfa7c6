"""Recurring schedules: preview a nightly cron across a daylight-saving change,
then an every-second heartbeat whose firings are received with their headers,
paused, resumed, slowed down by an update, listed and deleted.

Run against a `delayq serve`: python heartbeat_and_nightly.py [HOST:PORT]
(default $DELAYQ_SERVER, else 127.0.0.1:7420).
"""

from __future__ import annotations

import itertools
import os
import sys
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import delayq

TOPIC = "example-heartbeats"
GROUP = "example-monitor"
NEW_YORK = ZoneInfo("America/New_York")


def local(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, NEW_YORK):%Y-%m-%d %H:%M %Z}"


def main(server: str) -> int:
    with delayq.Client(server) as client:
        # 02:30 in New York does not exist on 14 March 2027: that night fires at 03:00
        nightly = delayq.ScheduleSpec(
            template=delayq.MessageTemplate(topic="example-reports", body=b"nightly report"),
            cron="30 2 * * *",
            time_zone="America/New_York",
            start_ms=int(datetime(2027, 3, 13, tzinfo=UTC).timestamp() * 1000),
        )
        times = client.next_firings(spec=nightly, count=3)
        print("nightly preview:", ", ".join(local(t) for t in times))

        beat = delayq.ScheduleSpec(
            template=delayq.MessageTemplate(topic=TOPIC, body=b"ping", headers={"from": "cron"}),
            every_ms=1000,
        )
        made = client.create_schedule("example-heartbeat", beat)
        print(f"created {made.name}: every {made.spec.every_ms} ms")
        try:
            client.create_schedule("example-heartbeat", beat)
        except delayq.AlreadyExists:
            print("a second create: the name is taken")

        fired: list[int] = []
        while len(fired) < 3:
            for m in client.receive(TOPIC, GROUP, max_messages=10, wait_s=2.0):
                fired.append(int(m.headers["delayq-schedule-time"]))
                print(f"fired {m.key} {m.body.decode()!r}, header from={m.headers['from']}")
                client.ack(TOPIC, GROUP, [m.receipt])
        gaps = sorted({b - a for a, b in itertools.pairwise(sorted(fired))})
        print(f"nominal times: {len(set(fired))} distinct, apart by {gaps} ms")

        paused = client.pause_schedule("example-heartbeat")
        print(f"paused: {paused.paused}, next firings {client.next_firings('example-heartbeat')}")
        client.resume_schedule("example-heartbeat")
        slower = client.update_schedule("example-heartbeat", delayq.ScheduleSpec(
            template=beat.template, every_ms=60_000))  # fmt: skip
        nxt = client.next_firings("example-heartbeat", count=3)
        print(f"updated: every {slower.spec.every_ms} ms, next {len(nxt)} are "
              f"{nxt[1] - nxt[0]} ms apart")  # fmt: skip
        names = [s.name for s in client.list_schedules().schedules]
        print(f"listed: {names}")
        client.delete_schedule("example-heartbeat")
        try:
            client.get_schedule("example-heartbeat")
        except delayq.NotFound:
            print("deleted: example-heartbeat is gone")
    return 0


if __name__ == "__main__":
    default = os.environ.get("DELAYQ_SERVER", "127.0.0.1:7420")
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else default))
