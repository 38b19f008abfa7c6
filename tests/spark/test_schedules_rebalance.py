"""Recurring schedules through a rebalance, on real processes and real Spark: a
2-shard ``delayq cluster`` with ``SCHEDULES`` schedules firing every second
(catch-up ``all``) is scaled to 3 shards (``delayq cluster scale``: the Spark job
moves every pending message whose key the 3-shard map places elsewhere, and a
schedule's plan and its firings written ahead are keyed by its name) while they
fire and a consumer receives them (``tests.support.firings``), beside 20,000
keyed messages due in a day; the job is SIGKILLed once it moved some, then run
again (a plan moved, or fired on its old shard, between two runs; a job done
before the kill is not run again). After the switch each schedule fires a few seconds
more and is deleted. Then:

- the schedules the new map places on the new shard were moved: their plan is
  there, and their firings after the switch come from it;
- every schedule fired every nominal time from its start to its last once: one
  message id each (never once on the old shard and again on the new), none
  early, none skipped (its state counts none missed).

The firings' lateness is printed (``-s``). Schedules:
``DELAYQ_SCHEDULE_REBALANCE_SCHEDULES`` (200; 1,000 with ``--long``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from delayq import CatchUp, Client, MessageTemplate, Outgoing, ScheduleSpec, shardmap
from delayq.ids import MessageId
from tests.spark.test_rebalance import kill_the_job_once_it_moves, scale, scale_to_3
from tests.support.cluster import LocalCluster, running_cluster_cli
from tests.support.firings import FiringCounter, check_once, gaps, lateness_line
from tests.support.sizes import size

pytestmark = [pytest.mark.timeout(1800), pytest.mark.long]

SCHEDULES = size("DELAYQ_SCHEDULE_REBALANCE_SCHEDULES", ci=200, long=1_000)
FILLER = 20_000
"""Keyed messages due in a day beside the schedules: a job that lasts."""
DAY_S = 86_400
TOPIC = "ticks"
EVERY_MS = 1_000


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("DELAYQ_SPARK_MASTER", "local[2]")  # the rebalance job's
    with LocalCluster(tmp_path / "cluster", shards=2) as c:
        yield c


def _now_ms() -> int:
    return int(time.time() * 1000)


def _wait_past(counter: FiringCounter, names: list[str], after_ms: int) -> None:
    """Until each of ``names`` fired a nominal time past ``after_ms``."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and counter.failure is None:
        got = counter.nominal()
        if all(max(got.get(n, {0})) > after_ms for n in names):
            return
        time.sleep(0.5)
    late = [n for n in names if max(counter.nominal().get(n, {0})) <= after_ms]
    raise AssertionError(f"{len(late)} schedules fired nothing past {after_ms}: {late[:10]}")


def test_schedules_keep_firing_once_through_a_rebalance_from_2_to_3(
    cluster: LocalCluster,
) -> None:
    names = [f"tick-{i}" for i in range(SCHEDULES)]
    moved = [n for n in names if shardmap.shard_of_key(n, 3) != shardmap.shard_of_key(n, 2)]
    assert moved and len(moved) < len(names), "some schedules move, some stay"
    start = (_now_ms() // 1000 + 5 + SCHEDULES // 100) * 1000
    spec = ScheduleSpec(
        template=MessageTemplate(topic=TOPIC, body=b"tick"),
        every_ms=EVERY_MS,
        start_ms=start,
        catch_up=CatchUp.ALL,
        catch_up_window_ms=3_600_000,
    )
    with (
        Client(cluster.address(0), timeout_s=30) as client,
        FiringCounter(cluster.address(0), TOPIC) as counter,
    ):
        for n in names:
            client.create_schedule(n, spec)
        for part in range(0, FILLER, 2_000):  # what makes the job last (its kill midway)
            filler = [
                Outgoing(topic="later", body=b"f", key=f"f-{i}", delay=DAY_S)
                for i in range(part, min(FILLER, part + 2_000))
            ]
            assert all(s.ok for s in client.schedule_many(filler))
        assert _now_ms() < start, "created before their start: make it later"
        _wait_past(counter, names, start + EVERY_MS)
        # 2 -> 3, the job killed once it moved some (the map stays as it was),
        # then run again; a job quicker than the kill is done at once
        with running_cluster_cli("scale", *scale_to_3(cluster)) as running:
            kill_the_job_once_it_moves(cluster)
            _, err = running.communicate(timeout=120)
        print(f"the first job {'was killed' if running.returncode else 'ended first'}")
        if running.returncode:
            assert "rebalance job failed" in err, err
            assert cluster.current_map().owners == 2, "no switch on a failed job"
            up = scale(cluster, 3)
            assert up.returncode == 0, (up.stdout, up.stderr, cluster.logs())
        switched = _now_ms()
        m = cluster.current_map()
        assert (m.count, m.owners) == (3, 3)
        _wait_past(counter, names, switched + 3 * EVERY_MS)
        states = {n: client.get_schedule(n) for n in names}
        for n in names:  # its firings written ahead are cancelled with it
            client.delete_schedule(n)
        counter.wait_quiet()
    assert counter.failure is None, counter.failure

    for n in moved:
        assert MessageId.parse(states[n].id).shard == 2, f"{n}'s plan moved to shard 2"
    firings = counter.firings()
    print(f"{SCHEDULES} schedules, {len(moved)} moved: {lateness_line(firings)}")
    after = [f for f in firings if f.name in moved and f.nominal_ms > switched + EVERY_MS]
    assert after and all(MessageId.parse(f.id).shard == 2 for f in after), "fired on shard 2"
    fired: dict[str, set[int]] = {n: set() for n in names}
    for f in firings:
        fired[f.name].add(f.nominal_ms)
    check_once(firings, fired)
    for n in names:
        assert min(fired[n]) == start and not gaps(fired[n], EVERY_MS), (n, gaps(fired[n], 1000))
        assert states[n].missed == 0, (n, states[n])
