"""The firings of recurring schedules as a consumer sees them, through a real
client: ``FiringCounter`` receives (and acks) a topic's messages on a thread of its
own, keeping each one's schedule and nominal time (the headers the firer sets),
id and delivery time; ``check_once`` holds them against the nominal times each
schedule should have fired: every one fired, under one message id (a message
delivered again after a failover is the same id), none early, none of another
time; ``lateness_line`` says how late they came.

    with FiringCounter(address, "ticks") as counter:
        ...                                   # schedules fire, nodes are killed
        counter.wait_for(expected)            # every expected nominal time came
    assert counter.failure is None
    check_once(counter.firings(), expected)
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from delayq.client import ClientError
from delayq.recurrence import SCHEDULE_HEADER, SCHEDULE_TIME_HEADER
from tests.support.background import ClientLoop

__all__ = [
    "Firing",
    "FiringCounter",
    "check_once",
    "gaps",
    "lateness_line",
    "nominal_times",
]


@dataclass(frozen=True)
class Firing:
    name: str
    nominal_ms: int
    id: str
    deliver_at_ms: int
    delivered_at_ms: int


class FiringCounter(ClientLoop):
    """Receives ``topic`` as ``group`` and acks what it got, until stopped; a call
    that fails (a master lost) is tried again on the next round."""

    def __init__(self, address: str, topic: str, group: str = "counter") -> None:
        super().__init__(address, "firing-counter")
        self.topic, self.group = topic, group
        self._lock = threading.Lock()  # the test reads while the thread appends
        self._seen: list[Firing] = []
        self.errors = 0
        """Receive or ack calls that failed (and were tried again)."""

    def step(self) -> None:
        try:
            got = self.client.receive(self.topic, self.group, max_messages=500, wait_s=1)
            if got:
                self.client.ack(self.topic, self.group, [m.receipt for m in got])
        except ClientError:  # a failover under the call: what it handed out comes again
            self.errors += 1
            time.sleep(0.2)
            return
        firings = [
            Firing(
                m.headers[SCHEDULE_HEADER],
                int(m.headers[SCHEDULE_TIME_HEADER]),
                m.id,
                m.deliver_at_ms,
                m.delivered_at_ms,
            )
            for m in got
        ]
        with self._lock:
            self._seen += firings

    def firings(self) -> list[Firing]:
        with self._lock:
            return list(self._seen)

    def nominal(self) -> dict[str, set[int]]:
        """Each schedule's nominal times received so far."""
        out: dict[str, set[int]] = defaultdict(set)
        for f in self.firings():
            out[f.name].add(f.nominal_ms)
        return out

    def wait_for(self, expected: Mapping[str, Iterable[int]], timeout_s: float = 120) -> None:
        """Until every expected nominal time was received, or ``timeout_s`` (the
        check then names what is missing), or the thread failed."""
        want = {n: set(ts) for n, ts in expected.items()}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.failure is None:
            got = self.nominal()
            if all(ts <= got.get(n, set()) for n, ts in want.items()):
                return
            time.sleep(0.5)

    def wait_quiet(self, quiet_s: float = 3.0, timeout_s: float = 120) -> None:
        """Until nothing new came for ``quiet_s`` (or ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        count, since = -1, time.monotonic()
        while time.monotonic() < deadline and self.failure is None:
            now = len(self.firings())
            if now != count:
                count, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.2)


def nominal_times(first_ms: int, last_ms: int, every_ms: int) -> list[int]:
    """An interval schedule's nominal times from ``first_ms`` to ``last_ms``, both
    included."""
    return list(range(first_ms, last_ms + 1, every_ms))


def gaps(times: Iterable[int], every_ms: int) -> list[tuple[int, int]]:
    """The runs of nominal times missing between the first and the last of
    ``times`` (an interval schedule's): (first missing, count) each."""
    ordered = sorted(set(times))
    return [
        (a + every_ms, (b - a) // every_ms - 1)
        for a, b in itertools.pairwise(ordered)
        if b - a > every_ms
    ]


def check_once(firings: list[Firing], expected: Mapping[str, Iterable[int]]) -> None:
    """Every expected (schedule, nominal time) fired under exactly one message id,
    no other fired, none delivered before its nominal time or its due time."""
    ids: dict[tuple[str, int], set[str]] = defaultdict(set)
    for f in firings:
        ids[(f.name, f.nominal_ms)].add(f.id)
        assert f.delivered_at_ms >= f.deliver_at_ms >= f.nominal_ms, f"early: {f}"
    want = {(n, t) for n, ts in expected.items() for t in ts}
    twice = {k: v for k, v in ids.items() if len(v) > 1}
    assert not twice, (
        f"{len(twice)} nominal times fired under two ids, e.g. {list(twice.items())[:5]}"
    )
    missing = sorted(want - set(ids))
    assert not missing, f"{len(missing)} nominal times never fired, e.g. {missing[:10]}"
    extra = sorted(set(ids) - want)
    assert not extra, f"{len(extra)} nominal times fired unexpected, e.g. {extra[:10]}"


def lateness_line(firings: list[Firing]) -> str:
    """Delivered minus nominal, ms, over the firings (the first delivery of each)."""
    first: dict[str, int] = {}
    nominal: dict[str, int] = {}
    for f in firings:
        first[f.id] = min(first.get(f.id, f.delivered_at_ms), f.delivered_at_ms)
        nominal[f.id] = f.nominal_ms
    late = sorted(first[i] - nominal[i] for i in first)
    if not late:
        return "no firings"

    def at(q: float) -> int:
        return late[min(len(late) - 1, int(q * len(late)))]

    return (
        f"{len(late)} firings, lateness (delivered - nominal) ms: "
        f"p50 {at(0.5)}, p99 {at(0.99)}, max {late[-1]}"
    )
