"""Once per key under contention, on a real ``delayq serve`` process: 64 producers
(threads, a client each, over real gRPC) schedule one key at the same moment
(three times each, one call after another) under ``if_exists`` reject, keep and
replace, while a sampler looks the key up in a loop (``lookup_key``).

- At every sample at most one message of the key is pending, and once one is,
  one always is (``replace`` cancels and stores in one record: no instant with
  none, none with two).
- reject: one call stored its message (``new``, a producer's first); every other
  was refused with ``AlreadyExists`` naming that message's id and due time.
- keep: the same, the others told ``kept`` with the winner's id, without an error.
- replace: every call stored a message of its own (distinct ids); the first in
  the log was ``new``, every later one ``replaced``; the one that stands is the
  last in the log, and every other ended (cancelled, or ended by the record that
  stored its replacement).

Rounds of a fresh key each: ``DELAYQ_KEY_ROUNDS`` (3; 30 with ``--long``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from delayq import Client
from delayq.client import NotFound
from tests.support.keyed import Answer, log_order, schedule_keyed
from tests.support.servers import ServerProcess
from tests.support.sizes import size

pytestmark = [pytest.mark.timeout(300), pytest.mark.long]

PRODUCERS = 64
CALLS = 3
"""Schedules of the key by each producer, one after another."""
ROUNDS = size("DELAYQ_KEY_ROUNDS", ci=3, long=30)
TOPIC = "reminders"


class Sampler:
    """Counts the key's pending messages in a loop from when the producers go
    (``go``, a barrier it waits at with them) until stopped (0: NotFound)."""

    def __init__(self, client: Client, key: str, go: threading.Barrier) -> None:
        self.client = client
        self.key = key
        self.go = go
        self.counts: list[int] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler")

    def count(self) -> int:
        try:
            found = self.client.lookup_key(TOPIC, self.key)
        except NotFound:
            return 0
        assert all(m.state == "pending" for m in found), found
        return len(found)

    def _run(self) -> None:
        try:
            self.go.wait()
            while not self._stop.is_set():
                self.counts.append(self.count())
            self.counts.append(self.count())  # once every producer was answered
        except BaseException as exc:  # reported by the test
            self.failures.append(exc)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def clients(start_server: Callable[..., ServerProcess]) -> Iterator[list[Client]]:
    """A client per producer, and one more (the sampler's and the checks'), last."""
    srv = start_server()
    made = [Client(srv.address, timeout_s=30) for _ in range(PRODUCERS + 1)]
    try:
        yield made
    finally:
        for c in made:
            c.close()


def race(producers: list[Client], key: str, mode: str, go: threading.Barrier) -> list[Answer]:
    """Every producer schedules ``key`` at once (``go``), ``CALLS`` times in a row;
    their answers, by producer and call (body ``KEY/PRODUCER/CALL``)."""
    answers: list[Answer | None] = [None] * (len(producers) * CALLS)
    failures: list[BaseException] = []

    def produce(i: int) -> None:
        try:
            go.wait()
            for n in range(CALLS):
                body = b"%s/%d/%d" % (key.encode(), i, n)
                answers[i * CALLS + n] = schedule_keyed(producers[i], TOPIC, body, key, mode)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(len(producers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return [a for a in answers if a is not None]


@pytest.mark.parametrize("mode", ["reject", "keep", "replace"])
def test_one_pending_message_per_key_under_64_concurrent_producers(
    clients: list[Client], mode: str
) -> None:
    producers, checker = clients[:PRODUCERS], clients[PRODUCERS]
    for r in range(ROUNDS):
        key = f"{mode}-order-{r}"
        go = threading.Barrier(PRODUCERS + 1)
        with Sampler(checker, key, go) as sampler:
            answers = race(producers, key, mode, go)
        assert not sampler.failures, sampler.failures
        counts = sampler.counts
        assert max(counts) == 1, f"{key}: two pending at once: {counts}"
        first = counts.index(1)
        assert 0 not in counts[first:], f"{key}: none pending after one was: {counts}"
        [standing] = checker.lookup_key(TOPIC, key)
        outcomes = sorted(a.outcome for a in answers)
        if mode == "replace":
            ids = [a.id for a in answers]
            assert len(set(ids)) == len(answers), "every replace stored a message of its own"
            in_log = sorted(answers, key=lambda a: log_order(a.id))
            assert [a.outcome for a in in_log] == ["new"] + ["replaced"] * (len(answers) - 1)
            assert standing.id == in_log[-1].id, "the last one written stands"
            last = answers.index(in_log[-1])
            assert standing.body == b"%s/%d/%d" % (key.encode(), last // CALLS, last % CALLS)
            for a in in_log[:-1]:
                assert checker.lookup(a.id).state in ("cancelled", "rescheduled"), a
        else:
            others = "exists" if mode == "reject" else "kept"
            assert outcomes == sorted(["new"] + [others] * (len(answers) - 1)), outcomes
            [won] = [i for i, a in enumerate(answers) if a.outcome == "new"]
            assert won % CALLS == 0, "a producer's first call won"
            assert {a.id for a in answers} == {standing.id}, "every caller told the one that stands"
            assert {a.deliver_at_ms for a in answers} == {standing.deliver_at_ms}
            assert standing.body == b"%s/%d/0" % (key.encode(), won // CALLS)
