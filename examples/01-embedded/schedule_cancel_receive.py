"""Schedule three messages 1-2 s out, cancel one, then receive and ack the other two.

Run against a `delayq serve`: python schedule_cancel_receive.py [HOST:PORT]
(default $DELAYQ_SERVER, else 127.0.0.1:7420).
"""

from __future__ import annotations

import os
import sys
import time

import delayq

TOPIC, GROUP = "example-orders", "example-billing"


def main(server: str) -> int:
    with delayq.Client(server) as client:
        bodies = {}
        for i, body in enumerate([b"ship #1", b"ship #2", b"ship #3"]):
            sent = client.schedule(TOPIC, body, delay=1 + i / 2)  # seconds
            bodies[sent.id] = body.decode()
            print(f"scheduled {body.decode()} as {sent.id}")

        cancel_id = next(i for i, b in bodies.items() if b == "ship #2")
        [outcome] = client.cancel(cancel_id)
        state = client.lookup(cancel_id).state
        assert state == delayq.MessageState.CANCELLED
        print(f"cancel ship #2: {outcome} (state {state})")

        try:  # a one-message call raises what the server refused
            client.schedule(TOPIC, b"ship #4", delay=-5)
        except delayq.InvalidArgument as exc:
            print(f"refused ship #4: {exc.field}")

        waiting = set(bodies) - {cancel_id}
        deadline = time.monotonic() + 15
        while waiting and time.monotonic() < deadline:
            for m in client.receive(TOPIC, GROUP, max_messages=10, wait_s=1):
                late = m.delivered_at_ms - m.deliver_at_ms
                print(f"received {m.body.decode()} (attempt {m.attempt}, {late} ms late)")
                client.ack(TOPIC, GROUP, [m.receipt])
                waiting.discard(m.id)
        if waiting:
            print(f"not received: {sorted(bodies[i] for i in waiting)}")
            return 1
        print("done: 2 received and acked, 1 cancelled")
        return 0


if __name__ == "__main__":
    default = os.environ.get("DELAYQ_SERVER", "127.0.0.1:7420")
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else default))
