"""A producer's retried Schedule after a failover is idempotent by key: real
``delayq serve`` processes under the supervisor, one shard of three nodes in sync
replication (``--min-insync 2``), the master lost (silent until the shard failed
over, then SIGKILLed: ``test_attempts_failover._kill_master``) and a replica
promoted.

- The answer lost: a schedule (``if_exists`` reject or keep) is answered, the
  master is lost, and the producer, never having seen that answer, sends the same
  call again: the new master answers with the first call's id (``exists`` with
  ``AlreadyExists``, or ``kept``), and the key has that one message.
- The call cut: a producer schedules key after key while the master is lost under
  it; every call that failed (timed out, unavailable) is sent again until
  answered. Whatever the first attempt did (stored and streamed, or never
  stored), each key has exactly one pending message, the answer the producer
  kept names it, and a further retry names it too. The keys whose calls failed
  are printed (``-s``).
- A client without retries: the call that meets the lost master fails and the
  next one goes to the new master (its map fetched again after the failure).

Keys: ``DELAYQ_KEY_FAILOVER_KEYS`` (150; 1,500 with ``--long``), the master lost
once (3 times with ``--long``)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from delayq import Client, RetryPolicy
from delayq.client import ClientError
from tests.cluster.test_attempts_failover import _kill_master
from tests.cluster.test_supervisor_failover import FAST
from tests.support.cluster import LocalCluster
from tests.support.keyed import Answer, schedule_keyed
from tests.support.sizes import size

pytestmark = pytest.mark.timeout(600)

KEYS = size("DELAYQ_KEY_FAILOVER_KEYS", ci=150, long=1_500)
KILLS = size("DELAYQ_KEY_FAILOVER_KILLS", ci=1, long=3)
TOPIC = "trials"
GIVE_UP_S = 120.0
"""How long one call is sent again before the test fails: far longer than a failover."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    args = ("--replication", "sync", "--min-insync", "2", *FAST)
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args) as c:
        c.wait_insync(0, 3)
        yield c


def until_answered(client: Client, key: str, mode: str, failed: list[str] | None = None) -> Answer:
    """The keyed schedule of ``key``, sent again after every failure (the producer
    cannot know whether a failed call was stored) until it is answered; each
    failure's key appended to ``failed``."""
    deadline = time.monotonic() + GIVE_UP_S
    while True:
        try:
            return schedule_keyed(client, TOPIC, key.encode(), key, mode)
        except ClientError:
            if failed is not None:
                failed.append(key)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def retried(mode: str) -> str:
    """The outcome a retry of an answered ``mode`` schedule is told."""
    return "exists" if mode == "reject" else "kept"


@pytest.mark.parametrize("mode", ["reject", "keep"])
def test_a_retry_whose_first_answer_was_lost_gets_the_same_id_from_the_new_master(
    cluster: LocalCluster, mode: str
) -> None:
    with Client(cluster.address(0), timeout_s=5) as client:
        first = schedule_keyed(client, TOPIC, b"trial of account 7", "account-7", mode)
        assert first.outcome == "new"
        before = cluster.record(0)
        _kill_master(cluster, 0)
        assert cluster.record(0)["master"] != before["master"], "a replica was promoted"
        again = until_answered(client, "account-7", mode)
        assert (again.outcome, again.id, again.deliver_at_ms) == (
            retried(mode),
            first.id,
            first.deliver_at_ms,
        )
        [held] = client.lookup_key(TOPIC, "account-7")
        assert (held.id, held.state, held.body) == (first.id, "pending", b"trial of account 7")


def test_a_client_without_retries_routes_to_the_new_master_after_a_failed_call(
    cluster: LocalCluster,
) -> None:
    """``RetryPolicy(attempts=1)``: the call that meets the lost master fails, and
    has the map fetched again, so the next call goes to the promoted replica."""
    with Client(cluster.address(0), timeout_s=3, retry=RetryPolicy(attempts=1)) as client:
        first = schedule_keyed(client, TOPIC, b"trial of account 8", "account-8", "keep")
        before = cluster.record(0)
        _kill_master(cluster, 0)
        assert cluster.record(0)["master"] != before["master"], "a replica was promoted"
        with contextlib.suppress(ClientError):  # to the lost master (now a replica)
            schedule_keyed(client, TOPIC, b"again", "account-8", "keep")
        again = schedule_keyed(client, TOPIC, b"again", "account-8", "keep")
        assert (again.outcome, again.id) == ("kept", first.id)


class Producer:
    """Schedules ``key-0``, ``key-1``, ... in turn under ``mode``, each until
    answered, until stopped and ``KEYS`` were (so that it sends while each master
    is lost); ``answers`` by key, ``failed``: the key of each failed call."""

    def __init__(self, client: Client, mode: str) -> None:
        self.client = client
        self.mode = mode
        self.answers: dict[str, Answer] = {}
        self.failed: list[str] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer")

    def _run(self) -> None:
        try:
            i = 0
            while i < KEYS or not self._stop.is_set():
                key = f"key-{i}"
                self.answers[key] = until_answered(self.client, key, self.mode, self.failed)
                i += 1
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + GIVE_UP_S
        while len(self.answers) < count and self._thread.is_alive():
            assert time.monotonic() < deadline, f"{len(self.answers)} answers of {count}"
            time.sleep(0.02)


@pytest.mark.long
@pytest.mark.parametrize("mode", ["reject", "keep"])
def test_calls_cut_by_a_failover_and_sent_again_leave_one_message_per_key(
    cluster: LocalCluster, mode: str
) -> None:
    # no retry inside the client: each call cut is the producer's to send again
    with Client(cluster.address(0), timeout_s=3, retry=RetryPolicy(attempts=1)) as client:
        with Producer(client, mode) as producer:
            for k in range(KILLS):
                producer.wait_for((k + 1) * KEYS // (KILLS + 1))
                _kill_master(cluster, 0)
        assert producer.failure is None, producer.failure
        assert cluster.record(0)["epoch"] >= 1 + KILLS, "every kill failed the shard over"
        assert producer.failed, "calls were cut by the failovers"
        answers = producer.answers
        assert len(answers) >= KEYS
        outcomes = Counter(a.outcome for a in answers.values())
        print(f"{len(answers)} keys, {outcomes}; failed calls: {Counter(producer.failed)}")
        for key, answer in answers.items():
            held = client.lookup_key(TOPIC, key)
            assert [m.id for m in held] == [answer.id], (key, answer, held)
            assert held[0].body == key.encode()
            again = schedule_keyed(client, TOPIC, key.encode(), key, mode)
            assert (again.outcome, again.id) == (retried(mode), answer.id), (key, answer)
