"""Recurring schedules fire every nominal time exactly once through failovers: real
``delayq serve`` processes under the supervisor, one shard of three nodes in sync
replication (``--min-insync 2``), ``SCHEDULES`` schedules firing every second for
``SECONDS`` seconds (a common start and end, catch-up ``all``), and the master
lost ``KILLS`` times while they fire (silent until the shard failed over, then
SIGKILLed: ``test_attempts_failover._kill_master``).

A consumer receives the firings' topic and acks them (``tests.support.firings``):
every nominal time of every schedule came under exactly one message id (a
firing written ahead and replicated before its master died is delivered by the
new master, never written again under a new id; one missed while the shard had
no master is caught up), none before its nominal time, none outside the start
and end; each schedule's state counts them all fired and none missed. The
firings' lateness (delivered minus nominal: the failovers' gaps caught up) is
printed (``-s``).

Size: ``DELAYQ_SCHEDULE_FAILOVER_SCHEDULES`` (100; 1,000 with ``--long``),
``DELAYQ_SCHEDULE_FAILOVER_SECONDS`` (40; 120 with ``--long``),
``DELAYQ_SCHEDULE_FAILOVER_KILLS`` (2)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from delayq import CatchUp, Client, MessageTemplate, ScheduleSpec
from tests.cluster.test_attempts_failover import _kill_master
from tests.cluster.test_supervisor_failover import FAST
from tests.support.cluster import LocalCluster
from tests.support.firings import FiringCounter, check_once, lateness_line, nominal_times
from tests.support.sizes import size

pytestmark = pytest.mark.timeout(1200)

SCHEDULES = size("DELAYQ_SCHEDULE_FAILOVER_SCHEDULES", ci=100, long=1_000)
SECONDS = size("DELAYQ_SCHEDULE_FAILOVER_SECONDS", ci=40, long=120)
KILLS = size("DELAYQ_SCHEDULE_FAILOVER_KILLS", ci=2, long=2)
TOPIC = "ticks"
EVERY_MS = 1_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    args = ("--replication", "sync", "--min-insync", "2", *FAST)
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args) as c:
        c.wait_insync(0, 3)
        yield c


def _spec(start_ms: int, end_ms: int, name: str) -> ScheduleSpec:
    return ScheduleSpec(
        template=MessageTemplate(topic=TOPIC, body=name.encode()),
        every_ms=EVERY_MS,
        start_ms=start_ms,
        end_ms=end_ms,
        catch_up=CatchUp.ALL,
        catch_up_window_ms=3_600_000,
    )


def create_all(client: Client, specs: dict[str, ScheduleSpec], most: int) -> dict[str, list[int]]:
    """Each schedule created (8 calls at a time, before its start), and the nominal
    times it is to fire (its next ``most`` firings as the server plans them)."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: client.create_schedule(*kv), specs.items()))
        times = pool.map(lambda n: client.next_firings(n, count=most), specs)
        return dict(zip(specs, times, strict=True))


@pytest.mark.long
def test_every_nominal_time_fires_once_through_failovers(cluster: LocalCluster) -> None:
    with Client(cluster.address(0), timeout_s=30) as client:
        start = (int(time.time()) + 10 + SCHEDULES // 50) * 1000  # after the creates
        end = start + SECONDS * 1000
        names = [f"tick-{i}" for i in range(SCHEDULES)]
        expected = create_all(client, {n: _spec(start, end, n) for n in names}, SECONDS + 2)
        assert time.time() * 1000 < start, "created before their start: make it later"
        for ts in expected.values():  # every second from the start to the end
            assert ts == nominal_times(start, ts[-1], EVERY_MS) and ts[-1] in (end - EVERY_MS, end)
        with FiringCounter(cluster.address(0), TOPIC) as counter:
            while time.time() * 1000 < start:
                time.sleep(0.2)
            for k in range(KILLS):
                # spread over the firing time: a kill every SECONDS / (KILLS + 1)
                while time.time() * 1000 < start + (k + 1) * SECONDS * 1000 // (KILLS + 1):
                    time.sleep(0.2)
                _kill_master(cluster, 0)
            while time.time() * 1000 < end:
                time.sleep(0.5)
            counter.wait_for(expected)
            counter.wait_quiet()
        assert counter.failure is None, counter.failure
        assert cluster.record(0)["epoch"] >= 1 + KILLS, "every kill failed the shard over"
        firings = counter.firings()
        print(
            f"{SCHEDULES} schedules x {SECONDS} s, {KILLS} failovers: {lateness_line(firings)}; "
            f"{counter.errors} receive calls failed and were tried again"
        )
        check_once(firings, expected)
        for name in names:
            state = client.get_schedule(name)
            assert (state.fired, state.missed, state.ended) == (len(expected[name]), 0, True), (
                name,
                state,
            )
