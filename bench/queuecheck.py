"""A queue workload and its checker, the way Jepsen's total-queue checker counts:
a producer, a canceller and a consumer run through the client against any
node of a cluster while faults happen, each recording what it was told; the
checker then counts what an acknowledgement promised and did not happen.

- ``acked``: schedules the service acknowledged (id -> due ms; ``acked_at``: id
  -> when the acknowledgement came, for failover timings; ``acked_sent``: id ->
  when the call that was acknowledged was sent); ``unknown``:
  schedules whose call failed (their outcome is unknown: they may or may not be
  delivered, and count as *recovered* when they are);
- ``cancelled``: cancels acknowledged as done (id -> time of the ack):
  CANCELLED, or ALREADY_CANCELLED (a retried cancel whose first try landed);
  ``cancel_unknown``: ids whose cancel call failed (it may have landed: such a
  message is expected neither way);
- ``received``: every delivery the consumer saw (id, receive time, due time).
  A message a rebalance moved to another shard is delivered under its new id;
  it is counted under the id it was acknowledged with (the first of its
  ``delayq-moved-from`` ids); ``shards``: the shards each message was received
  from (``two_shards``: delivered by more than one, which must not happen).

- ``unreceived``: after ``drain``, what the service says of each message expected
  and not received (its state, or the error of the lookup), so that a loss names
  what became of the message (``pending``: never delivered; ``delivered``: handed
  to the group and never seen by the consumer; ``cancelled``: a cancel the
  canceller was not told of); ``ack_outcomes``: the consumer's acks that did not
  answer ``acked``, by outcome.

Findings: ``lost`` (acked, not cancelled, never received), ``early`` (received
before its due time), ``cancel_broken`` (received more than ``CANCEL_SLACK_MS``
after its cancel was acknowledged: a delivery that raced the cancel is not one),
``duplicates`` (deliveries beyond the first), ``recovered`` (received, never
acknowledged). Lost, early and broken cancels must be 0.

As a program (in another process or network namespace: ``tests/partition``) it
runs the load until ``--stop-file`` exists, drains, and writes the history as
JSON (``History.to_json``)::

    python -m bench.queuecheck --address HOST:PORT --stop-file F --out history.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delayq import Client, Outgoing
from delayq.client import AckOutcome, CancelOutcome, ClientError
from delayq.receipts import Receipt

MOVED_FROM = "delayq-moved-from"  # the old ids of a message a rebalance moved
__all__ = ["CANCEL_SLACK_MS", "History", "QueueLoad", "check"]

CANCEL_SLACK_MS = 1000


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class History:
    acked: dict[str, int] = field(default_factory=dict)
    acked_at: dict[str, int] = field(default_factory=dict)
    acked_sent: dict[str, int] = field(default_factory=dict)
    unknown: int = 0
    cancelled: dict[str, int] = field(default_factory=dict)
    cancel_unknown: set[str] = field(default_factory=set)
    received: list[tuple[str, int, int]] = field(default_factory=list)
    shards: dict[str, set[int]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    error_texts: list[str] = field(default_factory=list)  # the first few, for reports
    unreceived: dict[str, str] = field(default_factory=dict)
    ack_outcomes: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> str:
        doc = dict(self.__dict__)
        doc["cancel_unknown"] = sorted(self.cancel_unknown)
        doc["shards"] = {k: sorted(v) for k, v in self.shards.items()}
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str) -> History:
        doc = json.loads(text)
        doc["cancel_unknown"] = set(doc["cancel_unknown"])
        doc["shards"] = {k: set(v) for k, v in doc["shards"].items()}
        doc["received"] = [tuple(r) for r in doc["received"]]
        doc["errors"] = Counter(doc["errors"])
        doc["ack_outcomes"] = Counter(doc["ack_outcomes"])
        return cls(**doc)


def check(h: History) -> dict[str, Any]:
    """The findings of a history (see the module docstring)."""
    seen: dict[str, list[int]] = {}
    early = 0
    for mid, at, due in h.received:
        seen.setdefault(mid, []).append(at)
        early += at < due
    expected = set(h.acked) - set(h.cancelled) - h.cancel_unknown
    lost = sorted(i for i in expected if i not in seen)
    broken = sorted(
        i for i, t in h.cancelled.items() if any(a > t + CANCEL_SLACK_MS for a in seen.get(i, []))
    )
    return {
        "acked": len(h.acked),
        "unknown": h.unknown,
        "cancelled": len(h.cancelled),
        "cancel_unknown": len(h.cancel_unknown),
        "received": len(h.received),
        "lost": len(lost),
        "lost_ids": lost[:20],
        "early": early,
        "cancel_broken": len(broken),
        "cancel_broken_ids": broken[:20],
        "duplicates": sum(len(v) - 1 for v in seen.values()),
        "two_shards": sum(1 for v in h.shards.values() if len(v) > 1),
        "recovered": len(set(seen) - set(h.acked)),
        "errors": dict(h.errors),
        "error_texts": list(h.error_texts),
        "lost_states": {i: h.unreceived.get(i, "?") for i in lost[:20]},
        "ack_outcomes": dict(h.ack_outcomes),
    }


class QueueLoad:
    """The three workers against ``address`` (any node), until ``stop``."""

    def __init__(
        self,
        address: str,
        *,
        topic: str = "queue-check",
        batch: int = 10,
        pause_s: float = 0.01,
        delay_s: tuple[float, float] = (0.2, 2.0),
        seed: int = 1,
        keys: int = 0,
    ) -> None:
        """``keys``: when above 0, half the messages carry one of that many keys."""
        self.address, self.topic, self.batch, self.keys = address, topic, batch, keys
        self.pause_s, self.delay_s = pause_s, delay_s
        self.history = History()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producing = threading.Event()
        self._paused = threading.Event()  # the producer has no call in flight
        self._threads = [
            threading.Thread(target=self._produce, name="produce"),
            threading.Thread(target=self._cancel, name="cancel"),
            threading.Thread(target=self._consume, name="consume"),
        ]

    def start(self) -> QueueLoad:
        self._producing.set()
        for t in self._threads:
            t.start()
        return self

    def stop_producing(self) -> None:
        self._producing.clear()

    def drain(self, quiet_s: float = 3.0, timeout_s: float = 60.0) -> None:
        """Stop producing (and wait for the producer's last call), wait until every
        acknowledged message is due and nothing new came for ``quiet_s`` and none
        of those not received may still come: pending at the service, or delivered
        to the topic and not yet to the consumer (a receive whose answer was lost
        hands its messages out again after their invisibility, 30 s; a shard whose
        master is between leases delivers once it holds one again). Late is not
        lost: the checker counts what never comes, and ``timeout_s`` bounds the
        wait. Then stop all and record what the service says of each message
        expected and not received (``unreceived``)."""
        self.stop_producing()
        deadline = time.monotonic() + timeout_s
        self._paused.wait(timeout_s)
        with self._lock:
            last_due = max(self.history.acked.values(), default=0)
        while time.monotonic() < deadline:
            n = len(self.history.received)
            time.sleep(quiet_s)
            if len(self.history.received) == n and _now_ms() > last_due + 1000:
                states = self.states(self.unreceived())
                if not {"pending", "delivered"} & set(states.values()):
                    break
        self.stop()
        self.history.unreceived = self.states(self.unreceived())

    def unreceived(self, limit: int = 50) -> list[str]:
        """Ids acknowledged, not cancelled (nor maybe) and not received yet."""
        h = self.history
        with self._lock:
            seen = {mid for mid, _, _ in h.received}
            gone = set(h.cancelled) | h.cancel_unknown
            return sorted(i for i in h.acked if i not in seen and i not in gone)[:limit]

    def states(self, ids: list[str]) -> dict[str, str]:
        """What the service says of each id: its state, or the lookup's error."""
        out: dict[str, str] = {}
        if not ids:
            return out
        with Client(self.address, timeout_s=5) as c:
            for mid in ids:
                try:
                    out[mid] = str(c.lookup(mid).state)
                except ClientError as exc:
                    out[mid] = exc.status.name if exc.status else type(exc).__name__
        return out

    def stop(self) -> None:
        self._stop.set()
        self._producing.clear()
        for t in self._threads:
            t.join()

    def _error(self, exc: Exception) -> None:
        status = exc.status if isinstance(exc, ClientError) else None
        name = status.name if status is not None else type(exc).__name__
        with self._lock:
            self.history.errors[name] += 1
            if len(self.history.error_texts) < 10:
                details = exc.message if isinstance(exc, ClientError) else exc
                self.history.error_texts.append(f"{name}: {details}")

    def _produce(self) -> None:
        h = self.history
        with Client(self.address, timeout_s=5) as c:
            while not self._stop.is_set():
                if not self._producing.is_set():
                    self._paused.set()
                    time.sleep(0.05)
                    continue
                self._paused.clear()
                batch = [
                    Outgoing(
                        topic=self.topic,
                        body=b"q",
                        delay=self._rng.uniform(*self.delay_s),
                        key=self._key(),
                    )
                    for _ in range(self.batch)
                ]
                sent = _now_ms()
                try:
                    out = c.schedule_many(batch)
                except Exception as exc:
                    self._error(exc)
                    with self._lock:
                        h.unknown += len(batch)
                    continue
                now = _now_ms()
                with self._lock:
                    for o in out:
                        if o.ok and o.id:
                            h.acked[o.id] = o.deliver_at_ms
                            h.acked_at[o.id] = now
                            h.acked_sent[o.id] = sent
                        else:
                            h.unknown += 1
                            if len(h.error_texts) < 10:
                                h.error_texts.append(f"item: {o.error}")
                time.sleep(self.pause_s)

    def _key(self) -> str:
        if self.keys and self._rng.random() < 0.5:
            return f"q{self._rng.randrange(self.keys)}"
        return ""

    def _cancel(self) -> None:
        h = self.history
        rng = random.Random(2)
        with Client(self.address, timeout_s=5) as c:
            while not self._stop.is_set():
                time.sleep(0.05)
                with self._lock:
                    now = _now_ms()
                    fresh = [i for i, d in list(h.acked.items())[-200:] if d > now + 500]
                if not fresh:
                    continue
                mid = rng.choice(fresh)
                try:
                    (outcome,) = c.cancel(mid)
                except Exception as exc:
                    self._error(exc)
                    with self._lock:
                        h.cancel_unknown.add(mid)
                    continue
                if outcome in (CancelOutcome.CANCELLED, CancelOutcome.ALREADY_CANCELLED):
                    with self._lock:
                        h.cancelled[mid] = _now_ms()

    def _consume(self) -> None:
        h = self.history
        with Client(self.address, timeout_s=5) as c:
            while not self._stop.is_set():
                try:
                    got = c.receive(self.topic, "check", max_messages=200, wait_s=0.3)
                except Exception as exc:
                    self._error(exc)
                    time.sleep(0.05)
                    continue
                now = _now_ms()
                with self._lock:
                    for m in got:
                        first = (m.headers.get(MOVED_FROM) or m.id).split()[0]
                        h.received.append((first, now, m.deliver_at_ms))
                        h.shards.setdefault(first, set()).add(Receipt.shards([m.receipt])[0])
                if got:
                    try:
                        outcomes = c.ack(self.topic, "check", [m.receipt for m in got])
                    except Exception as exc:
                        self._error(exc)
                        continue
                    with self._lock:
                        h.ack_outcomes.update(
                            str(o) if isinstance(o, AckOutcome) else f"error: {o.status.name}"
                            for o in outcomes
                            if o is not AckOutcome.ACKED
                        )


class LazyGroup:
    """A second consumer group on the workload's topic that receives and acks until
    told to stop acking (``acking = False``), then only receives: its oldest unacked
    message ages (the backlog-age alert, the dashboard's figure)."""

    def __init__(self, address: str, topic: str, group: str = "lazy") -> None:
        self.group = group
        self.acking = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(address, topic), daemon=True)

    def start(self) -> LazyGroup:
        self._thread.start()
        return self

    def _run(self, address: str, topic: str) -> None:
        with Client(address, timeout_s=5) as c:
            while not self._stop.is_set():
                try:
                    got = c.receive(topic, self.group, max_messages=100, wait_s=0.3)
                    if got and self.acking:
                        c.ack(topic, self.group, [m.receipt for m in got])
                except Exception:  # a failover under way: the next call goes on
                    self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the queue workload until a stop file appears.")
    p.add_argument("--address", required=True, help="any node's host:port")
    p.add_argument("--stop-file", type=Path, required=True, help="stop producing once it exists")
    p.add_argument("--out", type=Path, required=True, help="where the history (JSON) goes")
    p.add_argument("--ready-file", type=Path, help="made once the first schedule is acked")
    p.add_argument("--batch", type=int, default=5, help="messages a schedule call (5)")
    p.add_argument("--pause", type=float, default=0.05, help="seconds between calls (0.05)")
    p.add_argument("--quiet", type=float, default=2.0, help="drain: seconds with nothing new")
    p.add_argument("--drain-timeout", type=float, default=120.0)
    a = p.parse_args(argv)
    load = QueueLoad(a.address, batch=a.batch, pause_s=a.pause).start()
    try:
        while not a.stop_file.exists():
            if a.ready_file is not None and load.history.acked and not a.ready_file.exists():
                a.ready_file.write_text("")
            time.sleep(0.05)
        load.drain(quiet_s=a.quiet, timeout_s=a.drain_timeout)
    finally:
        load.stop()
    tmp = a.out.with_suffix(".tmp")
    tmp.write_text(load.history.to_json())
    tmp.replace(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
