"""Reminders addressed by the application's own key: schedule once per key, a
retry that learns the id its first attempt got, move and cancel by key.

Run against a `delayq serve`: python reminders_by_key.py [HOST:PORT]
(default $DELAYQ_SERVER, else 127.0.0.1:7420).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import delayq

TOPIC = "example-reminders"
KEY = "order-42"


def main(server: str) -> int:
    with delayq.Client(server) as client:
        # "remind me in an hour", debounced: a later call replaces the pending one
        first = client.schedule(TOPIC, b"pay order 42", key=KEY, delay=3600, if_exists="replace")
        print(f"scheduled {first.id} ({first.key_outcome})")
        moved = client.schedule(TOPIC, b"pay order 42!", key=KEY, delay=7200, if_exists="replace")
        print(f"replaced by {moved.id} ({moved.key_outcome})")

        # a producer retrying a schedule that timed out: told the id that stands
        try:
            client.schedule(TOPIC, b"pay order 42!", key=KEY, delay=7200, if_exists="reject")
        except delayq.AlreadyExists as exc:
            print(f"retry: already there as {exc.id}: {exc.id == moved.id}")

        [pending] = client.lookup_key(TOPIC, KEY)
        print(f"pending for {KEY}: {pending.id} {pending.body.decode()!r} ({pending.state})")
        [later] = client.reschedule_key(TOPIC, KEY, delay=timedelta(days=1))
        print(f"moved to tomorrow as {later.id}")
        print(f"cancelled {client.cancel_key(TOPIC, KEY)} for {KEY}")
        try:
            client.lookup_key(TOPIC, KEY)
        except delayq.NotFound:
            print(f"nothing pending for {KEY}")
    return 0


if __name__ == "__main__":
    default = os.environ.get("DELAYQ_SERVER", "127.0.0.1:7420")
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else default))
